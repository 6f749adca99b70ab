package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/faults/wallclock"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// Scenarios of RunScenario. Each runs two manager replicas with leader election, each
// serving its embedded proxy, over Routes TenantRoutes; in each of Rounds rounds Moves
// hostnames change tenant while the scenario's fault strikes, and a checker samples
// which tenant each of those hostnames leads to, in both providers' records and in
// both proxies.
const (
	// Leader: the leader is killed with SIGKILL in the first sync (a third of the
	// records written), in a failover (a third of the records moved) and at a
	// moment of each hand-over.
	Leader = "leader"
	// APIServer: the kube-apiserver is restarted twice during the initial sync; then,
	// in turn, etcd is stopped for EtcdDown and the API server restarted while the
	// hostnames move.
	APIServer = "apiserver"
	// Outage: a first round without fault measures the calls a hand-over takes; in
	// the next, Route53 answers 503 for FaultFor from the hand-over.
	Outage = "outage"
	// Throttle: as Outage, but Cloudflare answers 429 (Retry-After 1 s) to 80% of
	// calls for FaultFor.
	Throttle = "throttle"
	// LostAnswers: as Outage, but both providers apply a third of the writes and
	// drop their answer, for FaultFor.
	LostAnswers = "lost"
	// Clock: the replicas' wall clocks step clockStep ahead and back (their monotonic
	// clocks run on, as under an NTP step): the leader's in a failback hold-down; in
	// turn as the hostnames move, the leader's back and the other's ahead (a candidate
	// ahead of the holder), the leader killed and the replica ahead taking over and
	// stepping back, the leader's ahead. The manager must be built with the overlay of
	// internal/faults/wallclock.
	Clock = "clock"
)

// ScenarioConfig is a run of a scenario.
type ScenarioConfig struct {
	Scenario string
	// Manager is the manager binary (go build ./cmd).
	Manager string
	// Routes are created, one hostname each, before the first round.
	Routes int
	// Moves is how many of their hostnames change tenant in each round: the holder
	// drops the name, which two other routes list, so it is contested.
	Moves int
	// Rounds of moves.
	Rounds int
	// KillWithin bounds the wait for a kill moment (Leader).
	KillWithin time.Duration
	// Route53Latency is added to every Route53 call while the names move (Leader).
	Route53Latency time.Duration
	// EtcdDown is how long etcd stays stopped (APIServer, default 30 s).
	EtcdDown time.Duration
	// FaultFor is how long a provider fault lasts (Outage, Throttle, LostAnswers).
	FaultFor time.Duration
	// Settle bounds the wait for each round to converge.
	Settle time.Duration
	// SampleEvery is the checker's period (default 250 ms).
	SampleEvery time.Duration
	ManagerArgs []string
	Dir         string
	Log         func(format string, args ...any)
}

// ScenarioReport is what a run saw.
type ScenarioReport struct {
	Scenario string
	// Faults describes each fault as it struck.
	Faults  []string
	Samples int
	// Split are the samples at which one hostname led to two tenants: between the
	// providers' records (DNS), between the proxies (Proxy), or between DNS and a
	// proxy (DNSProxy). Examples describes the first few.
	SplitDNS, SplitProxy, SplitDNSProxy int
	// Unsaved are the samples at which DNS led a hostname to a tenant that no saved
	// status granted it, in a read before or after: a grant used before it was saved,
	// which a new leader does not know and may give to another tenant.
	Unsaved  int
	Examples []string
	// Duration the checker ran (Samples over it is its pace); ProxyUnanswered of
	// ProxyAsked questions got no answer (a proxy down or restarting).
	Duration                    time.Duration
	ProxyAsked, ProxyUnanswered int64
	// Recovered: after each fault, how long from its end until every hostname had its
	// desired records in both providers, once, and every route was Ready.
	Recovered []time.Duration
	TimedOut  bool
	// Calls of the faulted provider (Outage, Throttle, LostAnswers): a hand-over
	// without fault (Baseline), during the fault, and from its end until recovered.
	BaselineCalls, FaultCalls, RecoveryCalls int
	// BaselineLists and RecoveryLists are the reads among them (list pages, change
	// status): a zone resync that fell due during a long fault runs after it.
	BaselineLists, RecoveryLists int
	// Injected counts the provider calls the fault answered (503, 429, dropped), in
	// both providers.
	Injected int
	// Exits are the replicas' own exits (not the scenario's kills), as offsets from
	// the end of the last fault: a manager exits when it loses its lease, and must
	// not exit again once the fault is over.
	Exits []time.Duration
	// TwoLeaders counts the seconds at which both replicas said they led; LeaseTaken
	// the rounds (Clock) in which the lease changed hands while its holder lived.
	TwoLeaders, LeaseTaken int
	// Failback is how long the failback took from the edge's health coming back, a
	// step of the leader's clock in its hold-down (Clock): never less than the
	// hold-down.
	Failback time.Duration
	// Final is what the providers held at the end against what the routes want.
	Final string
	// Goroutines and heap of each replica once the routes were first Ready, and at
	// the end (from its metrics endpoint); a replica that exited or was killed
	// between is a new process (PID).
	Before, After []ProcessFigures
	// SecretInLogs names a log file holding a credential.
	SecretInLogs string
	ManagerLogs  string

	lastFaultEnd time.Time
}

// ProcessFigures are a manager's goroutines and live heap.
type ProcessFigures struct {
	// PID tells whether two figures are of one process: a replica started again
	// after a kill or a lost lease is a new one.
	PID        int
	Goroutines int
	HeapBytes  int64
}

// Clean reports a run without a split sample, recovered after every fault within a
// minute, no replica exiting once the faults were over, and the provider's calls
// after an outage or a 429 storm within 10% of a hand-over's.
func (r ScenarioReport) Clean() bool {
	if len(r.Recovered) == 0 {
		return false // no fault struck (a fault never recovered from times out)
	}
	for _, d := range r.Recovered {
		if d > time.Minute {
			return false
		}
	}
	for _, e := range r.Exits {
		if e > 15*time.Second { // a lease lost in the fault ends the process up to its renew deadline later
			return false
		}
	}
	// A step of the wall clock is no reason for a replica to exit, nor to fail back
	// before the hold-down.
	if r.Scenario == Clock && (len(r.Exits) > 0 || r.Failback < harness.FailbackHoldDown) {
		return false
	}
	if r.TwoLeaders > 0 || r.LeaseTaken > 0 {
		return false
	}
	// A refusal (503, 429) applied nothing, so the recovery needs no more writes than
	// the work left; after lost answers the zones must be listed again.
	if (r.Scenario == Outage || r.Scenario == Throttle) && (r.BaselineCalls == 0 || (r.RecoveryCalls-r.RecoveryLists)*10 > (r.BaselineCalls-r.BaselineLists)*11) {
		return false
	}
	return !r.TimedOut && r.Doubles() == 0 && r.Final == "exact" && r.SecretInLogs == ""
}

// Doubles counts the samples at which a hostname led to two tenants, or to one by a
// grant never saved.
func (r ScenarioReport) Doubles() int {
	return r.SplitDNS + r.SplitProxy + r.SplitDNSProxy + r.Unsaved
}

func (r ScenarioReport) String() string {
	rec := make([]string, len(r.Recovered))
	for i, d := range r.Recovered {
		rec[i] = d.Round(100 * time.Millisecond).String()
	}
	exits := make([]string, len(r.Exits))
	for i, d := range r.Exits {
		exits[i] = d.Round(100 * time.Millisecond).String()
	}
	calls := ""
	if r.BaselineCalls > 0 {
		calls = fmt.Sprintf("; calls of the faulted provider: %d (%d reads) for a hand-over, %d during the fault (%d answered by it), %d (%d reads) to recover (writes %.2fx)",
			r.BaselineCalls, r.BaselineLists, r.FaultCalls, r.Injected, r.RecoveryCalls, r.RecoveryLists,
			float64(r.RecoveryCalls-r.RecoveryLists)/float64(max(1, r.BaselineCalls-r.BaselineLists)))
	}
	if r.Failback > 0 {
		calls += fmt.Sprintf("; failed back %s after the edge was up (hold-down %s)", r.Failback.Round(100*time.Millisecond), harness.FailbackHoldDown)
	}
	return fmt.Sprintf("%s: %v; %d samples in %s (%d of %d proxy questions unanswered): split DNS %d, proxy %d, DNS/proxy %d, DNS by an unsaved grant %d %v; recovered after each fault in %v (timed out: %t)%s; replicas' own exits at %v from the last fault's end; seconds with two leaders %d, leases taken from a live holder %d; final records: %s; replicas' goroutines and heap, start -> end: %s; secret in %q",
		r.Scenario, r.Faults, r.Samples, r.Duration.Round(time.Second), r.ProxyUnanswered, r.ProxyAsked, r.SplitDNS, r.SplitProxy, r.SplitDNSProxy, r.Unsaved, r.Examples, rec, r.TimedOut, calls,
		exits, r.TwoLeaders, r.LeaseTaken, r.Final, r.growth(), r.SecretInLogs)
}

// growth describes each replica's goroutines and heap at the start and the end.
func (r ScenarioReport) growth() string {
	var out []string
	for i := range min(len(r.Before), len(r.After)) {
		b, a := r.Before[i], r.After[i]
		same := "same process"
		if a.PID != b.PID {
			same = "restarted"
		}
		out = append(out, fmt.Sprintf("%c: %d -> %d, %d -> %d MiB (%s)", 'a'+i, b.Goroutines, a.Goroutines, b.HeapBytes>>20, a.HeapBytes>>20, same))
	}
	return strings.Join(out, "; ")
}

// run is one scenario's world, replicas and moved hostnames.
type run struct {
	cfg      ScenarioConfig
	hw       *harness.World
	replicas []*replica
	moved    []string
	rep      *ScenarioReport
	provider *faulted // Outage, Throttle, LostAnswers

	twoLeaders atomic.Int64
}

// RunScenario runs a scenario.
func RunScenario(ctx context.Context, cfg ScenarioConfig) (ScenarioReport, error) {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = 250 * time.Millisecond
	}
	if cfg.EtcdDown == 0 {
		cfg.EtcdDown = 30 * time.Second
	}
	rep := ScenarioReport{Scenario: cfg.Scenario, ManagerLogs: cfg.Dir}
	round, ok := rounds[cfg.Scenario]
	if !ok {
		return rep, fmt.Errorf("unknown scenario %q", cfg.Scenario)
	}
	hw, err := harness.Start(ctx, cfg.Dir, []string{zoneName})
	if err != nil {
		return rep, err
	}
	defer hw.Stop()
	if err := echoBackend(ctx, hw); err != nil {
		return rep, err
	}
	r := &run{cfg: cfg, hw: hw, rep: &rep}

	supervised, stopSupervising := context.WithCancel(ctx)
	defer stopSupervising()
	r.replicas = make([]*replica, 2)
	for i := range r.replicas {
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("replica-%c", 'a'+i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return rep, err
		}
		rp := &replica{Manager: &harness.Manager{Binary: cfg.Manager, Kubeconfig: hw.Kubeconfig, Dir: dir},
			proxy: freeAddr(), metrics: freeAddr()}
		if cfg.Scenario == Clock {
			rp.stepFile = filepath.Join(dir, "wall-step")
			rp.Env = []string{wallclock.EnvFile + "=" + rp.stepFile}
		}
		rp.args = append([]string{"--leader-elect", "--proxy-bind-address", rp.proxy, "--metrics-bind-address", rp.metrics,
			"--metrics-secure=false"}, cfg.ManagerArgs...)
		r.replicas[i] = rp
		defer rp.Stop(syscall.SIGKILL)
		if err := rp.supervise(supervised); err != nil {
			return rep, err
		}
	}

	// Routes t<i> hold t<i>.<zone>; the first Moves of them, labelled for the checker,
	// also get two claimants and change tenant in each round.
	names := make([]string, cfg.Routes)
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
	}
	r.moved = make([]string, cfg.Moves)
	for i := range r.moved {
		r.moved[i] = names[i] + "." + zoneName
	}
	chk := &checker{w: hw, hosts: r.moved, proxies: []string{r.replicas[0].proxy, r.replicas[1].proxy},
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	cctx, stopChecker := context.WithCancel(ctx)
	defer stopChecker()
	checkStart := time.Now()
	checked := make(chan struct{})
	go func() { defer close(checked); chk.run(cctx, cfg.SampleEvery) }()
	watched := make(chan struct{})
	go func() { defer close(watched); r.watchLeaders(cctx) }()

	host := func(n string) string { return n + "." + zoneName }
	if err := createClaimants(ctx, hw, names[:cfg.Moves], host); err != nil {
		return rep, err
	}
	if err := hw.CreateRoutes(ctx, names[cfg.Moves:], host); err != nil {
		return rep, err
	}
	switch cfg.Scenario {
	case APIServer:
		if err := r.restartDuringSync(ctx); err != nil {
			return rep, err
		}
	case Leader:
		if err := r.killDuringSync(ctx); err != nil {
			return rep, err
		}
	}
	if _, err := converge(ctx, hw, cfg.Settle, nil); err != nil {
		return rep, err
	}
	claimant := func(i, n int) string { return fmt.Sprintf("c%d-%d", i, n) }
	var claimants []string
	for i := range cfg.Moves {
		claimants = append(claimants, claimant(i, 0), claimant(i, 1))
	}
	if err := createClaimants(ctx, hw, claimants, func(n string) string {
		i, _, _ := strings.Cut(strings.TrimPrefix(n, "c"), "-")
		return "t" + i + "." + zoneName
	}); err != nil {
		return rep, err
	}
	if _, err := converge(ctx, hw, cfg.Settle, nil); err != nil {
		return rep, err
	}
	cfg.Log("%d routes ready, %d hostnames contested by two claimants each", cfg.Routes, cfg.Moves)
	switch cfg.Scenario {
	case Leader:
		if err := r.killDuringFailover(ctx); err != nil {
			return rep, err
		}
	case Clock:
		if err := r.failbackAcrossAStep(ctx); err != nil {
			return rep, err
		}
	}
	for _, rp := range r.replicas {
		rep.Before = append(rep.Before, figures(ctx, rp))
	}

	for i := range cfg.Rounds {
		if cfg.Scenario == Outage || cfg.Scenario == Throttle || cfg.Scenario == LostAnswers {
			r.startProviderFault(i)
		}
		// Each moved hostname's holder lets it go (it lists a new name instead); a new
		// claimant joins the one left from before, so that two routes want it.
		previous, err := handOver(ctx, hw, r.moved, i, claimant)
		if err != nil {
			return rep, err
		}
		if err := round(r, ctx, i, previous); err != nil {
			if rep.TimedOut {
				cfg.Log("round %d: %v", i, err)
				break
			}
			return rep, err
		}
	}
	time.Sleep(2 * time.Second) // a last few samples of the end state
	stopChecker()
	<-checked
	chk.result(&rep)
	<-watched
	rep.TwoLeaders = int(r.twoLeaders.Load())
	rep.Duration = time.Since(checkStart)
	chk.client.CloseIdleConnections()
	time.Sleep(2 * time.Second) // the proxies close their side
	for _, rp := range r.replicas {
		rep.After = append(rep.After, figures(ctx, rp))
	}
	final, err := exact(ctx, hw)
	if err != nil {
		return rep, err
	}
	rep.Final = final
	stopSupervising()
	for _, rp := range r.replicas {
		rep.Exits = append(rep.Exits, rp.exitedBy(rep.lastFaultEnd)...)
		rp.Stop(syscall.SIGTERM)
	}
	rep.SecretInLogs = secretIn(cfg.Dir)
	return rep, nil
}

// faultEnded records a fault's end and waits for the world to converge again.
func (r *run) faultEnded(ctx context.Context, what string, ended time.Time) error {
	r.rep.lastFaultEnd = ended
	if _, err := converge(ctx, r.hw, r.cfg.Settle, r.moved); err != nil {
		r.rep.TimedOut = true
		return fmt.Errorf("after %s: %w", what, err)
	}
	took := time.Since(ended)
	r.rep.Recovered = append(r.rep.Recovered, took)
	r.cfg.Log("%s: recovered %s after its end", what, took.Round(100*time.Millisecond))
	return nil
}

// rounds are what each scenario does once a round's hand-over is written.
var rounds = map[string]func(r *run, ctx context.Context, round int, previous map[string]string) error{
	Leader:      (*run).killLeader,
	APIServer:   (*run).controlPlaneFault,
	Outage:      (*run).providerFault,
	Throttle:    (*run).providerFault,
	LostAnswers: (*run).providerFault,
	Clock:       (*run).stepClocks,
}

// killLeader kills the leader at one of killMoments in turn.
func (r *run) killLeader(ctx context.Context, round int, previous map[string]string) error {
	// Route53 answers slowly while the names move: a route is Ready, and its status
	// written, only once its records are in both providers, so a grant used before
	// it is saved stays unsaved for that long.
	r.hw.R53.SetFaults(emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: r.cfg.Route53Latency}})
	moment := killMoments[round%len(killMoments)]
	after := killMoment(ctx, r.hw, moment, r.moved, previous, r.cfg.KillWithin)
	if after >= r.cfg.KillWithin {
		r.cfg.Log("round %d: the moment did not come; %s", round, claimsOf(ctx, r.hw, r.moved[0]))
	}
	// Route53 is prompt again from the kill on, as before the names moved.
	r.hw.R53.SetFaults(emulatorkit.Faults{})
	return r.killTheLeader(ctx, fmt.Sprintf("in round %d, %s after the hand-over (%s)", round, after.Round(time.Millisecond), moment))
}

// restartDuringSync restarts the API server when a third, and again when two thirds,
// of the routes have their Cloudflare records.
func (r *run) restartDuringSync(ctx context.Context) error {
	for _, share := range []int{1, 2} {
		want := r.cfg.Routes * share / 3
		if err := r.waitUntil(ctx, fmt.Sprintf("%d records", want), func() bool { return r.cfRecords() >= want }); err != nil {
			return err
		}
		began := time.Now()
		if err := r.hw.RestartAPIServer(ctx, 0); err != nil {
			return err
		}
		what := fmt.Sprintf("API server restarted at %d of %d records (down %s)", want, r.cfg.Routes, time.Since(began).Round(100*time.Millisecond))
		r.cfg.Log("%s", what)
		r.rep.Faults = append(r.rep.Faults, what)
		r.rep.lastFaultEnd = time.Now()
	}
	return r.faultEnded(ctx, "the API server's restarts during the sync", r.rep.lastFaultEnd)
}

// killDuringSync kills the leader when a third of the routes have their Cloudflare
// records (Leader).
func (r *run) killDuringSync(ctx context.Context) error {
	want := r.cfg.Routes / 3
	if err := r.waitUntil(ctx, fmt.Sprintf("%d records", want), func() bool { return r.cfRecords() >= want }); err != nil {
		return err
	}
	// At make test's size one batch carries every record: the kill then lands between
	// the providers, or before the statuses.
	_, r53 := dnsOwners(r.hw)
	return r.killTheLeader(ctx, fmt.Sprintf("in the first sync, at %d of %d routes' records in Cloudflare, %d in Route53", r.cfRecords(), r.cfg.Routes, len(r53)))
}

// killDuringFailover takes the Cloudflare edge's health endpoint down and kills the
// leader when a third of the Cloudflare records point at the AWS edge; once every
// record does, the edge comes back and the run waits for the failback (Leader).
func (r *run) killDuringFailover(ctx context.Context) error {
	r.hw.CFUp.Store(false)
	total := r.cfRecords()
	if err := r.waitUntil(ctx, "a third of the records failed over", func() bool { return r.onAWS() >= total/3 }); err != nil {
		return err
	}
	if err := r.killTheLeader(ctx, fmt.Sprintf("in a failover, at %d of %d records on the AWS edge", r.onAWS(), total)); err != nil {
		return err
	}
	if err := r.waitUntil(ctx, "every record failed over", func() bool { return r.onAWS() == r.cfRecords() }); err != nil {
		return err
	}
	r.hw.CFUp.Store(true)
	if err := r.waitUntil(ctx, "every record failed back", func() bool { return r.onAWS() == 0 }); err != nil {
		return err
	}
	_, err := converge(ctx, r.hw, r.cfg.Settle, r.moved)
	return err
}

// killTheLeader kills the replica that leads and waits for the world to converge
// under its successor.
func (r *run) killTheLeader(ctx context.Context, moment string) error {
	lead := leader(ctx, r.replicas)
	if lead == nil {
		return fmt.Errorf("%s: no replica leads", moment)
	}
	return r.killReplica(ctx, lead, moment, false)
}

// killReplica kills the leader rp and waits for the world to converge under its successor;
// held keeps rp down until the successor leads.
func (r *run) killReplica(ctx context.Context, rp *replica, moment string, held bool) error {
	what := fmt.Sprintf("SIGKILL the leader (%s) %s", filepath.Base(rp.Dir), moment)
	r.cfg.Log("%s", what)
	release := func() {}
	if held {
		release = rp.holdRestarts()
	}
	killed := time.Now()
	rp.kill(syscall.SIGKILL)
	r.rep.Faults = append(r.rep.Faults, what)
	successor := leader(ctx, r.replicas)
	release()
	if successor == nil {
		return fmt.Errorf("%s: no replica leads after the kill", moment)
	}
	return r.faultEnded(ctx, what, killed)
}

// waitUntil polls cond until it holds, for up to Settle.
func (r *run) waitUntil(ctx context.Context, what string, cond func() bool) error {
	for start := time.Now(); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > r.cfg.Settle || ctx.Err() != nil {
			r.rep.TimedOut = true
			return fmt.Errorf("not %s in %s", what, r.cfg.Settle)
		}
	}
	return nil
}

func (r *run) cfRecords() int { return len(r.hw.CF.Records(r.hw.CFZones[zoneName])) }

// onAWS counts the Cloudflare records that point at the AWS edge.
func (r *run) onAWS() int {
	n := 0
	for _, rec := range r.hw.CF.Records(r.hw.CFZones[zoneName]) {
		if strings.TrimSuffix(rec.Content, ".") == harness.AWSEdgeTarget {
			n++
		}
	}
	return n
}

// controlPlaneFault stops etcd for EtcdDown, or restarts the API server, in turn, as
// the hostnames move.
func (r *run) controlPlaneFault(ctx context.Context, round int, previous map[string]string) error {
	// Wait for the names to be granted (the first old record gone) so that the fault
	// lands among status writes and record changes.
	killMoment(ctx, r.hw, "granting", r.moved, previous, 20*time.Second)
	began := time.Now()
	var what string
	var err error
	if round%2 == 0 {
		err = r.hw.StopEtcd(ctx, r.cfg.EtcdDown)
		what = fmt.Sprintf("round %d: etcd stopped for %s (serving again after %s)", round, r.cfg.EtcdDown, time.Since(began).Round(100*time.Millisecond))
	} else {
		err = r.hw.RestartAPIServer(ctx, 0)
		what = fmt.Sprintf("round %d: API server restarted (down %s)", round, time.Since(began).Round(100*time.Millisecond))
	}
	if err != nil {
		return err
	}
	r.cfg.Log("%s", what)
	r.rep.Faults = append(r.rep.Faults, what)
	return r.faultEnded(ctx, what, time.Now())
}

// faulted is the provider a scenario strikes, and the figures of the round under way.
type faulted struct {
	k interface {
		SetFaults(emulatorkit.Faults)
		Counters() map[string]int
	}
	f    emulatorkit.Faults
	what string
	// also is struck with the same faults (LostAnswers: both providers).
	also interface{ SetFaults(emulatorkit.Faults) }

	began                  time.Time
	calls, reads, injected int
}

// count returns the provider's calls so far, and the reads among them.
func (p *faulted) count() (calls, reads int) {
	for endpoint, c := range p.k.Counters() {
		calls += c
		if strings.HasPrefix(endpoint, http.MethodGet+" ") {
			reads += c
		}
	}
	return calls, reads
}

func (p *faulted) set(f emulatorkit.Faults) {
	p.k.SetFaults(f)
	if p.also != nil {
		p.also.SetFaults(f)
	}
}

// startProviderFault runs before a round's hand-over is written: round 0 only counts
// the calls of a hand-over without fault; later rounds strike the provider from the
// first write of the hand-over.
func (r *run) startProviderFault(round int) {
	if r.provider == nil {
		p := &faulted{}
		switch r.cfg.Scenario {
		case Outage:
			p.k, p.f, p.what = r.hw.R53, emulatorkit.Faults{Outage: true}, "Route53 answering 503"
		case Throttle:
			// The first call is throttled for sure, then 80%: a hand-over makes two
			// calls, both passed in one CI run (a 4% chance), and the fault was never
			// met.
			p.k, p.f, p.what = r.hw.CF, emulatorkit.Faults{TooManyRequests: 1, ThrottleRate: 0.8, RetryAfter: emulatorkit.Duration{Duration: time.Second}},
				"Cloudflare answering 429 (Retry-After 1 s) to its first call and 80% of the others"
		case LostAnswers:
			// The first write to each provider loses its answer for sure, then a third.
			p.k, p.also, p.f, p.what = r.hw.R53, r.hw.CF, emulatorkit.Faults{LoseAnswers: 1, LoseAnswerRate: 1.0 / 3},
				"both providers dropping the answer to a third of the writes they apply"
		}
		r.provider = p
	}
	p := r.provider
	p.calls, p.reads = p.count()
	p.began, p.injected = time.Now(), r.hw.R53.Injected()+r.hw.CF.Injected()
	if round > 0 {
		p.set(p.f)
	}
}

// providerFault: in round 0 it waits for the hand-over and keeps its calls as the
// baseline; in later rounds it lifts the fault FaultFor after the hand-over began,
// and counts the calls during the fault and from its end to recovery.
func (r *run) providerFault(ctx context.Context, round int, _ map[string]string) error {
	p := r.provider
	if round == 0 {
		if _, err := converge(ctx, r.hw, r.cfg.Settle, r.moved); err != nil {
			r.rep.TimedOut = true
			return err
		}
		calls, reads := p.count()
		r.rep.BaselineCalls, r.rep.BaselineLists = calls-p.calls, reads-p.reads
		r.cfg.Log("round 0, no fault: the hand-over took %s and %d calls", time.Since(p.began).Round(100*time.Millisecond), r.rep.BaselineCalls)
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(p.began.Add(r.cfg.FaultFor))):
	}
	p.set(emulatorkit.Faults{})
	ended, endedReads := p.count()
	r.rep.FaultCalls += ended - p.calls
	r.rep.Injected += r.hw.R53.Injected() + r.hw.CF.Injected() - p.injected
	what := fmt.Sprintf("round %d: %s for %s from the hand-over", round, p.what, r.cfg.FaultFor)
	r.rep.Faults = append(r.rep.Faults, what)
	if err := r.faultEnded(ctx, what, time.Now()); err != nil {
		return err
	}
	// The round that took the most writes to recover is the one the bound judges.
	if calls, reads := p.count(); calls-ended-(reads-endedReads) >= r.rep.RecoveryCalls-r.rep.RecoveryLists {
		r.rep.RecoveryCalls, r.rep.RecoveryLists = calls-ended, reads-endedReads
	}
	return nil
}

// secretIn returns the first log file under dir that holds a credential, or "".
func secretIn(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "manager-*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, secret := range harness.Secrets() {
			if strings.Contains(string(b), secret) {
				return f
			}
		}
	}
	return ""
}

// echoBackend points the Region at a backend that answers with the tenant the proxy
// sent it.
func echoBackend(ctx context.Context, hw *harness.World) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Tenant-Id"))
	})}
	go func() { _ = srv.Serve(l) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	region := &v1.Region{}
	if err := hw.Client.Get(ctx, client.ObjectKey{Name: harness.Region}, region); err != nil {
		return err
	}
	region.Spec.Backends = []v1.Backend{{URL: "http://" + l.Addr().String()}}
	return hw.Client.Update(ctx, region)
}

// movedLabel marks the routes that hold or claim a moved hostname: the checker reads
// only those.
const movedLabel = "faults.tenantroute.io/moved"

func createClaimants(ctx context.Context, hw *harness.World, names []string, host func(string) string) error {
	return harness.Parallel(names, func(n string) error {
		tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: harness.RoutesNamespace,
			Labels: map[string]string{movedLabel: "true"}}, Spec: v1.TenantRouteSpec{
			TenantID: n, Region: harness.Region, Hostnames: []string{host(n)}, Edges: []string{harness.CloudflareEdge, harness.AWSEdge}, TTL: 60}}
		return hw.Client.Create(ctx, tr)
	})
}

// handOver makes the holder of every moved hostname let it go, adds a claimant, and
// returns the holders it had.
func handOver(ctx context.Context, hw *harness.World, moved []string, round int, claimant func(i, n int) string) (map[string]string, error) {
	routes, err := listRoutes(ctx, hw)
	if err != nil {
		return nil, err
	}
	var fresh []string
	hostOf := map[string]string{}
	previous := map[string]string{}
	for i, h := range moved {
		var holder *v1.TenantRoute
		for _, tr := range routes {
			if slices.Contains(tr.Spec.Hostnames, h) && claimState(tr, h) == v1.ClaimGranted {
				holder = tr
			}
		}
		if holder == nil {
			return nil, fmt.Errorf("round %d: %s has no holder", round, h)
		}
		previous[h] = holder.Name
		base := holder.DeepCopy()
		holder.Spec.Hostnames = []string{fmt.Sprintf("%s-r%d.%s", holder.Name, round, zoneName)}
		if err := hw.Client.Patch(ctx, holder, client.MergeFrom(base)); err != nil {
			return nil, fmt.Errorf("round %d: %s lets %s go: %w", round, holder.Name, h, err)
		}
		n := claimant(i, round+2)
		fresh = append(fresh, n)
		hostOf[n] = h
	}
	return previous, createClaimants(ctx, hw, fresh, func(n string) string { return hostOf[n] })
}

// killMoments are the moments of a hand-over at which a round kills the leader, in
// turn: while the holders' records are being deleted (the names are releasing), when
// the first of them is gone (the names are being granted), and when the first record
// of a new holder appears (the grants are being used).
var killMoments = []string{"releasing", "granting", "using"}

// killMoment waits for the round's moment, or until limit, and returns how long it
// waited.
func killMoment(ctx context.Context, hw *harness.World, moment string, moved []string, previous map[string]string, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		cf, _ := dnsOwners(hw)
		for _, h := range moved {
			switch {
			case moment == "releasing":
				return time.Since(start)
			case moment == "granting" && !slices.Contains(cf[h], previous[h]):
				return time.Since(start)
			case moment == "using" && slices.ContainsFunc(cf[h], func(o string) bool { return o != previous[h] }):
				return time.Since(start)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// claimsOf describes what the routes listing host, or holding it, say of it.
func claimsOf(ctx context.Context, hw *harness.World, host string) string {
	routes, err := listRoutes(ctx, hw)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, tr := range routes {
		for _, c := range tr.Status.Hostnames {
			if c.Hostname == host || slices.Contains(tr.Spec.Hostnames, host) {
				out = append(out, fmt.Sprintf("%s lists %v: %s %s %q", tr.Name, tr.Spec.Hostnames, c.Hostname, c.State, c.Message))
			}
		}
	}
	cf, r53 := dnsOwners(hw)
	return fmt.Sprintf("%s: %v; cloudflare %v, route53 %v", host, out, cf[host], r53[host])
}

func listRoutes(ctx context.Context, hw *harness.World) ([]*v1.TenantRoute, error) {
	var list v1.TenantRouteList
	if err := hw.Client.List(ctx, &list, client.InNamespace(harness.RoutesNamespace)); err != nil {
		return nil, err
	}
	out := make([]*v1.TenantRoute, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func claimState(tr *v1.TenantRoute, host string) v1.ClaimState {
	for _, c := range tr.Status.Hostnames {
		if c.Hostname == host {
			return c.State
		}
	}
	return ""
}

// converge waits until every route is reconciled and, where nothing contests it,
// Ready; every moved hostname has a holder; and the providers hold exactly the
// records the grants want.
func converge(ctx context.Context, hw *harness.World, limit time.Duration, moved []string) (time.Duration, error) {
	start := time.Now()
	var last string
	for time.Since(start) < limit {
		routes, err := listRoutes(ctx, hw)
		if err != nil {
			return 0, err
		}
		last = ""
		for _, tr := range routes {
			conflict := meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionConflict)
			if tr.Status.ObservedGeneration != tr.Generation || (!conflict && !meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionReady)) {
				last = tr.Name + " not reconciled or not Ready"
				break
			}
		}
		for _, h := range moved {
			if last != "" {
				break
			}
			held := false
			for _, tr := range routes {
				held = held || (slices.Contains(tr.Spec.Hostnames, h) && claimState(tr, h) == v1.ClaimGranted)
			}
			if !held {
				last = h + " has no holder"
			}
		}
		if last == "" {
			if last, err = exact(ctx, hw); err != nil {
				return 0, err
			}
			if last == "exact" {
				return time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not converged in %s: %s", limit, last)
}

// exact compares what each provider holds with what the granted hostnames want: one
// record set per granted hostname, owned by its holder, and nothing else. It says
// "exact" or what differs.
func exact(ctx context.Context, hw *harness.World) (string, error) {
	routes, err := listRoutes(ctx, hw)
	if err != nil {
		return "", err
	}
	want := map[string]string{} // hostname -> holder
	for _, tr := range routes {
		for _, c := range tr.Status.Hostnames {
			if c.State == v1.ClaimGranted && slices.Contains(tr.Spec.Hostnames, c.Hostname) {
				want[c.Hostname] = tr.Name
			}
		}
	}
	cf, r53 := dnsOwners(hw)
	for name, owners := range map[string]map[string][]string{"cloudflare": cf, "route53": r53} {
		for h, holder := range want {
			if got := owners[h]; len(got) != 1 || got[0] != holder {
				return fmt.Sprintf("%s: %s held by %s, records owned by %v", name, h, holder, got), nil
			}
		}
		for h, got := range owners {
			if _, ok := want[h]; !ok {
				return fmt.Sprintf("%s: records of %s (owned by %v) nobody holds", name, h, got), nil
			}
		}
	}
	return "exact", nil
}
