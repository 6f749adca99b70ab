package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/edge"
	"github.com/tenantroute/tenantroute-operator/internal/clip"
)

// Failover turns edge health transitions into record rewrites. On a transition it
// plans every TenantRoute of the edge from the cache at once, hands their records to
// the apply queues and has the queues flush immediately, before any status is
// written: records move at the providers' pace, not the API server's. The routes'
// reconciles then report the move (conditions, events) at their own pace.
type Failover struct {
	client.Client
	Recorder events.EventRecorder
	Routes   *TenantRouteReconciler
	Accounts *Accounts
	Monitor  *edge.Monitor
	// Heartbeat is how often each EdgeProvider's last probe is written to its status
	// when its health does not change.
	Heartbeat time.Duration

	transitions chan edge.Transition
	// newWave, if set, restarts the per-transition budget of per-route failover events.
	newWave func()
	// unsaved are the edges whose last health decision the API server has not taken:
	// they are written again until it does (a new leader plans from the saved health,
	// and would move a failover's records back to a dead edge it believes healthy).
	// Only the Start goroutine uses it.
	unsaved map[string]bool
}

// Bounds of the wait between writes of a health decision the API server refused.
const (
	healthRetryMin = time.Second
	healthRetryMax = 30 * time.Second
)

// newFailover returns the failover handler; it runs as a leader-elected runnable.
func newFailover(c client.Client, recorder events.EventRecorder, routes *TenantRouteReconciler, accounts *Accounts, monitor *edge.Monitor) *Failover {
	return &Failover{Client: c, Recorder: recorder, Routes: routes, Accounts: accounts, Monitor: monitor,
		transitions: make(chan edge.Transition, 256), Heartbeat: 5 * time.Minute}
}

// OnTransition is the Monitor's callback.
func (f *Failover) OnTransition(t edge.Transition) { f.transitions <- t }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (f *Failover) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: transitions are handled one at a time, in order.
func (f *Failover) Start(ctx context.Context) error {
	heartbeat := time.NewTicker(f.Heartbeat)
	defer heartbeat.Stop()
	// Failovers in progress are reported at once when their records have moved, then
	// every reportEvery as the routes' statuses follow.
	report := time.NewTicker(reportEvery / 2)
	defer report.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	wait := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case t := <-f.transitions:
			f.handle(ctx, t)
		case <-heartbeat.C:
			f.heartbeat(ctx)
		case <-f.Routes.rewrites.wake:
			f.report(ctx)
		case <-report.C:
			f.report(ctx)
		case <-retry.C:
			f.saveHealth(ctx)
			if wait = min(2*wait, healthRetryMax); len(f.unsaved) > 0 {
				retry.Reset(wait)
			} else {
				wait = 0
			}
			continue
		}
		if len(f.unsaved) > 0 && wait == 0 {
			wait = healthRetryMin
			retry.Reset(wait)
		} else if len(f.unsaved) == 0 {
			wait = 0
		}
	}
}

// saveHealth writes again the health decisions the API server refused.
func (f *Failover) saveHealth(ctx context.Context) {
	for name := range f.unsaved {
		state, probe := f.Monitor.Health(name)
		if err := f.writeHealth(ctx, name, state, probe); err != nil {
			log.FromContext(ctx).Error(err, "writing the EdgeProvider's health again", "edge", name)
			continue
		}
		delete(f.unsaved, name)
	}
}

func (f *Failover) handle(ctx context.Context, t edge.Transition) {
	logger := log.FromContext(ctx).WithValues("edge", t.Edge, "from", t.From, "to", t.To)
	edgeHealthGauge.WithLabelValues(t.Edge).Set(healthValue(t.To))
	if f.newWave != nil {
		f.newWave()
	}
	reason := ""
	switch {
	case t.To == edge.Unhealthy:
		reason = v1.ReasonFailedOver
	case t.From == edge.Unhealthy:
		reason = v1.ReasonFailedBack
	}
	var routes, moved int
	var reconcile []client.ObjectKey
	if t.From == edge.Unhealthy || t.To == edge.Unhealthy {
		rw := f.Routes.rewrites.begin(t.Edge, reason, time.Now())
		routes, reconcile, moved = f.rewrite(ctx, t.Edge, rw)
		rw.started()
	} else {
		// Unknown health counts as healthy: between the two no route changes edge, and
		// replanning every route (each EdgeProvider's first decision after a start, 100,000
		// plans for nothing beside the initial sync) is skipped. Only the routes on this
		// edge whose status reports its health otherwise are reconciled.
		routes, reconcile = f.healthToReport(ctx, t.Edge, t.To)
	}
	logger.Info("edge health changed", "tenantRoutes", routes, "moved", moved, "probe", t.Probe.Message)

	if err := f.writeHealth(ctx, t.Edge, t.To, t.Probe); err != nil {
		logger.Error(err, "writing the EdgeProvider's health; trying again")
		if f.unsaved == nil {
			f.unsaved = map[string]bool{}
		}
		f.unsaved[t.Edge] = true
	} else {
		delete(f.unsaved, t.Edge)
	}
	ep := &v1.EdgeProvider{}
	if err := f.Get(ctx, client.ObjectKey{Name: t.Edge}, ep); err == nil {
		switch {
		case t.To == edge.Unhealthy:
			f.Recorder.Eventf(ep, nil, corev1.EventTypeWarning, v1.ReasonFailedOver, "HealthCheck",
				"edge is unhealthy (%s): %d of its %d TenantRoutes move to another edge%s", t.Probe.Message, moved, routes, f.eventNote(moved))
		case t.From == edge.Unhealthy:
			f.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, v1.ReasonFailedBack, "HealthCheck",
				"edge is healthy again (%s): %d of its %d TenantRoutes move back%s", t.Probe.Message, moved, routes, f.eventNote(moved))
		default:
			f.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, string(t.To), "HealthCheck", "edge is %s (%s)", t.To, t.Probe.Message)
		}
	}
	for _, key := range reconcile {
		f.Routes.enqueue(key)
	}
	f.report(ctx) // the decision, before any route's status
}

// healthToReport returns how many routes list the edge, and those whose status says
// the edge is active with another health than state.
func (f *Failover) healthToReport(ctx context.Context, edgeName string, state edge.State) (int, []client.ObjectKey) {
	all, err := f.Routes.byEdge.Routes(ctx, edgeName)
	if err != nil {
		log.FromContext(ctx).Error(err, "listing the TenantRoutes of an edge", "edge", edgeName)
		return 0, nil
	}
	want := metav1.ConditionUnknown
	if state == edge.Healthy {
		want = metav1.ConditionTrue
	}
	var stale []client.ObjectKey
	for _, route := range all {
		if route.Status.ActiveEdge != edgeName {
			continue
		}
		if c := meta.FindStatusCondition(route.Status.Conditions, v1.ConditionEdgeHealthy); c == nil || c.Status != want {
			stale = append(stale, client.ObjectKeyFromObject(route))
		}
	}
	return len(all), stale
}

// eventNote says, when more routes move than get their own event, how many do.
func (f *Failover) eventNote(moved int) string {
	if sink, ok := f.Recorder.(*eventSink); ok && int64(moved) > sink.perWave {
		return fmt.Sprintf(" (per-route events for the first %d)", sink.perWave)
	}
	return ""
}

// rewrite declares the records of every TenantRoute that lists the edge, as its new
// health dictates, and flushes the queues. It returns how many routes list the edge,
// how many change active edge, and the routes to reconcile now: those whose records
// it did not hand to a queue. A route whose records it queued is reconciled when its
// queues report them applied (or failed): reconciling it now would only find them
// pending and wait, a plan per route (100,000 in a large failover) for nothing.
func (f *Failover) rewrite(ctx context.Context, edgeName string, rw *rewrite) (routes int, reconcile []client.ObjectKey, moved int) {
	// The routes are read, not copied: a copy of each of thousands of routes would be
	// held for the whole rewrite. Nothing here changes them, except the finalizer
	// patch below, which works on its own copy.
	all, err := f.Routes.byEdge.Routes(ctx, edgeName)
	if err != nil {
		log.FromContext(ctx).Error(err, "listing the TenantRoutes of an edge", "edge", edgeName)
		return 0, nil, 0
	}
	var unclaimed []*v1.TenantRoute
	reads := newPlanReads()
	// declare hands a route's records to the queues; it reports whether any of them
	// are pending there, so that the queues' report reconciles the route.
	declare := func(route *v1.TenantRoute) (queued bool) {
		plan, err := f.Routes.planRoute(ctx, route, true, reads)
		if err != nil {
			return false // its reconcile reports it, and moves it
		}
		if plan.active != route.Status.ActiveEdge {
			moved++
			rw.move(client.ObjectKeyFromObject(route), route.Spec.Region, plan.active)
		}
		f.Routes.declareRecords(route, f.Routes.ownerOf(route), plan, func(edge, zone, owner string) {
			queued = true
			rw.add(edge, zone, owner)
		})
		return queued
	}
	for _, route := range all {
		switch {
		case !route.DeletionTimestamp.IsZero():
		case !controllerutil.ContainsFinalizer(route, v1.Finalizer):
			unclaimed = append(unclaimed, route.DeepCopy())
			continue // reconciled below, whether its finalizer patch works or not
		case declare(route):
			continue
		}
		reconcile = append(reconcile, client.ObjectKeyFromObject(route))
	}
	// Records only for routes that carry the finalizer: records declared for a route
	// created moments ago and not reconciled yet would stay behind if it were deleted
	// before its first reconcile (found by hack/bench-faults.sh). Such routes get it
	// here, after every established route was declared, so that a slow API server
	// never delays a failover; rather than skipping them, which keeps one burst of
	// declarations for the queues to pack into full batches.
	patchCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, route := range unclaimed {
		patch := client.MergeFromWithOptions(route.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(route, v1.Finalizer)
		if err := f.Patch(patchCtx, route, patch); err != nil || !declare(route) {
			// Changed, deleted or slow (its reconcile decides), or nothing queued.
			reconcile = append(reconcile, client.ObjectKeyFromObject(route))
		}
	}
	f.Accounts.expediteAll()
	return len(all), reconcile, moved
}

// writeHealth sets the EdgeProvider's Healthy condition and last probe.
func (f *Failover) writeHealth(ctx context.Context, name string, state edge.State, p edge.Probe) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ep := &v1.EdgeProvider{}
		if err := f.Get(ctx, client.ObjectKey{Name: name}, ep); err != nil {
			return client.IgnoreNotFound(err)
		}
		before := ep.DeepCopy()
		setHealth(ep, state, p)
		return f.Status().Patch(ctx, ep, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

func setHealth(ep *v1.EdgeProvider, state edge.State, p edge.Probe) {
	cond := metav1.Condition{Type: v1.ConditionHealthy, ObservedGeneration: ep.Generation, Message: clip.String(p.Message, maxConditionMessage)}
	switch state {
	case edge.Healthy:
		cond.Status, cond.Reason = metav1.ConditionTrue, v1.ReasonProbeSucceeded
	case edge.Unhealthy:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1.ReasonProbeFailed
	default:
		cond.Status, cond.Reason = metav1.ConditionUnknown, v1.ReasonNotProbed
		if cond.Message == "" {
			cond.Message = "no health decision yet"
		}
	}
	meta.SetStatusCondition(&ep.Status.Conditions, cond)
	if !p.At.IsZero() {
		ep.Status.LastProbe = &v1.ProbeResult{Time: metav1.NewTime(p.At), Success: p.OK,
			LatencyMilliseconds: p.Latency.Milliseconds(), Message: p.Message}
	}
}

// heartbeat refreshes every probed EdgeProvider's last probe.
func (f *Failover) heartbeat(ctx context.Context) {
	var list v1.EdgeProviderList
	if err := f.List(ctx, &list); err != nil {
		return
	}
	for _, ep := range list.Items {
		// Undecided health is not written over a decision a previous leader recorded.
		if state, probe := f.Monitor.Health(ep.Name); !probe.At.IsZero() && state != edge.Unknown {
			if err := f.writeHealth(ctx, ep.Name, state, probe); err != nil {
				log.FromContext(ctx).Error(err, "heartbeat", "edge", ep.Name)
			}
		}
	}
}

func healthValue(s edge.State) float64 {
	switch s {
	case edge.Healthy:
		return 1
	case edge.Unhealthy:
		return 0
	}
	return -1
}

// checkOf is how the Monitor probes an EdgeProvider.
func checkOf(ep *v1.EdgeProvider) edge.Check {
	hc := ep.Spec.HealthCheck
	c := edge.Check{URL: hc.URL, HostHeader: hc.HostHeader, Interval: hc.Interval.Duration, Timeout: hc.Timeout.Duration,
		FailureThreshold: int(hc.FailureThreshold), SuccessThreshold: int(hc.SuccessThreshold), HoldDown: hc.FailbackHoldDown.Duration}
	if c.Interval <= 0 {
		c.Interval = 2 * time.Second
	}
	if c.Timeout <= 0 || c.Timeout >= c.Interval {
		c.Timeout = min(time.Second, c.Interval/2)
	}
	return c
}

// reportActiveEdge records the route's active edge and, when it moved, why: a Warning
// FailedOver event when its edge became unhealthy, a Normal FailedBack event when it
// returned to its preferred edge. It sets FailedOver and EdgeHealthy.
func (r *TenantRouteReconciler) reportActiveEdge(route *v1.TenantRoute, plan *routePlan, rec events.EventRecorder) {
	if plan.active == "" {
		return // nothing to point at: status keeps the last active edge
	}
	old := route.Status.ActiveEdge
	route.Status.ActiveEdge = plan.active
	gen := route.Generation
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: clip.String(message, maxConditionMessage), ObservedGeneration: gen})
	}
	preferred := route.Spec.Edges[0]
	why := func(name string) string {
		if ep, ok := plan.edges[name]; !ok {
			return name + " does not exist"
		} else if r.health(ep) == edge.Unhealthy {
			return name + " is unhealthy" + r.probeNote(name)
		}
		return name + " is healthy"
	}

	if old != "" && old != plan.active {
		now := metav1.Now()
		switch {
		case plan.reason == v1.ReasonFailedOver && !r.edgeUsable(plan, old):
			rec.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonFailedOver, "Failover",
				"traffic moved from %s to %s: %s", old, plan.active, why(old))
			route.Status.LastFailoverTime = &now
			failovers.WithLabelValues(old, plan.active).Inc()
		case plan.reason == v1.ReasonPreferred && plan.active == preferred:
			rec.Eventf(route, nil, corev1.EventTypeNormal, v1.ReasonFailedBack, "Failover",
				"traffic moved back from %s to %s: %s", old, plan.active, why(plan.active))
			route.Status.LastFailoverTime = &now
			failovers.WithLabelValues(old, plan.active).Inc()
		default:
			rec.Eventf(route, nil, corev1.EventTypeNormal, v1.ReasonActiveEdgeChanged, "Failover",
				"active edge changed from %s to %s (%s)", old, plan.active, plan.reason)
		}
	}

	switch {
	case plan.reason == v1.ReasonPinnedEdgeMissing:
		set(v1.ConditionFailedOver, metav1.ConditionFalse, v1.ReasonPinnedEdgeMissing,
			fmt.Sprintf("failover.pinnedEdge %s does not exist: traffic is on %s", route.Spec.Failover.PinnedEdge, plan.active))
	case plan.reason == v1.ReasonPinned:
		message := "failover.mode is Manual: traffic stays on " + plan.active
		if reason := route.Spec.Failover.Reason; reason != "" {
			message += " (" + reason + ")"
		}
		set(v1.ConditionFailedOver, metav1.ConditionFalse, v1.ReasonPinned, message)
	case plan.active != preferred:
		set(v1.ConditionFailedOver, metav1.ConditionTrue, v1.ReasonFailedOver,
			fmt.Sprintf("traffic is on %s because %s", plan.active, why(preferred)))
	default:
		set(v1.ConditionFailedOver, metav1.ConditionFalse, v1.ReasonPreferred, "traffic is on the preferred edge "+preferred)
	}

	r.failStatic.set(types.NamespacedName{Namespace: route.Namespace, Name: route.Name}, plan.reason == v1.ReasonFailStatic)
	oldHealthy := previousCondition(route.Status.Conditions, v1.ConditionEdgeHealthy)
	switch h := r.health(plan.edges[plan.active]); {
	case plan.reason == v1.ReasonFailStatic:
		message := fmt.Sprintf("no edge is healthy: records stay on %s (fail static)", plan.active)
		set(v1.ConditionEdgeHealthy, metav1.ConditionFalse, v1.ReasonFailStatic, message)
		if oldHealthy == nil || oldHealthy.Reason != v1.ReasonFailStatic {
			rec.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonFailStatic, "Failover", "%s", message)
		}
	case h == edge.Healthy:
		set(v1.ConditionEdgeHealthy, metav1.ConditionTrue, v1.ReasonProbeSucceeded, plan.active+" passes its health check")
	case h == edge.Unhealthy:
		set(v1.ConditionEdgeHealthy, metav1.ConditionFalse, v1.ReasonEdgeUnhealthy, why(plan.active))
	default:
		set(v1.ConditionEdgeHealthy, metav1.ConditionUnknown, v1.ReasonNotProbed, plan.active+" has not been probed yet")
	}
}

// edgeUsable reports whether an edge exists and is not unhealthy.
func (r *TenantRouteReconciler) edgeUsable(plan *routePlan, name string) bool {
	ep, ok := plan.edges[name]
	return ok && r.health(ep) != edge.Unhealthy
}

func (r *TenantRouteReconciler) probeNote(name string) string {
	if r.Monitor == nil {
		return ""
	}
	if _, p := r.Monitor.Health(name); p.Message != "" {
		return " (" + p.Message + ")"
	}
	return ""
}
