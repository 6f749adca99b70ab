package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
)

// rewriteTracker follows failovers from the health decision until every record they
// changed is applied (the failover duration metric) and until every moved route's
// status shows its new edge, so that the EdgeProvider and the Regions can say at once
// what a failover moved, however many route statuses are still to follow.
type rewriteTracker struct {
	mu     sync.Mutex
	active []*rewrite
	// wake, if set, is signalled when a rewrite has news worth reporting now (its
	// records have all moved).
	wake chan struct{}
}

// rewrite is one failover (or failback) of an edge's routes.
type rewrite struct {
	tracker *rewriteTracker
	edge    string
	reason  string // v1.ReasonFailedOver or v1.ReasonFailedBack; "" reports nothing
	start   time.Time
	pending map[queueOwner]bool // queue owners whose changed records are not applied yet
	open    bool                // still being declared
	// recordsAt is when pending emptied once the declaration was over.
	recordsAt time.Time
	// statuses are the moved routes whose status does not show their new edge yet;
	// moved and left count the moved routes and those statuses by region.
	statuses    map[types.NamespacedName]routeMove
	moved, left map[string]int32
	// superseded: the edge's health changed again; this rewrite is no longer reported.
	superseded bool
	// dirty: there is news for the report; announce: the records have just moved, which
	// the report announces with an event; reportedAt: when it last wrote.
	dirty, announce bool
	reportedAt      time.Time
}

type routeMove struct{ region, to string }

// queueOwner is an owner of records in one zone queue; its strings are the queue's and
// the route's own, so that a key costs no allocation (200,000 per 100,000-route
// failover).
type queueOwner struct{ edge, zone, owner string }

func (t *rewriteTracker) begin(edge, reason string, start time.Time) *rewrite {
	rw := &rewrite{tracker: t, edge: edge, reason: reason, start: start, pending: map[queueOwner]bool{}, open: true,
		statuses: map[types.NamespacedName]routeMove{}, moved: map[string]int32{}, left: map[string]int32{}, dirty: true}
	t.mu.Lock()
	for _, old := range t.active {
		if old.edge == edge {
			old.superseded = true
		}
	}
	t.active = append(t.active, rw)
	t.mu.Unlock()
	return rw
}

// add counts a queue owner whose records the failover changed.
func (rw *rewrite) add(edgeName, zone, owner string) {
	rw.tracker.mu.Lock()
	defer rw.tracker.mu.Unlock()
	rw.pending[queueOwner{edgeName, zone, owner}] = true
}

// move records a route whose active edge the failover changed.
func (rw *rewrite) move(key types.NamespacedName, region, to string) {
	if rw.reason == "" {
		return // not reported: nothing to follow
	}
	rw.tracker.mu.Lock()
	defer rw.tracker.mu.Unlock()
	rw.statuses[key] = routeMove{region: region, to: to}
	rw.moved[region]++
	rw.left[region]++
}

// started closes the declaration; the rewrite's records are done when nothing is
// pending.
func (rw *rewrite) started() {
	rw.tracker.mu.Lock()
	defer rw.tracker.mu.Unlock()
	rw.open = false
	rw.tracker.sweep()
}

// forget drops an owner that is gone from every pending rewrite.
func (t *rewriteTracker) forget(owner string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rw := range t.active {
		for key := range rw.pending {
			if key.owner == owner {
				delete(rw.pending, key)
			}
		}
	}
	t.sweep()
}

func (t *rewriteTracker) outcome(edgeName, zone, owner string, o zonequeue.Outcome) {
	if !o.Synced || o.Err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rw := range t.active {
		delete(rw.pending, queueOwner{edgeName, zone, owner})
	}
	t.sweep()
}

// statusWritten notes that a route's status now says active; a route that is gone
// passes "" and counts as followed.
func (t *rewriteTracker) statusWritten(key types.NamespacedName, active string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, rw := range t.active {
		if m, ok := rw.statuses[key]; ok && (m.to == active || active == "") {
			delete(rw.statuses, key)
			rw.left[m.region]--
			rw.dirty = true
		}
	}
}

// sweep notes rewrites whose records have all moved and drops those with nothing left
// to follow; t.mu must be held.
func (t *rewriteTracker) sweep() {
	kept := t.active[:0]
	for _, rw := range t.active {
		if !rw.open && len(rw.pending) == 0 && rw.recordsAt.IsZero() {
			rw.recordsAt = time.Now()
			rw.dirty, rw.announce = true, !rw.superseded
			failoverRewriteSeconds.WithLabelValues(rw.edge).Observe(rw.recordsAt.Sub(rw.start).Seconds())
			if t.wake != nil {
				select {
				case t.wake <- struct{}{}:
				default:
				}
			}
		}
		done := !rw.recordsAt.IsZero() && (len(rw.statuses) == 0 && !rw.dirty || rw.superseded || rw.reason == "")
		if !done {
			kept = append(kept, rw)
		}
	}
	clear(t.active[len(kept):])
	t.active = kept
}

// failoverReport is what the EdgeProvider and each Region with moved routes are told.
type failoverReport struct {
	status   v1.FailoverStatus // the edge's whole
	regions  map[string]v1.FailoverStatus
	announce bool
	took     time.Duration
}

// reportEvery is the least time between two reports of one failover, but for the one
// that says its records moved: the statuses' count falls by hundreds a second, and
// each report is a write to every object it concerns.
const reportEvery = 2 * time.Second

// reports takes the news of the rewrites that have some to report now.
func (t *rewriteTracker) reports(now time.Time) []failoverReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []failoverReport
	for _, rw := range t.active {
		if rw.reason == "" || rw.superseded || !rw.dirty || (!rw.announce && now.Sub(rw.reportedAt) < reportEvery) {
			continue
		}
		base := v1.FailoverStatus{Edge: rw.edge, Reason: rw.reason, StartedAt: metav1.NewMicroTime(rw.start)}
		if !rw.recordsAt.IsZero() {
			at := metav1.NewMicroTime(rw.recordsAt)
			base.RecordsMovedAt = &at
		}
		r := failoverReport{status: base, regions: map[string]v1.FailoverStatus{}, announce: rw.announce, took: rw.recordsAt.Sub(rw.start)}
		for region, moved := range rw.moved {
			s := base
			s.Moved, s.StatusesPending = moved, rw.left[region]
			r.regions[region] = s
			r.status.Moved += moved
			r.status.StatusesPending += rw.left[region]
		}
		out = append(out, r)
		rw.dirty, rw.announce, rw.reportedAt = false, false, now
	}
	t.sweep()
	return out
}

// report writes the failovers' news into the EdgeProviders' and Regions' status, and
// announces records that have moved with one event on each.
func (f *Failover) report(ctx context.Context) {
	for _, r := range f.Routes.rewrites.reports(time.Now()) {
		ep := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: r.status.Edge}}
		if err := f.writeFailover(ctx, ep, r.status, func(o client.Object) **v1.FailoverStatus { return &o.(*v1.EdgeProvider).Status.Failover }); err != nil {
			log.FromContext(ctx).Error(err, "reporting a failover", "edge", r.status.Edge)
		} else if r.announce {
			f.Recorder.Eventf(ep, nil, eventType(r.status.Reason), r.status.Reason, "Failover",
				"records of %d TenantRoutes moved in %.1f s; %d route statuses to follow", r.status.Moved, r.took.Seconds(), r.status.StatusesPending)
		}
		for name, s := range r.regions {
			region := &v1.Region{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if err := f.writeFailover(ctx, region, s, func(o client.Object) **v1.FailoverStatus { return &o.(*v1.Region).Status.Failover }); err != nil {
				log.FromContext(ctx).Error(err, "reporting a failover", "region", name)
			} else if r.announce {
				f.Recorder.Eventf(region, nil, eventType(s.Reason), s.Reason, "Failover",
					"edge %s: records of %d of this region's TenantRoutes moved in %.1f s; %d route statuses to follow", s.Edge, s.Moved, r.took.Seconds(), s.StatusesPending)
			}
		}
	}
}

func eventType(reason string) string {
	if reason == v1.ReasonFailedOver {
		return corev1.EventTypeWarning
	}
	return corev1.EventTypeNormal
}

// writeFailover sets obj's status.failover (field says where it is) on the latest
// version of obj.
func (f *Failover) writeFailover(ctx context.Context, obj client.Object, s v1.FailoverStatus, field func(client.Object) **v1.FailoverStatus) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		before := obj.DeepCopyObject().(client.Object)
		*field(obj) = &s
		return f.Status().Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
	if err = client.IgnoreNotFound(err); err != nil {
		return fmt.Errorf("writing status.failover of %s: %w", obj.GetName(), err)
	}
	return nil
}
