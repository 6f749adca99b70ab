package faults

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/faults/wallclock"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
)

// clockStep is how far the Clock scenario steps a replica's wall clock.
const clockStep = 10 * time.Minute

// stepWall sets the replica's wall clock step from true time and waits until the
// process shows it: the Date header of its metrics endpoint is its wall clock.
func (r *replica) stepWall(ctx context.Context, step time.Duration) error {
	if r.stepFile == "" {
		return fmt.Errorf("%s: no wall-clock step file", filepath.Base(r.Dir))
	}
	if err := wallclock.Step(r.stepFile, step); err != nil {
		return err
	}
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(100 * time.Millisecond) {
		if off, err := wallOf(ctx, r.metrics); err == nil && (off-step).Abs() < 2*time.Second {
			return nil
		}
	}
	off, err := wallOf(ctx, r.metrics)
	return fmt.Errorf("%s: stepped %v, its clock is %v off (%v); was the manager built with the wall-clock overlay?", filepath.Base(r.Dir), step, off, err)
}

// wallOf returns how far ahead of ours the wall clock of the process serving addr is,
// read from the Date header of its answer (whole seconds).
func wallOf(ctx context.Context, addr string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	at, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return 0, err
	}
	return time.Until(at.Add(500 * time.Millisecond)), nil
}

// step steps a replica's wall clock and records it as a fault.
func (r *run) step(ctx context.Context, rp *replica, step time.Duration, moment string) error {
	if err := rp.stepWall(ctx, step); err != nil {
		return err
	}
	what := fmt.Sprintf("%s's clock set %+v from true time %s", filepath.Base(rp.Dir), step, moment)
	r.cfg.Log("%s", what)
	r.rep.Faults = append(r.rep.Faults, what)
	return nil
}

// failbackAcrossAStep takes the Cloudflare edge's health down and, once every record
// points at the AWS edge, up again; a few seconds into the failback hold-down (the
// run of successful probes has begun) the leader's clock steps ahead. The failback
// must wait out the hold-down all the same: a hold-down measured by the wall clock
// would end at once.
func (r *run) failbackAcrossAStep(ctx context.Context) error {
	r.hw.CFUp.Store(false)
	if err := r.waitUntil(ctx, "every record failed over", func() bool { return r.onAWS() == r.cfRecords() }); err != nil {
		return err
	}
	up := time.Now()
	r.hw.CFUp.Store(true)
	lead := leader(ctx, r.replicas)
	if lead == nil {
		return fmt.Errorf("no replica leads")
	}
	time.Sleep(time.Until(up.Add(8 * time.Second))) // two probes at 2 s: the run has begun
	if err := r.step(ctx, lead, clockStep, "in the failback hold-down"); err != nil {
		return err
	}
	stepped := time.Now()
	if err := r.waitUntil(ctx, "every record failed back", func() bool { return r.onAWS() == 0 }); err != nil {
		return err
	}
	r.rep.Failback = time.Since(up)
	r.cfg.Log("failed back %s after the edge was up (hold-down %s)", r.rep.Failback.Round(100*time.Millisecond), harness.FailbackHoldDown)
	return r.faultEnded(ctx, "the step in the hold-down", stepped)
}

// stepClocks steps the replicas' wall clocks once a round's hand-over is being
// granted, in turn:
//   - round 0: the leader (ahead since the failback) steps back to true time and the
//     other replica ahead: a candidate whose clock is ten minutes ahead of the
//     holder's must not take the lease while the holder renews it;
//   - round 1: the leader is killed, the replica ahead takes over, then steps back;
//   - round 2: the leader steps ahead while the names are being used.
func (r *run) stepClocks(ctx context.Context, round int, previous map[string]string) error {
	moment := []string{"granting", "granting", "using"}[round%3]
	killMoment(ctx, r.hw, moment, r.moved, previous, 20*time.Second)
	lead := leader(ctx, r.replicas)
	if lead == nil {
		return fmt.Errorf("round %d: no replica leads", round)
	}
	other := r.replicas[0]
	if other == lead {
		other = r.replicas[1]
	}
	in := fmt.Sprintf("in round %d (%s)", round, moment)
	switch round % 3 {
	case 0:
		if err := r.step(ctx, lead, 0, in); err != nil {
			return err
		}
		if err := r.step(ctx, other, clockStep, in); err != nil {
			return err
		}
		stepped, pid := time.Now(), lead.PID()
		if err := r.faultEnded(ctx, "the steps "+in, stepped); err != nil {
			return err
		}
		// Past a lease duration (15 s) and a retry after the steps, the holder holds.
		time.Sleep(time.Until(stepped.Add(20 * time.Second)))
		if now := leader(ctx, r.replicas); now != lead || lead.PID() != pid {
			r.rep.LeaseTaken++
			r.cfg.Log("round %d: the lease changed hands after the steps", round)
		}
		return nil
	case 1:
		// The killed replica stays down until the one ahead has taken over: started
		// again at once, it could win the lease first.
		if err := r.killReplica(ctx, lead, in, true); err != nil {
			return err
		}
		if now := leader(ctx, r.replicas); now != other {
			return fmt.Errorf("round %d: the replica ahead did not take over", round)
		}
		if err := r.step(ctx, other, 0, in+" after it took over"); err != nil {
			return err
		}
		return r.faultEnded(ctx, "the step back of the new leader "+in, time.Now())
	default:
		if err := r.step(ctx, lead, clockStep, in); err != nil {
			return err
		}
		return r.faultEnded(ctx, "the step "+in, time.Now())
	}
}

// watchLeaders counts, every second, the moments at which both replicas say they
// lead.
func (r *run) watchLeaders(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		leading := 0
		for _, rp := range r.replicas {
			if v, ok := scrape(ctx, rp.metrics, "leader_election_master_status{"); ok && v == 1 {
				leading++
			}
		}
		if leading > 1 {
			r.twoLeaders.Add(1)
		}
	}
}
