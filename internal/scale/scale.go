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
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/apifloor"
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
	// ManagerCPU is the manager's CPU time in the phase, in seconds: taken from the
	// cores the API server could have used.
	ManagerCPU float64
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
	return fmt.Sprintf("status patches %d, route writes %d, events %d, EdgeProvider status %d, other API writes %d; provider writes %d (calls: cloudflare %d with %d list pages and %d throttled, route53 %d with %d list pages and %d throttled%s); API server CPU %.1f s%s; manager CPU %.1f s",
		w.StatusPatches, w.RouteWrites, w.Events, w.EdgeStatus, w.Other, w.ProviderWrites,
		w.CloudflareCalls, w.CloudflareLists, w.CloudflareThrottled, w.Route53Calls, w.Route53Lists, w.Route53Throttled, other,
		w.APIServerCPU, perPatch, w.ManagerCPU)
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
	SyncPeakRSSMiB    float64 // the peak by the end of the initial sync
	CPUSeconds        float64
	CloudflareMinimum int
	Route53Minimum    int
	// Provider calls until the records converged (the Writes count a whole phase,
	// which lasts until every status is written).
	SyncCallsToRecords, FailoverCallsToRecords [2]int // cloudflare, route53
	FailoverMinimum                            [2]int
	// FailoverDecided is when the operator decided (the EdgeProvider's
	// status.failover.startedAt), FailoverShown when its status first said the records
	// had moved; both from the edge going down.
	FailoverDecided, FailoverShown time.Duration
	// When the first route passed, then 10%, 50% and 90% of them, in each phase.
	SyncMarks, FailoverMarks [4]time.Duration
	// The floor of each status phase: what the statuses the operator wrote cost the
	// API server and etcd per patch, measured on this run's control plane once the
	// manager stopped (see floor).
	FloorSync, FloorFailover apifloor.Cost
}

func (r Report) String() string {
	return fmt.Sprintf(`%d TenantRoutes over %d zones
  initial sync: records converged %.1f s, all Ready %.1f s (%s); %s
    provider calls until the records converged: cloudflare %d, route53 %d; minimum %d, %d
  failover of every route: records moved %.1f s, statuses updated %.1f s (%s); %s
    decided %.1f s; the EdgeProvider showed the records moved at %.1f s
    provider calls until the records moved: cloudflare %d, route53 %d; minimum %d, %d
  steady state, %s: %s
  manager: peak RSS %.0f MiB (%.0f MiB by the end of the sync), CPU %.1f s
%s`,
		r.Routes, r.Zones, r.RecordsConverged.Seconds(), r.AllReady.Seconds(), marks(r.SyncMarks), r.Sync,
		r.SyncCallsToRecords[0], r.SyncCallsToRecords[1], r.CloudflareMinimum, r.Route53Minimum,
		r.FailoverRecords.Seconds(), r.FailoverStatus.Seconds(), marks(r.FailoverMarks), r.Failover,
		r.FailoverDecided.Seconds(), r.FailoverShown.Seconds(),
		r.FailoverCallsToRecords[0], r.FailoverCallsToRecords[1], r.FailoverMinimum[0], r.FailoverMinimum[1], r.SteadyFor, r.Steady,
		r.PeakRSSMiB, r.SyncPeakRSSMiB, r.CPUSeconds, r.floorReport())
}

func marks(m [4]time.Duration) string {
	return fmt.Sprintf("first %.1f s, 10%% %.1f s, 50%% %.1f s, 90%% %.1f s", m[0].Seconds(), m[1].Seconds(), m[2].Seconds(), m[3].Seconds())
}

// floorReport sets each status phase beside its floor: N patches at the CPU each cost
// the control plane, with every core given to it.
func (r Report) floorReport() string {
	if r.FloorSync.PerPatch() == 0 {
		return "  floor: not measured"
	}
	line := func(phase string, took time.Duration, c apifloor.Cost) string {
		floor := c.Floor(r.Routes)
		return fmt.Sprintf("  %s: %.1f s; floor %.1f s (%d x %.2f ms API server + %.2f ms etcd / %d cores); ratio %.2f",
			phase, took.Seconds(), floor.Seconds(), r.Routes, c.API*1e3, c.Etcd*1e3, runtime.NumCPU(), took.Seconds()/floor.Seconds())
	}
	// The floor gives the control plane every core; the floor's own writers, which do
	// nothing but these patches, share the cores with their watch, the harness and the
	// kernel as the operator does. Their pace says how much of the ratio is the
	// operator's.
	paced := func(phase string, took time.Duration, c apifloor.Cost) string {
		pace := time.Duration(float64(r.Routes) / c.Rate * float64(time.Second))
		return fmt.Sprintf("  %s: %.1f s at the floor writers' pace (%.0f patches/s; ratio %.2f to the floor); the operator %.2f of it",
			phase, pace.Seconds(), c.Rate, pace.Seconds()/c.Floor(r.Routes).Seconds(), took.Seconds()/pace.Seconds())
	}
	// The floor is measured after the phase, and this machine's speed drifts between the
	// two by up to a third (API server CPU a patch 4.4-6.1 ms within an hour); the share
	// of the cores the API server had does not: 1.41-1.44 in six syncs whose ratios went
	// from 0.93 to 1.61. Both phases' shares, beside the floor writers', say whether a
	// ratio moved with the machine or with the operator.
	shares := func(phase string, took time.Duration, w Writes, c apifloor.Cost) string {
		return fmt.Sprintf("  %s: the API server used %.2f cores and the manager %.2f; %.2f while the floor's writers patched",
			phase, w.APIServerCPU/took.Seconds(), w.ManagerCPU/took.Seconds(), c.API*c.Rate)
	}
	return "status phases against the floor measured on this run's API server:\n" +
		line("all Ready, from the manager's start", r.AllReady, r.FloorSync) + "\n" +
		line("failover statuses, from the decision", r.FailoverStatus-r.FailoverDecided, r.FloorFailover) + "\n" +
		line("failover statuses, from the edge going down", r.FailoverStatus, r.FloorFailover) + "\n" +
		paced("all Ready", r.AllReady, r.FloorSync) + "\n" +
		paced("failover statuses, from the decision", r.FailoverStatus-r.FailoverDecided, r.FloorFailover) + "\n" +
		shares("initial sync", r.AllReady, r.Sync, r.FloorSync) + "\n" +
		shares("failover, from the edge going down", r.FailoverStatus, r.Failover, r.FloorFailover)
}

// watchFailover follows the EdgeProvider's status.failover from t0 until it shows the
// records moved, or until the returned func is called, which says when the operator
// decided and when the status first showed the records moved.
func (r *run) watchFailover(ctx context.Context, t0 time.Time) func() (decided, shown time.Duration) {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	var decided, shown time.Duration
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			ep := &v1.EdgeProvider{}
			if err := r.w.Client.Get(ctx, client.ObjectKey{Name: harness.CloudflareEdge}, ep); err == nil {
				if f := ep.Status.Failover; f != nil && f.Reason == v1.ReasonFailedOver && f.StartedAt.After(t0) {
					decided = f.StartedAt.Sub(t0)
					if f.RecordsMovedAt != nil {
						// Both are known: polling on would only cost the API server
						// what the route statuses that follow are timed by.
						shown = time.Since(t0)
						return
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() (time.Duration, time.Duration) {
		stop()
		<-done
		return decided, shown
	}
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
	defer func() {
		if pid := r.mgr.PID(); pid != 0 {
			rep.PeakRSSMiB, rep.CPUSeconds = usage(pid)
		}
	}()

	cfg.Log("manager started: waiting for the records and the statuses")
	sync, err := r.waitBoth(ctx, start, r.onEdge(false), &rep.SyncCallsToRecords, func(tr *v1.TenantRoute) bool {
		return tr.Status.ObservedGeneration == tr.Generation && meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionReady)
	})
	rep.RecordsConverged, rep.AllReady, rep.SyncMarks = sync.records, sync.all, sync.marks
	if err != nil {
		return rep, err
	}
	if rep.Sync, err = r.writesSince(ctx, before); err != nil {
		return rep, err
	}
	rep.SyncPeakRSSMiB, _ = usage(r.mgr.PID())
	cfg.Log("synced: records %.1f s, Ready %.1f s", rep.RecordsConverged.Seconds(), rep.AllReady.Seconds())
	synced, err := r.sampleStatus()
	if err != nil {
		return rep, err
	}

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
	shown := r.watchFailover(ctx, down)
	failover, err := r.waitBoth(ctx, down, r.onEdge(true), &rep.FailoverCallsToRecords, func(tr *v1.TenantRoute) bool {
		return tr.Status.ActiveEdge == harness.AWSEdge && meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionReady)
	})
	rep.FailoverRecords, rep.FailoverStatus, rep.FailoverMarks = failover.records, failover.all, failover.marks
	rep.FailoverDecided, rep.FailoverShown = shown()
	if err != nil {
		return rep, err
	}
	time.Sleep(5 * time.Second)
	if rep.Failover, err = r.writesSince(ctx, before); err != nil {
		return rep, err
	}
	cfg.Log("failover: records %.1f s, statuses %.1f s", rep.FailoverRecords.Seconds(), rep.FailoverStatus.Seconds())
	failedOver, err := r.sampleStatus()
	if err != nil {
		return rep, err
	}
	rep.PeakRSSMiB, rep.CPUSeconds = usage(r.mgr.PID())
	r.mgr.Stop(syscall.SIGTERM)
	cfg.Log("manager stopped: measuring the floor")
	if rep.FloorSync, rep.FloorFailover, err = r.floor(ctx, synced, failedOver); err != nil {
		return rep, fmt.Errorf("measuring the floor: %w", err)
	}
	return rep, nil
}

// sampleStatus is the status the operator wrote on the first route, for the floor.
func (r *run) sampleStatus() (*v1.TenantRouteStatus, error) {
	tr := &v1.TenantRoute{}
	if err := r.routes.Get(context.Background(), client.ObjectKey{Namespace: harness.RoutesNamespace, Name: r.names[0]}, tr); err != nil {
		return nil, fmt.Errorf("reading a route's status for the floor: %w", err)
	}
	return tr.Status.DeepCopy(), nil
}

// phase is when a phase's records and statuses first held, from its start.
type phase struct {
	records, all time.Duration
	// marks: when the first route passed, then 10%, 50% and 90% of them.
	marks [4]time.Duration
}

// waitBoth waits until records(...) and every route passes routeOK, and returns when
// each first held, from t0; calls gets the provider calls made until records held.
func (r *run) waitBoth(ctx context.Context, t0 time.Time, records func() bool, calls *[2]int, routeOK func(*v1.TenantRoute) bool) (phase, error) {
	var ph phase
	routes, err := r.passing(ctx, routeOK)
	if err != nil {
		return ph, err
	}
	defer routes.stop()
	deadline := t0.Add(r.cfg.Timeout)
	for ph.records == 0 || ph.all == 0 {
		if time.Now().After(deadline) {
			return ph, fmt.Errorf("not done after %s (records after %s, routes after %s)", r.cfg.Timeout, ph.records, ph.all)
		}
		if ph.records == 0 && records() {
			ph.records = time.Since(t0)
			for i, counters := range []map[string]int{r.w.CF.Counters(), r.w.R53.Counters()} {
				for _, n := range counters {
					calls[i] += n
				}
			}
		}
		if at := routes.allAt(); ph.all == 0 && !at.IsZero() {
			ph.all = at.Sub(t0)
		}
		select {
		case <-ctx.Done():
			return ph, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for i, at := range routes.marksAt() {
		ph.marks[i] = at.Sub(t0)
	}
	return ph, nil
}

// passingRoutes follows, from the route watch's events, which routes pass a check,
// and when all of them first did. Listing every route twice a second to check them
// cost the harness 0.4 of this machine's 2 cores at 100,000 routes, beside the API
// server whose writes it times.
type passingRoutes struct {
	mu    sync.Mutex
	ok    map[string]bool
	n     int // routes in ok that pass
	total int
	all   time.Time
	// marks: when the first route passed, then 10%, 50% and 90% of them.
	marks  [4]time.Time
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
	now := time.Now()
	for i, share := range [4]int{0, 10, 50, 90} {
		if p.marks[i].IsZero() && p.n > 0 && p.n*100 >= share*p.total {
			p.marks[i] = now
		}
	}
	if p.n == p.total && p.all.IsZero() {
		p.all = now
	}
}

func (p *passingRoutes) marksAt() [4]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.marks
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
