// Package scale measures the operator at N TenantRoutes spread over several zones, as
// hack/bench-scale.sh runs it: the manager binary as its own process with default
// flags, a real API server (internal/harness), both provider emulators with their real
// rate limits. From the manager's start it times every record converged and every
// route Ready, then a failover of every route (records moved, statuses updated),
// counts the API writes and provider calls of each phase and of a steady minute, and
// reads the manager's peak memory and CPU time from /proc.
package scale

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// Config of one run.
type Config struct {
	Manager     string
	Routes      int
	Zones       int
	Steady      time.Duration // how long steady state is watched
	Timeout     time.Duration // bound of each phase
	Dir         string
	ManagerArgs []string
	// WithoutFinalizerPolicy leaves out config/policy/route_finalizer.yaml, as on a
	// cluster without MutatingAdmissionPolicy: the manager then adds every finalizer.
	WithoutFinalizerPolicy bool
	Log                    func(format string, args ...any)
}

// Writes counts the API server's write requests by what they wrote.
type Writes struct {
	StatusPatches   int // TenantRoute status
	RouteWrites     int // TenantRoute metadata and spec (finalizers)
	Events          int // events created or updated
	EdgeStatus      int // EdgeProvider status
	Other           int
	ProviderWrites  int // batch requests to Cloudflare plus change batches to Route53
	CloudflareCalls int
	Route53Calls    int
	// Of the calls, those that list a zone's records (one page each); a zone is listed
	// again at every resync (--zone-resync, 10 min), so a phase that lasts past it
	// counts a full listing of every zone.
	CloudflareLists int
	Route53Lists    int
	// Of the calls, those the provider's rate limit refused (each retried).
	CloudflareThrottled int
	Route53Throttled    int
	// OtherCalls are the provider calls that neither list nor write, by endpoint.
	OtherCalls map[string]int
	// APIServerCPU is the CPU time the API server spent in the phase, in seconds: what
	// bounds how fast statuses are written on a machine it shares.
	APIServerCPU float64
}

func (w Writes) String() string {
	other := ""
	for _, e := range slices.Sorted(maps.Keys(w.OtherCalls)) {
		other += fmt.Sprintf(", %s %d", e, w.OtherCalls[e])
	}
	perPatch := ""
	if w.StatusPatches > 0 {
		perPatch = fmt.Sprintf(", %.1f ms per status patch", w.APIServerCPU/float64(w.StatusPatches)*1e3)
	}
	return fmt.Sprintf("status patches %d, route writes %d, events %d, EdgeProvider status %d, other API writes %d; provider writes %d (calls: cloudflare %d with %d list pages and %d throttled, route53 %d with %d list pages and %d throttled%s); API server CPU %.1f s%s",
		w.StatusPatches, w.RouteWrites, w.Events, w.EdgeStatus, w.Other, w.ProviderWrites,
		w.CloudflareCalls, w.CloudflareLists, w.CloudflareThrottled, w.Route53Calls, w.Route53Lists, w.Route53Throttled, other,
		w.APIServerCPU, perPatch)
}

// Report of one run; times are from the manager's start, or from the edge going down.
type Report struct {
	Routes, Zones     int
	RecordsConverged  time.Duration
	AllReady          time.Duration
	Sync              Writes
	FailoverRecords   time.Duration
	FailoverStatus    time.Duration
	Failover          Writes
	Steady            Writes
	SteadyFor         time.Duration
	PeakRSSMiB        float64
	CPUSeconds        float64
	CloudflareMinimum int
	Route53Minimum    int
	// Provider calls until the records converged (the Writes count a whole phase,
	// which lasts until every status is written).
	SyncCallsToRecords, FailoverCallsToRecords [2]int // cloudflare, route53
	FailoverMinimum                            [2]int
}

func (r Report) String() string {
	return fmt.Sprintf(`%d TenantRoutes over %d zones
  initial sync: records converged %.1f s, all Ready %.1f s; %s
    provider calls until the records converged: cloudflare %d, route53 %d; minimum %d, %d
  failover of every route: records moved %.1f s, statuses updated %.1f s; %s
    provider calls until the records moved: cloudflare %d, route53 %d; minimum %d, %d
  steady state, %s: %s
  manager: peak RSS %.0f MiB, CPU %.1f s`,
		r.Routes, r.Zones, r.RecordsConverged.Seconds(), r.AllReady.Seconds(), r.Sync,
		r.SyncCallsToRecords[0], r.SyncCallsToRecords[1], r.CloudflareMinimum, r.Route53Minimum,
		r.FailoverRecords.Seconds(), r.FailoverStatus.Seconds(), r.Failover,
		r.FailoverCallsToRecords[0], r.FailoverCallsToRecords[1], r.FailoverMinimum[0], r.FailoverMinimum[1], r.SteadyFor, r.Steady,
		r.PeakRSSMiB, r.CPUSeconds)
}

type run struct {
	cfg   Config
	w     *harness.World
	mgr   *harness.Manager
	zones []string
	names []string
	host  func(string) string
	api   *http.Client
	// routes is a watch of the TenantRoutes: polling them with a list of every route
	// every few seconds was a fifth of the API server's CPU at 10,000 routes, slowing
	// the very statuses it timed.
	routes cache.Cache
}

// Run runs the whole measurement.
func Run(ctx context.Context, cfg Config) (rep Report, err error) {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	rep = Report{Routes: cfg.Routes, Zones: cfg.Zones, SteadyFor: cfg.Steady}
	r := &run{cfg: cfg}
	for i := range cfg.Zones {
		r.zones = append(r.zones, fmt.Sprintf("z%02d.example.com", i))
	}
	zoneOf := map[string]string{}
	for i := range cfg.Routes {
		n := fmt.Sprintf("t%06d", i)
		r.names = append(r.names, n)
		zoneOf[n] = r.zones[i%cfg.Zones]
	}
	r.host = func(n string) string { return n + "." + zoneOf[n] }
	w, err := harness.Start(ctx, cfg.Dir, r.zones)
	if err != nil {
		return rep, err
	}
	defer w.Stop()
	r.w = w
	if r.api, err = rest.HTTPClientFor(w.Config); err != nil {
		return rep, err
	}
	r.routes, err = cache.New(w.Config, cache.Options{Scheme: testenv.Scheme(),
		DefaultNamespaces: map[string]cache.Config{harness.RoutesNamespace: {}},
		DefaultTransform:  cache.TransformStripManagedFields()})
	if err != nil {
		return rep, err
	}
	if _, err := r.routes.GetInformer(ctx, &v1.TenantRoute{}); err != nil {
		return rep, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() { _ = r.routes.Start(watchCtx) }()
	if !r.routes.WaitForCacheSync(ctx) {
		return rep, fmt.Errorf("the TenantRoute watch did not sync")
	}
	if !cfg.WithoutFinalizerPolicy {
		if err := w.InstallFinalizerPolicy(ctx); err != nil {
			return rep, err
		}
	}
	cfg.Log("creating %d TenantRoutes", cfg.Routes)
	if err := w.CreateRoutes(ctx, r.names, r.host); err != nil {
		return rep, err
	}
	rep.CloudflareMinimum, rep.Route53Minimum = r.minimumCalls(false)
	rep.FailoverMinimum[0], rep.FailoverMinimum[1] = r.minimumCalls(true)

	r.mgr = &harness.Manager{Binary: cfg.Manager, Kubeconfig: w.Kubeconfig, Dir: cfg.Dir}
	before, err := r.apiWrites(ctx)
	if err != nil {
		return rep, err
	}
	w.CF.ResetCounters()
	w.R53.ResetCounters()
	start := time.Now()
	if err := r.mgr.Start(cfg.ManagerArgs...); err != nil {
		return rep, err
	}
	defer r.mgr.Stop(syscall.SIGTERM)
	// Read before the manager stops, also when a phase failed or timed out.
	defer func() { rep.PeakRSSMiB, rep.CPUSeconds = usage(r.mgr.PID()) }()

	cfg.Log("manager started: waiting for the records and the statuses")
	if rep.RecordsConverged, rep.AllReady, err = r.waitBoth(ctx, start, r.onEdge(false), &rep.SyncCallsToRecords, func(tr *v1.TenantRoute) bool {
		return tr.Status.ObservedGeneration == tr.Generation && meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionReady)
	}); err != nil {
		return rep, err
	}
	if rep.Sync, err = r.writesSince(ctx, before); err != nil {
		return rep, err
	}
	cfg.Log("synced: records %.1f s, Ready %.1f s", rep.RecordsConverged.Seconds(), rep.AllReady.Seconds())

	// Steady state: nothing changes, nothing should be written.
	time.Sleep(10 * time.Second) // the last events and statuses of the sync land
	if before, err = r.apiWrites(ctx); err != nil {
		return rep, err
	}
	w.CF.ResetCounters()
	w.R53.ResetCounters()
	time.Sleep(cfg.Steady)
	if rep.Steady, err = r.writesSince(ctx, before); err != nil {
		return rep, err
	}
	cfg.Log("steady: %s", rep.Steady)

	// Failover: the Cloudflare edge fails; every route moves to AWS.
	if before, err = r.apiWrites(ctx); err != nil {
		return rep, err
	}
	w.CF.ResetCounters()
	w.R53.ResetCounters()
	down := time.Now()
	w.CFUp.Store(false)
	if rep.FailoverRecords, rep.FailoverStatus, err = r.waitBoth(ctx, down, r.onEdge(true), &rep.FailoverCallsToRecords, func(tr *v1.TenantRoute) bool {
		return tr.Status.ActiveEdge == harness.AWSEdge && meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionReady)
	}); err != nil {
		return rep, err
	}
	time.Sleep(5 * time.Second)
	if rep.Failover, err = r.writesSince(ctx, before); err != nil {
		return rep, err
	}
	cfg.Log("failover: records %.1f s, statuses %.1f s", rep.FailoverRecords.Seconds(), rep.FailoverStatus.Seconds())
	return rep, nil
}

// waitBoth waits until records(...) and every route passes routeOK, and returns when
// each first held, from t0; calls gets the provider calls made until records held.
func (r *run) waitBoth(ctx context.Context, t0 time.Time, records func() bool, calls *[2]int, routeOK func(*v1.TenantRoute) bool) (time.Duration, time.Duration, error) {
	routes, err := r.passing(ctx, routeOK)
	if err != nil {
		return 0, 0, err
	}
	defer routes.stop()
	var recordsAt, routesAt time.Duration
	deadline := t0.Add(r.cfg.Timeout)
	for recordsAt == 0 || routesAt == 0 {
		if time.Now().After(deadline) {
			return recordsAt, routesAt, fmt.Errorf("not done after %s (records after %s, routes after %s)", r.cfg.Timeout, recordsAt, routesAt)
		}
		if recordsAt == 0 && records() {
			recordsAt = time.Since(t0)
			for i, counters := range []map[string]int{r.w.CF.Counters(), r.w.R53.Counters()} {
				for _, n := range counters {
					calls[i] += n
				}
			}
		}
		if at := routes.allAt(); routesAt == 0 && !at.IsZero() {
			routesAt = at.Sub(t0)
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return recordsAt, routesAt, nil
}

// passingRoutes follows, from the route watch's events, which routes pass a check,
// and when all of them first did. Listing every route twice a second to check them
// cost the harness 0.4 of this machine's 2 cores at 100,000 routes, beside the API
// server whose writes it times.
type passingRoutes struct {
	mu     sync.Mutex
	ok     map[string]bool
	n      int // routes in ok that pass
	total  int
	all    time.Time
	remove func()
}

func (r *run) passing(ctx context.Context, check func(*v1.TenantRoute) bool) (*passingRoutes, error) {
	inf, err := r.routes.GetInformer(ctx, &v1.TenantRoute{})
	if err != nil {
		return nil, err
	}
	p := &passingRoutes{ok: map[string]bool{}, total: len(r.names)}
	see := func(obj any, gone bool) {
		tr, isRoute := obj.(*v1.TenantRoute)
		if !isRoute {
			return
		}
		p.set(tr.Name, !gone && check(tr))
	}
	// Adding a handler replays every cached route to it as an addition first.
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { see(obj, false) },
		UpdateFunc: func(_, obj any) { see(obj, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			see(obj, true)
		},
	})
	if err != nil {
		return nil, err
	}
	p.remove = func() { _ = inf.RemoveEventHandler(reg) }
	return p, nil
}

func (p *passingRoutes) set(name string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ok[name] == ok {
		return
	}
	p.ok[name] = ok
	if ok {
		p.n++
	} else {
		p.n--
	}
	if p.n == p.total && p.all.IsZero() {
		p.all = time.Now()
	}
}

// allAt is when every route first passed, zero until then.
func (p *passingRoutes) allAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.all
}

func (p *passingRoutes) stop() { p.remove() }

// onEdge checks that both providers hold one record per route pointing at the
// Cloudflare edge, or at the AWS edge.
func (r *run) onEdge(aws bool) func() bool {
	return func() bool {
		cf := map[string]string{}
		for _, z := range r.zones {
			for _, rec := range r.w.CF.Records(r.w.CFZones[z]) {
				cf[rec.Name] = rec.Content
			}
		}
		r53 := map[string]string{}
		for _, z := range r.zones {
			for _, rs := range r.w.R53.RecordSets(r.w.R53Zones[z]) {
				if rs.Type == "CNAME" && len(rs.Values) == 1 {
					r53[strings.TrimSuffix(rs.Name, ".")] = strings.TrimSuffix(rs.Values[0], ".")
				}
			}
		}
		for _, n := range r.names {
			h := r.host(n)
			want := h + ".cdn.cloudflare.net"
			if aws {
				want = harness.AWSEdgeTarget
			}
			if cf[h] != want || r53[h] != want {
				return false
			}
		}
		return true
	}
}
