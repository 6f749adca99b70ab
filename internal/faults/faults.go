// Package faults kills the manager with SIGKILL at random moments while it creates
// and while it deletes TenantRoutes, then runs it cleanly and counts what the
// providers hold: every remaining route's records once, nothing of a deleted route.
// It runs a real kube-apiserver and etcd (envtest), the manager binary as its own
// process, and both provider emulators with their real rate limits.
//
// The clean run can keep the orphan sweep off, so that a record left behind by a
// finalizer removed too early shows as an orphan instead of being swept.
package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
)

// Config of one run.
type Config struct {
	// Manager is the manager binary (go build ./cmd).
	Manager string
	// Routes are created, a third of them then deleted.
	Routes int
	// Kills while creating, and again while deleting.
	Kills int
	// MaxKillAfter: each kill lands at a random moment between 200 ms and this long
	// after the manager started.
	MaxKillAfter time.Duration
	// OutageAtStart: each killed run starts with both providers answering 503 for a
	// random part of this long, as during a provider incident: zones then resolve
	// late, while deletions are already being reconciled.
	OutageAtStart time.Duration
	// Sweep runs the clean run with the orphan sweep on (the default install); off,
	// the run shows whether deletions alone left anything behind.
	Sweep bool
	// Settle bounds the clean run.
	Settle time.Duration
	// ManagerArgs are added to the manager's command line (e.g. --zap-log-level=debug).
	ManagerArgs []string
	// Dir receives the manager's logs.
	Dir string
	// Seed of the kill moments; 0 picks one.
	Seed uint64
	Log  func(format string, args ...any)
}

// Count is what one provider holds after the clean run.
type Count struct {
	// Expected names present once, as they should be.
	Present int
	// Missing: remaining routes without their record.
	Missing int
	// Duplicates: records beyond the one set (and its registry record) per route.
	Duplicates int
	// Orphans: records of deleted routes.
	Orphans int
}

// Report of one run.
type Report struct {
	Seed               uint64
	Remaining, Deleted int
	Kills              int
	// DeletedLeft: deleted TenantRoutes still in the API after the clean run.
	DeletedLeft int
	// NotReady: remaining TenantRoutes not Ready after the clean run.
	NotReady   int
	Cloudflare Count
	Route53    Count
	// OrphanSample names a few orphaned records ("provider TYPE name").
	OrphanSample []string
	SettledIn    time.Duration
	TimedOut     bool
	ManagerLogs  string
}

// Clean reports a run that left exactly the remaining routes' records.
func (r Report) Clean() bool {
	return !r.TimedOut && r.DeletedLeft == 0 && r.NotReady == 0 &&
		r.Cloudflare == Count{Present: r.Remaining} && r.Route53 == Count{Present: r.Remaining}
}

func (r Report) String() string {
	return fmt.Sprintf("seed %d, %d kills: %d remaining, %d deleted; settled in %s (timed out: %t); "+
		"deleted objects left %d, not ready %d; cloudflare %+v; route53 %+v; orphans such as %v",
		r.Seed, r.Kills, r.Remaining, r.Deleted, r.SettledIn.Round(time.Second), r.TimedOut,
		r.DeletedLeft, r.NotReady, r.Cloudflare, r.Route53, r.OrphanSample)
}

const zoneName = "auth.example.com"

// world is the harness and the manager of one run.
type world struct {
	cfg Config
	*harness.World
	mgr *harness.Manager
	rng *rand.Rand
}

// Run runs the whole scenario.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	rep := Report{Seed: cfg.Seed, ManagerLogs: cfg.Dir}
	hw, err := harness.Start(ctx, cfg.Dir, []string{zoneName})
	if err != nil {
		return rep, err
	}
	defer hw.Stop()
	w := &world{cfg: cfg, World: hw, rng: rand.New(rand.NewPCG(cfg.Seed, 0)),
		mgr: &harness.Manager{Binary: cfg.Manager, Kubeconfig: hw.Kubeconfig, Dir: cfg.Dir}}
	defer w.mgr.Stop(syscall.SIGKILL)

	names := make([]string, cfg.Routes)
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
	}
	var doomed, remaining []string
	for i, n := range names {
		if i%3 == 0 {
			doomed = append(doomed, n)
		} else {
			remaining = append(remaining, n)
		}
	}
	rep.Remaining, rep.Deleted = len(remaining), len(doomed)

	// Create, a share of the routes per run of the manager, each run killed at a
	// random moment; then the same while deleting.
	for i := range cfg.Kills {
		chunk := names[i*len(names)/cfg.Kills : (i+1)*len(names)/cfg.Kills]
		if err := w.killedRun(ctx, "create", func(ctx context.Context) error { return w.createRoutes(ctx, chunk) }); err != nil {
			return rep, err
		}
		rep.Kills++
	}
	for i := range cfg.Kills {
		chunk := doomed[i*len(doomed)/cfg.Kills : (i+1)*len(doomed)/cfg.Kills]
		if err := w.killedRun(ctx, "delete", func(ctx context.Context) error { return w.deleteRoutes(ctx, chunk) }); err != nil {
			return rep, err
		}
		rep.Kills++
	}

	// The clean run, without injected faults.
	time.Sleep(w.cfg.OutageAtStart)
	w.SetOutage(false)
	if err := w.start(!cfg.Sweep); err != nil {
		return rep, err
	}
	start := time.Now()
	deadline := start.Add(cfg.Settle)
	for {
		if err := w.count(ctx, remaining, doomed, &rep); err != nil {
			return rep, err
		}
		if rep.Clean() {
			break
		}
		if time.Now().After(deadline) {
			rep.TimedOut = true
			break
		}
		if n := int(time.Since(start) / time.Second); n > 0 && n%30 == 0 {
			cfg.Log("clean run, %ds: %s", n, rep)
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	rep.SettledIn = time.Since(start)
	w.mgr.Stop(syscall.SIGTERM)
	return rep, nil
}

// killedRun starts the manager, runs work beside it and kills the manager with
// SIGKILL at a random moment.
func (w *world) killedRun(ctx context.Context, phase string, work func(context.Context) error) error {
	if d := w.cfg.OutageAtStart; d > 0 {
		w.SetOutage(true)
		outage := time.Duration(w.rng.Int64N(int64(d)))
		time.AfterFunc(outage, func() { w.SetOutage(false) })
	}
	// With the sweep off here too, a record a killed run orphaned stays to be counted
	// rather than being swept by the next run.
	if err := w.start(!w.cfg.Sweep); err != nil {
		return err
	}
	after := 200*time.Millisecond + time.Duration(w.rng.Int64N(int64(w.cfg.MaxKillAfter-200*time.Millisecond)))
	errc := make(chan error, 1)
	go func() { errc <- work(ctx) }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(after):
	}
	w.cfg.Log("%s: SIGKILL %s after start", phase, after.Round(time.Millisecond))
	w.mgr.Stop(syscall.SIGKILL)
	return <-errc
}

func (w *world) start(keepOrphans bool) error {
	return w.mgr.Start(append([]string{fmt.Sprintf("--sweep-orphans=%t", !keepOrphans)}, w.cfg.ManagerArgs...)...)
}

func (w *world) createRoutes(ctx context.Context, names []string) error {
	return w.CreateRoutes(ctx, names, func(n string) string { return n + "." + zoneName })
}

func (w *world) deleteRoutes(ctx context.Context, names []string) error {
	return w.DeleteRoutes(ctx, names)
}

// count fills rep with what the API and the providers hold now.
func (w *world) count(ctx context.Context, remaining, doomed []string, rep *Report) error {
	var list v1.TenantRouteList
	if err := w.Client.List(ctx, &list, client.InNamespace(harness.RoutesNamespace)); err != nil {
		return err
	}
	exists := map[string]*v1.TenantRoute{}
	for i := range list.Items {
		exists[list.Items[i].Name] = &list.Items[i]
	}
	rep.DeletedLeft, rep.NotReady = 0, 0
	for _, n := range doomed {
		if exists[n] != nil {
			rep.DeletedLeft++
		}
	}
	for _, n := range remaining {
		tr := exists[n]
		if tr == nil || tr.Status.ObservedGeneration != tr.Generation ||
			!meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionReady) {
			rep.NotReady++
		}
	}
	var cfNames, r53Names []string
	rep.OrphanSample = nil
	sample := func(provider, typ, name string) {
		if len(rep.OrphanSample) < 4 && slices.Contains(doomed, routeOf(name)) {
			rep.OrphanSample = append(rep.OrphanSample, provider+" "+typ+" "+name)
		}
	}
	for _, r := range w.CF.Records(w.CFZones[zoneName]) {
		cfNames = append(cfNames, strings.ToLower(r.Name))
		sample("cloudflare", r.Type, r.Name)
	}
	for _, rs := range w.R53.RecordSets(w.R53Zones[zoneName]) {
		if rs.Type == "SOA" || rs.Type == "NS" {
			continue
		}
		name := strings.TrimSuffix(strings.ToLower(rs.Name), ".")
		r53Names = append(r53Names, name)
		sample("route53", rs.Type, name+" "+strings.Join(rs.Values, ","))
	}
	// Per route: the record set at its hostname, and in Route53 its registry record.
	rep.Cloudflare = tally(cfNames, remaining, doomed, 1)
	rep.Route53 = tally(r53Names, remaining, doomed, 2)
	return nil
}

// routeOf is the route a record name belongs to: the first label of its hostname.
func routeOf(name string) string {
	name, _, _ = strings.Cut(name, " ")
	name = strings.TrimSuffix(name, "."+zoneName)
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// tally sorts the record names of a zone by the route they belong to (the hostname
// itself or a name below it); perRoute is how many records a route has.
func tally(records, remaining, doomed []string, perRoute int) Count {
	held := map[string]int{}
	for _, r := range records {
		held[routeOf(r)]++
	}
	var c Count
	for _, n := range doomed {
		c.Orphans += held[n]
	}
	for _, n := range remaining {
		switch h := held[n]; {
		case h == 0:
			c.Missing++
		case h > perRoute:
			c.Present++
			c.Duplicates += h - perRoute
		case h == perRoute:
			c.Present++
		default:
			c.Missing++
		}
	}
	return c
}
