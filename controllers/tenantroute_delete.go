package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/internal/clip"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
)

// reconcileDelete deletes the route's records from every provider it may have records
// in, then releases the route. While a provider is unreachable the finalizer stays and
// the queue retries with backoff. With the annotation routing.tenantroute.io/deletion-policy:
// Orphan the records stay, but lose this installation's marker first: records that
// kept it would be taken for the leftovers of a crash and deleted by the orphan sweep
// at the zone's next resync.
func (r *TenantRouteReconciler) reconcileDelete(ctx context.Context, route *v1.TenantRoute, owner string) (res ctrl.Result, retErr error) {
	if !controllerutil.ContainsFinalizer(route, v1.Finalizer) {
		return ctrl.Result{}, nil
	}
	orphan := route.Annotations[v1.DeletionPolicyAnnotation] == v1.DeletionPolicyOrphan
	blocked, deleting := r.deleteRecords(ctx, route, owner, orphan)
	// Counted from when this process started at the latest: after the operator was
	// down, accounts need a moment to come back, and deletions that were waiting
	// must not all be abandoned at once.
	waited := min(time.Since(route.DeletionTimestamp.Time), time.Since(r.startedAt))
	abandoned := (len(blocked) > 0 || deleting > 0) && r.DeletionTimeout > 0 && waited >= r.DeletionTimeout
	if abandoned {
		// A zone gone for good or credentials revoked must not hold the route, and
		// its namespace, forever. Whatever is left is named, counted, and swept as an
		// orphan once its zone can be reached again.
		left := r.leftBehind(route, blocked)
		where := strings.Join(blocked, "; ")
		if where == "" {
			where = strings.Join(left, ", ") + " (still deleting)"
		}
		after := "the orphan sweep removes them once their zone can be reached"
		switch {
		case orphan && r.KeepOrphans:
			after = "they still carry this installation's marker; the orphan sweep is off (--sweep-orphans=false), so they stay"
		case orphan:
			after = "they still carry this installation's marker, so the orphan sweep deletes them once their zone can be reached; --sweep-orphans=false keeps them"
		case r.KeepOrphans:
			after = "the orphan sweep is off (--sweep-orphans=false): delete them by hand"
		}
		r.Recorder.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonDeletionAbandoned, "DeleteRecords",
			"deleted after waiting %s for the providers; records of %s may remain in %s; %s",
			r.DeletionTimeout, strings.Join(route.Spec.Hostnames, ", "), where, after)
		for _, edge := range left {
			abandonedDeletions.WithLabelValues(edge).Inc()
		}
		log.FromContext(ctx).Info("deletion completed without the providers' confirmation", "waited", waited.Round(time.Second),
			"blocked", blocked, "hostnames", route.Spec.Hostnames)
	} else if len(blocked) > 0 || deleting > 0 {
		before := route.DeepCopy()
		verb, done := "deleting", "deleted"
		if orphan {
			verb, done = "releasing (deletion-policy Orphan: they stay, without this installation's marker)", "released"
		}
		ready := metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonDeleting,
			Message: fmt.Sprintf("%s %d record sets", verb, deleting), ObservedGeneration: route.Generation}
		if len(blocked) > 0 {
			ready.Reason, ready.Message = v1.ReasonDeletionBlocked, clip.String("records cannot be "+done+" yet: "+strings.Join(blocked, "; "), maxConditionMessage)
			if old := meta.FindStatusCondition(route.Status.Conditions, v1.ConditionReady); old == nil || old.Message != ready.Message {
				r.Recorder.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonDeletionBlocked, "DeleteRecords", "%s", ready.Message)
			}
		}
		meta.SetStatusCondition(&route.Status.Conditions, ready)
		reconcileOutcomes.WithLabelValues("deleting").Inc()
		// Waiting for every zone, as a route whose records are pending: a zone that
		// cannot be read tells it so (notify).
		r.markPending(owner).listing.Store(true)
		requeue := requeueSafety
		if r.DeletionTimeout > 0 {
			requeue = min(requeue, r.DeletionTimeout-waited)
		}
		return ctrl.Result{RequeueAfter: requeue}, r.status.write(ctx, before, route, false)
	}
	r.retire(owner, route.UID)
	if !abandoned {
		// A declaration made from an older snapshot between the check above and the
		// retirement shows now as pending: delete (or release) it too before letting go.
		if blocked, deleting := r.deleteRecords(ctx, route, owner, orphan); len(blocked) > 0 || deleting > 0 {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
	}
	for _, edge := range desired.Edges(route) {
		if acct := r.Accounts.Get(edge); acct != nil {
			for zone, q := range acct.Queues() {
				q.Forget(owner)
				r.Accounts.countOutcome(edge, zone, owner, 0, false)
			}
		}
	}
	// A patch of the finalizers alone (see Reconcile).
	base := route.DeepCopy()
	controllerutil.RemoveFinalizer(route, v1.Finalizer)
	if err := client.IgnoreNotFound(r.Patch(ctx, route, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	r.owners.Delete(owner)
	r.pending.Delete(owner)
	r.failStatic.set(types.NamespacedName{Namespace: route.Namespace, Name: route.Name}, false)
	// Its records are gone: its hostnames and tenantID are free for the next claimant.
	key := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
	r.enqueueClaimants(ctx, key, r.Claims.Release(key))
	if r.rewrites != nil {
		r.rewrites.forget(owner)
	}
	reconcileOutcomes.WithLabelValues("deleted").Inc()
	return ctrl.Result{}, nil
}

// retiredOwner is a route whose deletion completed.
type retiredOwner struct {
	uid types.UID
	at  time.Time
}

// retiredFor bounds how long a retired owner is remembered: longer than any planner
// works from one snapshot.
const retiredFor = 10 * time.Minute

// retire makes declareRecords refuse the owner's records for the route of this UID
// from now on (a route created again under the same name has another UID). It waits
// for declarations in flight, so that the check that follows sees them.
func (r *TenantRouteReconciler) retire(owner string, uid types.UID) {
	r.retiredMu.Lock()
	defer r.retiredMu.Unlock()
	now := time.Now()
	if r.retired == nil {
		r.retired = map[string]retiredOwner{}
	}
	if len(r.retired)%1024 == 0 {
		for k, g := range r.retired {
			if now.Sub(g.at) > retiredFor {
				delete(r.retired, k)
			}
		}
	}
	r.retired[owner] = retiredOwner{uid: uid, at: now}
}

// leftBehind names the EdgeProviders a deletion gives up on, from the reasons it was
// blocked ("<edge>: ..." or "<edge> zone ...") or, when it was only slow, every
// EdgeProvider the route had records in.
func (r *TenantRouteReconciler) leftBehind(route *v1.TenantRoute, blocked []string) []string {
	var edges []string
	for _, b := range blocked {
		edge, _, _ := strings.Cut(b, ":")
		edge, _, _ = strings.Cut(edge, " ")
		if !slices.Contains(edges, edge) {
			edges = append(edges, edge)
		}
	}
	if len(edges) == 0 {
		edges = desired.Edges(route)
	}
	return edges
}

// deleteRecords asks every zone the route may have records in for none, or with
// release to leave them without the owner's marker; it returns what blocks the
// deletion and how many record sets the owner still holds.
func (r *TenantRouteReconciler) deleteRecords(ctx context.Context, route *v1.TenantRoute, owner string, release bool) ([]string, int) {
	var blocked []string
	deleting := 0
	for _, edge := range desired.Edges(route) {
		ep := &v1.EdgeProvider{}
		err := r.Get(ctx, client.ObjectKey{Name: edge}, ep)
		if apierrors.IsNotFound(err) {
			continue // an EdgeProvider that no longer exists cannot be reached: nothing to wait for
		}
		if err != nil {
			blocked = append(blocked, fmt.Sprintf("%s: %v", edge, err))
			continue
		}
		acct := r.Accounts.Get(edge)
		if acct == nil {
			blocked = append(blocked, edge+": EdgeProvider is not ready")
			continue
		}
		queues := acct.Queues()
		// A zone that holds one of the route's names but is not resolved yet may hold its
		// records: wait for it rather than release the route and orphan them.
		for _, h := range route.Spec.Hostnames {
			if z, ok := desired.ZoneFor(ep, h); ok && queues[z.Name] == nil && r.Accounts.conflict(edge, z.Name) == "" {
				blocked = append(blocked, fmt.Sprintf("%s zone %s: not resolved yet", edge, z.Name))
			}
		}
		for zone, q := range queues {
			var out zonequeue.Outcome
			if release && (ep.DeletionTimestamp.IsZero() || ep.Annotations[v1.DeletionPolicyAnnotation] == v1.DeletionPolicyOrphan) {
				out = q.Release(owner)
			} else {
				// An EdgeProvider being deleted (without Orphan) deletes every record of
				// this installation with itself: kept, they would point at an edge
				// nobody runs, and a release here would undo its retraction.
				out = q.Desire(owner, nil)
			}
			switch {
			case out.Err != nil:
				blocked = append(blocked, fmt.Sprintf("%s zone %s: %s", edge, zone, errorSummary(out.Err)))
			case !out.Synced || out.Records > 0:
				deleting += max(out.Records, 1)
			}
		}
	}
	slices.Sort(blocked)
	blocked = slices.Compact(blocked)
	return blocked, deleting
}

// errorSummary says what kind of provider failure err is, without its text (request
// ids, response bodies), so that a message about it changes only when the failure does.
func errorSummary(err error) string {
	kind := "unreachable or throttling"
	if providers.IsPermanent(err) {
		kind = "refusing the request"
	}
	if code := providers.ErrorCode(err); code != "" {
		return fmt.Sprintf("provider %s (%s)", kind, code)
	}
	return "provider " + kind
}

// orphaned tells the zone queues whether records marked with owner are this
// installation's and their TenantRoute is gone: they are then deleted at the zone's
// next resync (and on start). The set of existing owners is listed from the cache at
// most once a second, however many owners a zone holds.
func (r *TenantRouteReconciler) orphaned(owner string) bool {
	if !strings.HasPrefix(owner, r.Instance+"/") {
		return false // another installation's
	}
	r.existingMu.Lock()
	defer r.existingMu.Unlock()
	if time.Since(r.existingAt) > time.Second {
		var list v1.TenantRouteList
		if err := r.List(context.Background(), &list); err != nil {
			return false // cannot tell: keep
		}
		r.existing = make(map[string]bool, len(list.Items))
		for _, tr := range list.Items {
			r.existing[desired.OwnerKey(r.Instance, tr.Namespace, tr.Name)] = true
		}
		r.existingAt = time.Now()
	}
	return !r.existing[owner]
}
