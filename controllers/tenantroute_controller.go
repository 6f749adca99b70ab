package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/edge"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// TenantRouteReconciler keeps every TenantRoute's records in place in every provider
// it lists, pointing at its active edge.
type TenantRouteReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Accounts *Accounts
	// Instance names this operator installation in the ownership marker of its records.
	Instance string
	// MaxConcurrentReconciles; reconciles only declare records, the queues apply them.
	MaxConcurrentReconciles int
	// Monitor probes the edges; nil leaves health to the EdgeProviders' status.
	Monitor *edge.Monitor
	// Claims grants hostnames and tenantIDs, one decision at a time. It learns the
	// grants recorded in status from APIReader, the API server itself, when the
	// first route is planned (this replica leads by then).
	Claims          *routes.Claims
	APIReader       client.Reader
	routeNamespaces []string // where Claims learns the grants (all when empty)
	// DeletionTimeout: a deletion blocked this long completes anyway (reconcileDelete).
	DeletionTimeout time.Duration
	// KeepOrphans: the orphan sweep is off, so what an abandoned deletion leaves stays.
	KeepOrphans bool
	// Verifier checks custom domains' proof of control; without it none is routed.
	Verifier *domainVerifier
	// rewrites observes failovers until their records are rewritten.
	rewrites *rewriteTracker
	// The TenantRoutes that list an edge (in spec or status), a region, a tenantID, a
	// hostname (in spec), across namespaces.
	byEdge, byRegion, byTenantID, byHostname *routes.Index

	owners sync.Map // owner key -> types.NamespacedName
	// pending: the routes whose records are pending (settle) or being deleted, by
	// owner key (*pendingRoute).
	pending sync.Map
	// PendingGrace is how long a route whose records are queued keeps its status as it
	// was before saying Pending (default: the queues' longest coalescing wait + 5 s).
	PendingGrace time.Duration
	// status writes the routes' statuses.
	status *statusWriter
	// failStatic counts the routes whose every edge is unhealthy, for the gauge.
	failStatic routeSet
	requests   requests
	awaiting   awaiting

	// retired are the owners whose deletion completed, with the UID of the deleted
	// route: declareRecords refuses them (see retire).
	startedAt time.Time // for the deletion timeout

	retiredMu sync.RWMutex
	retired   map[string]retiredOwner

	existingMu sync.Mutex // the owners that exist, for the orphan sweep
	existing   map[string]bool
	existingAt time.Time
}

// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=tenantroutes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=tenantroutes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=tenantroutes/finalizers,verbs=update
// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=regions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Reconcile implements reconcile.Reconciler: fetch, finalizer, then the phases —
// claim the tenantID and hostnames, choose the active edge, declare records for the
// granted hostnames, report — with the status
// patched once at the end, observedGeneration only on success.
func (r *TenantRouteReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	// One copy per reconcile, not two: the cached object, read in place and never
	// changed, is the status patch's "before"; the copy is what the reconcile edits.
	cached := &v1.TenantRoute{}
	if err := r.Get(ctx, req.NamespacedName, cached, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			r.enqueueClaimants(ctx, req.NamespacedName, r.Claims.Release(req.NamespacedName))
			r.rewrites.statusWritten(req.NamespacedName, "")
			// Gone without its deletion here (its finalizer removed by hand, or by a
			// former leader): nothing of it is pending any more.
			r.pending.Delete(desired.OwnerKey(r.Instance, req.Namespace, req.Name))
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	route, before := cached.DeepCopy(), cached
	owner := r.ownerOf(route)
	if !route.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, route, owner)
	}
	if controllerutil.AddFinalizer(route, v1.Finalizer) {
		// A patch of the finalizers alone, on the version read: the cached route lacks
		// what the cache drops (CompactRoutes), which an update would delete.
		if err := r.Patch(ctx, route, client.MergeFromWithOptions(cached, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
		before = route.DeepCopy()
	}
	// The events of the transitions are sent once the status recording them is written.
	transitions := &eventBuffer{}
	settling := false
	var letGo []string // hostnames released once the status that drops them is saved
	defer func() {
		if settling {
			return
		}
		if p := r.pendingRoute(owner); p != nil {
			p.settling.Store(false)
		}
		if retErr == nil {
			route.Status.ObservedGeneration = route.Generation
		}
		// An event says what this reconcile saw change. A reconcile that read the route
		// from a cache behind its last status write sees the same change again, so a
		// status write carrying events must apply to the version read: if it does not,
		// the route is read again and nothing is announced twice.
		err := r.status.write(ctx, before, route, transitions.pending())
		switch {
		case err == nil:
			r.Claims.Saved(route)
			if len(letGo) > 0 {
				r.enqueueClaimants(ctx, req.NamespacedName, r.Claims.Let(route, letGo))
			}
			transitions.send(r.Recorder)
			r.rewrites.statusWritten(req.NamespacedName, route.Status.ActiveEdge)
		case apierrors.IsConflict(err) && retErr == nil:
			res, err = ctrl.Result{RequeueAfter: staleReadRetry}, nil
		}
		retErr = errors.Join(retErr, err)
	}()

	plan, err := r.planRoute(ctx, route, false, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(plan.unsaved) > 0 && !grantsUsedBeforeSaved {
		saved, err := r.saveGrants(ctx, before, plan)
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: staleReadRetry}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		before = saved
	}
	states := r.declareRecords(route, owner, plan, nil)
	for _, s := range states {
		if s.awaiting {
			r.awaiting.add(s.edge, req.NamespacedName)
		}
	}
	report := r.updateStatus(route, plan, states, transitions)
	if len(plan.releasing) > 0 && allSynced(states) {
		// The records at the hostnames it let go are gone from every provider: the
		// status stops recording them, and once that is saved they go to the next
		// claimant.
		route.Status.Hostnames = slices.DeleteFunc(route.Status.Hostnames, func(c v1.HostnameClaim) bool {
			return slices.Contains(plan.releasing, c.Hostname)
		})
		letGo = plan.releasing
	}
	reconcileOutcomes.WithLabelValues(report.outcome).Inc()
	if wait, ok := r.settle(owner, report.outcome, states); ok {
		// The queues apply the records within their flush and report the outcome,
		// which reconciles the route again: its status is written then, once, rather
		// than Pending now and Ready a moment later. Still pending after the grace
		// (a slow or failing provider), it says Pending.
		settling = true
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if report.rejected != nil {
		// controller-runtime drops the result of a reconcile that errs: the route's own
		// next check (its custom domains' proofs, a failing provider) is asked for here,
		// or a removed proof's grace would never run out while a record stays rejected.
		if report.result.RequeueAfter > 0 {
			r.requests.addAfter(req.NamespacedName, report.result.RequeueAfter)
		}
		return ctrl.Result{}, report.rejected
	}
	return report.result, nil
}

// grantsUsedBeforeSaved restores, in a build for fault tests only (plantfault.go),
// the ordering that saveGrants replaced.
var grantsUsedBeforeSaved = false

// allSynced reports whether the route's records are in place in every provider it has
// records in, as declared now.
func allSynced(states []*edgeState) bool {
	for _, s := range states {
		if st, _ := s.state(); st != v1.RecordsSynced {
			return false
		}
	}
	return len(states) > 0
}

// saveGrants saves the plan's claims in the route's status, on the version read, before
// the records of its contested grants are declared (contested). It returns the route
// as saved, the "before" of the reconcile's own status write.
func (r *TenantRouteReconciler) saveGrants(ctx context.Context, before *v1.TenantRoute, plan *routePlan) (*v1.TenantRoute, error) {
	saved := before.DeepCopy()
	tenant := plan.tenant
	saved.Status.TenantID = &tenant
	// Copies: the reconcile goes on editing the plan's claims into the route's status,
	// and saved is the "before" of that status's patch.
	saved.Status.Hostnames = slices.Clone(plan.claims)
	rv, err := r.status.writeLocked(ctx, before, saved)
	if err != nil {
		return nil, fmt.Errorf("saving the grant of %v: %w", plan.unsaved, err)
	}
	saved.ResourceVersion = rv
	r.Claims.Saved(saved)
	return saved, nil
}

// enqueueClaimants reconciles the routes that claim what was just freed, so that the
// next claimant is granted it at once.
func (r *TenantRouteReconciler) enqueueClaimants(ctx context.Context, self types.NamespacedName, freed routes.Freed) {
	if len(freed.Hostnames)+len(freed.TenantIDs) == 0 {
		return // the common case: nothing was let go
	}
	for idx, values := range map[*routes.Index][]string{r.byHostname: freed.Hostnames, r.byTenantID: freed.TenantIDs} {
		for _, v := range values {
			keys, err := idx.Keys(ctx, v)
			if err != nil {
				log.FromContext(ctx).Error(err, "finding the claimants of a freed name", "name", v)
				continue
			}
			for _, key := range keys {
				if key != self {
					r.enqueue(key)
				}
			}
		}
	}
}

// notify is called by the apply queues when an owner's outcome in a zone changes: it
// counts records, reports applied changes as an event and reconciles the route.
func (r *TenantRouteReconciler) notify(edgeName, zone, owner string, o zonequeue.Outcome) {
	if o.Unlisted {
		// A zone's listing failed, told to the empty desires that waited for it: it
		// concerns only the routes waiting for that zone to be read (an edge being
		// removed, a hostname let go, a route being deleted). The others, Ready
		// without it, are not even reconciled: in an account of 100,000 routes, 90,000
		// status writes each way, or 90,000 plans at every retry while the sync starts.
		if p := r.pendingRoute(owner); p != nil && p.listing.Load() {
			if v, ok := r.owners.Load(owner); ok {
				r.enqueue(v.(types.NamespacedName))
			}
		}
		return
	}
	r.Accounts.countOutcome(edgeName, zone, owner, o.Records, o.Err != nil || len(o.Failed) > 0)
	if r.rewrites != nil {
		r.rewrites.outcome(edgeName, zone, owner, o)
	}
	v, ok := r.owners.Load(owner)
	if !ok {
		return
	}
	key := v.(types.NamespacedName)
	// Creations and deletions are worth an event; updates come from failovers, whose
	// FailedOver event says more, and from TTL edits.
	if created, updated, deleted := countActions(o.Applied); created+deleted > 0 {
		route := &v1.TenantRoute{}
		if err := r.Get(context.Background(), key, route); err == nil {
			r.Recorder.Eventf(route, nil, corev1.EventTypeNormal, v1.ReasonRecordsChanged, "ApplyRecords",
				"%s zone %s: created %d, updated %d, deleted %d record sets", edgeName, zone, created, updated, deleted)
		}
	}
	if r.awaitsAnotherAnswer(owner, o) {
		return
	}
	if o.Records == 0 && len(o.Applied)+len(o.Failed)+len(o.Conflicts) == 0 && o.Err == nil {
		// An empty desire answered with nothing done: one of the nine other zones of
		// each edge where a route keeps none (they clean up after a hostname moves
		// zone), answered when the zone is first listed. The route's own records are
		// what its status waits for; these answers, 18 a route, went ahead of them.
		r.requests.addLow(key)
		return
	}
	r.enqueue(key)
}

// awaitsAnotherAnswer tells whether a route can skip the reconcile that outcome o
// asks for: the outcome is clean (its records in place, no error, conflict or
// rejection), the route's last reconcile kept its status unwritten for its queues'
// answers (settle), and another queue still holds records of it that are not in place.
// That queue notifies the route when they are, or when they fail, and the route is
// reconciled then; reconciling now would only find it pending again, and keep its
// status as it is. At the start of a 10,000-route sync these were a third of all
// reconciles: one a route for Cloudflare's answer, which comes before Route53's.
// Whatever the answers, the settle's own RequeueAfter still looks at the route when
// its grace runs out.
//
// Two answers cannot both be skipped: a queue records an owner's outcome under its
// lock before it notifies, and Holds reads it under the same lock, so of two answers
// that come together at least one finds the other in place and reconciles. A queue
// that never answers because its account was replaced is covered by edgeReady.
func (r *TenantRouteReconciler) awaitsAnotherAnswer(owner string, o zonequeue.Outcome) bool {
	if !o.Synced || o.Err != nil || len(o.Failed)+len(o.Conflicts) > 0 {
		return false
	}
	if p := r.pendingRoute(owner); p == nil || !p.settling.Load() {
		return false
	}
	return r.Accounts.holds(owner)
}

// edgeReady reconciles the TenantRoutes of an EdgeProvider whose account was just
// installed (or whose zones were just resolved): they may have found it not ready.
// Those that did have records for it, and go in with a route's own news; the others
// at low priority, as a fan-out. At low priority, a route whose records wait for the
// second account of a sync would wait behind the news of the first account's records
// as long as statuses are being written, as the initial listing did (see
// firstPlanAtDefaultPriority).
func (r *TenantRouteReconciler) edgeReady(edge string) {
	r.awaiting.release(edge, r.requests.add)
	go func() {
		for _, req := range routesMatching(r.byEdge)(context.Background(), &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: edge}}) {
			r.requests.addLow(req.NamespacedName)
		}
	}()
}

// settle tells whether a route whose records are pending keeps its status unwritten
// for now, and for how long at most. The grace runs from when the route was first
// found pending or from when the slowest queue holding its records last moved,
// whichever is later: a queue working through a backlog at the provider's rate (a
// 10,000-route sync, a failover) keeps its routes' statuses for the one write that
// says where they ended, while a queue that stands still (backing off after errors
// it reports) lets the route say Pending. Never longer than settleLimit in all, so
// that a route is not left without a word while a very long backlog drains.
//
// When every queue holding its records is flushing (inFlight), the route is not
// looked at again when the grace runs out: each flush tells the route how it went
// for it when it ends (the queue's outcome, which reconciles it), and a flush that
// fails says so the same way. Looking again every grace only planned the route
// again to find it pending: in a 100,000-route failover, whose Route53 batches take
// a minute at the provider's rate, 100,000 plans every 10 s beside the flushes.
func (r *TenantRouteReconciler) settle(owner, outcome string, states []*edgeState) (time.Duration, bool) {
	if outcome != "pending" {
		r.pending.Delete(owner)
		return 0, false
	}
	p := r.markPending(owner)
	p.listing.Store(awaitsListing(states))
	first := p.since
	from := first
	if moved := lastMoved(states); moved.After(from) {
		from = moved
	}
	wait := min(r.PendingGrace-time.Since(from), settleLimit-time.Since(first))
	if inFlight(states) && wait > 0 {
		wait = settleLimit - time.Since(first)
	}
	p.settling.Store(wait > 0)
	return wait, wait > 0
}

// pendingRoute is a route whose records are not all in place, or not all deleted.
type pendingRoute struct {
	since time.Time // when they were first found so
	// settling: the route's last reconcile kept its status unwritten while its
	// queues apply its records (see awaitsAnotherAnswer).
	settling atomic.Bool
	// listing: it waits for a zone's first listing, which may find records of it to
	// delete: a failed listing concerns it (see notify).
	listing atomic.Bool
}

// pendingRoute returns the owner's entry, nil when its records are in place.
func (r *TenantRouteReconciler) pendingRoute(owner string) *pendingRoute {
	if v, ok := r.pending.Load(owner); ok {
		return v.(*pendingRoute)
	}
	return nil
}

// markPending returns the owner's entry, made now if it had none.
func (r *TenantRouteReconciler) markPending(owner string) *pendingRoute {
	if p := r.pendingRoute(owner); p != nil {
		return p
	}
	v, _ := r.pending.LoadOrStore(owner, &pendingRoute{since: time.Now()})
	return v.(*pendingRoute)
}

// settleLimit bounds how long a route with pending records goes without a status
// saying so, however busy its queues are.
const settleLimit = 2 * time.Minute

func (r *TenantRouteReconciler) enqueue(key types.NamespacedName) { r.requests.add(key) }

// requests hands reconciles that the apply queues and failovers ask for straight to
// the controller's work queue, which merges repeats: a failover asks for thousands at
// once, and a channel would hold an object, or a blocked goroutine, for each.
type requests struct {
	mu      sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	waiting []waitingRequest // asked for before the controller started
}

type waitingRequest struct {
	key types.NamespacedName
	low bool
}

// awaiting holds, per EdgeProvider, the routes whose records could not be handed to
// it (its account or a zone not ready yet), until it is ready.
type awaiting struct {
	mu     sync.Mutex
	byEdge map[string]map[types.NamespacedName]struct{}
}

func (a *awaiting) add(edge string, key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byEdge == nil {
		a.byEdge = map[string]map[types.NamespacedName]struct{}{}
	}
	if a.byEdge[edge] == nil {
		a.byEdge[edge] = map[types.NamespacedName]struct{}{}
	}
	a.byEdge[edge][key] = struct{}{}
}

// release hands each route awaiting edge to add, and forgets them.
func (a *awaiting) release(edge string, add func(types.NamespacedName)) {
	a.mu.Lock()
	keys := a.byEdge[edge]
	delete(a.byEdge, edge)
	a.mu.Unlock()
	for key := range keys {
		add(key)
	}
}

func (q *requests) start(_ context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queue = queue
	for _, w := range q.waiting {
		q.addLocked(w.key, w.low)
	}
	q.waiting = nil
	return nil
}

func (q *requests) add(key types.NamespacedName) { q.addWith(key, false) }

// addLow asks for a reconcile that goes behind those asked for by add, as a fan-out
// does (see lowPriority).
func (q *requests) addLow(key types.NamespacedName) { q.addWith(key, true) }

// addAfter asks for a reconcile after d. The queue keeps one item a route at its
// earliest time, so requests within d of each other make one reconcile, and one that
// is queued already takes them all. Before the controller starts, it is an add: the
// initial listing reconciles every route then anyway.
func (q *requests) addAfter(key types.NamespacedName, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queue == nil {
		q.waiting = append(q.waiting, waitingRequest{key, false})
		return
	}
	q.queue.AddAfter(reconcile.Request{NamespacedName: key}, d)
}

func (q *requests) addWith(key types.NamespacedName, low bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.queue == nil {
		q.waiting = append(q.waiting, waitingRequest{key, low})
		return
	}
	q.addLocked(key, low)
}

func (q *requests) addLocked(key types.NamespacedName, low bool) {
	queue := q.queue
	if low {
		queue = lowPriorityQueue(queue)
	}
	queue.Add(reconcile.Request{NamespacedName: key})
}

// lowPriority puts the reconciles that h fans out from one object to many routes (an
// EdgeProvider that became ready, a Region's backends, a Namespace's labels) behind
// those that a single route's own news asks for: its records landed, a failover moved
// it, a name it waits for was freed. At the start of a 10,000-route sync the edges
// become ready while the routes are first planned, and their fan-out queued every
// route's plan ahead of the reports of records that had already landed: the first
// route was Ready 5 s after its records were in both providers, while the API server,
// which bounds the statuses, waited. The fanned-out plans still run, after the news;
// the controller's own initial listing is low already.
func lowPriority(h handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Create(ctx, e, lowPriorityQueue(q))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, e, lowPriorityQueue(q))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Delete(ctx, e, lowPriorityQueue(q))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Generic(ctx, e, lowPriorityQueue(q))
		},
	}
}

// firstPlanAtDefaultPriority queues the routes of the informer's initial listing at
// the default priority, where For queues them at the low one. A route not planned
// since the start has handed no records to any queue: no news will come for it, and
// at low priority it waited behind the news of every route planned before it. In a
// 10,000-route sync whose first records landed before every route was planned, the
// last plans came 50 s later, as the statuses ran out, and their records with them.
// (The queue raises an item's priority, never lowers it; handler.Funcs hands
// CreateFunc a queue whose default is the low priority during the initial listing,
// hence the explicit one.)
func firstPlanAtDefaultPriority() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if !e.IsInInitialList {
				return
			}
			req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
			if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
				defaultPriority := 0
				pq.AddWithOpts(priorityqueue.AddOpts{Priority: &defaultPriority}, req)
				return
			}
			q.Add(req)
		},
	}
}

// lowPriorityQueue is q adding at controller-runtime's low priority, that of an
// informer's initial listing; q itself when it is not a priority queue.
func lowPriorityQueue(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
		return lowQueue{pq}
	}
	return q
}

type lowQueue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
}

func (q lowQueue) Add(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{}, item)
}

func (q lowQueue) AddAfter(item reconcile.Request, after time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: after}, item)
}

func (q lowQueue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// AddWithOpts lowers what came at the default priority; the queue keeps the higher of
// an item's priorities, so a route already waiting for its own news keeps its place.
func (q lowQueue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	if o.Priority == nil || *o.Priority > handler.LowPriority {
		o.Priority = ptr.To(handler.LowPriority)
	}
	q.PriorityQueue.AddWithOpts(o, items...)
}

// SetupWithManager registers the reconciler, its indexes and its watches.
func (r *TenantRouteReconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.startedAt = time.Now()
	for _, ix := range []struct {
		into   **routes.Index
		name   string
		values func(*v1.TenantRoute) []string
		unique bool // few routes share a value
	}{
		{&r.byEdge, indexEdges, desired.Edges, false},
		{&r.byRegion, indexRegion, func(tr *v1.TenantRoute) []string { return []string{tr.Spec.Region} }, false},
		{&r.byTenantID, indexTenantID, func(tr *v1.TenantRoute) []string { return []string{tr.Spec.TenantID} }, true},
		{&r.byHostname, indexHostnames, func(tr *v1.TenantRoute) []string { return tr.Spec.Hostnames }, true},
	} {
		newIndex := routes.NewIndex
		if ix.unique {
			newIndex = routes.NewHashedIndex
		}
		idx, err := newIndex(context.Background(), mgr.GetCache(), ix.name, ix.values)
		if err != nil {
			return err
		}
		*ix.into = idx
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.TenantRoute{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{},
			predicate.AnnotationChangedPredicate{}))).
		Watches(&v1.TenantRoute{}, firstPlanAtDefaultPriority()).
		Watches(&v1.TenantRoute{}, sharedHostnames(r.byHostname)).
		Watches(&v1.TenantRoute{}, disownedGrants(r.Claims)).
		Watches(&v1.EdgeProvider{}, lowPriority(handler.EnqueueRequestsFromMapFunc(routesMatching(r.byEdge))),
			builder.WithPredicates(edgeProviderChanged())).
		// A Region's spec (its backends) changes where its routes lead; its status (a
		// failover's progress, written every few seconds during one) does not.
		Watches(&v1.Region{}, lowPriority(handler.EnqueueRequestsFromMapFunc(routesMatching(r.byRegion))),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesMetadata(&corev1.Namespace{}, lowPriority(handler.EnqueueRequestsFromMapFunc(r.routesInNamespace)),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Func(r.requests.start)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		WithLogConstructor(routeLogs(mgr)).
		Named("tenantroute").
		Complete(r)
}

// edgeProviderChanged passes EdgeProvider changes that can matter to its routes: spec
// and conditions, not the heartbeat of its last probe nor its failover report. The
// Healthy condition is left out too: the failover handler that writes it reconciles
// the routes a health change concerns itself, and only those whose records it did not
// move (the others follow their queues' report); reconciling every route of the edge
// again here was a second plan per route in every failover.
func edgeProviderChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, n := e.ObjectOld.(*v1.EdgeProvider), e.ObjectNew.(*v1.EdgeProvider)
		if o.Generation != n.Generation || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() {
			return true
		}
		conditionsOf := func(ep *v1.EdgeProvider) int {
			n := len(ep.Status.Conditions)
			if meta.FindStatusCondition(ep.Status.Conditions, v1.ConditionHealthy) != nil {
				n--
			}
			return n
		}
		if conditionsOf(o) != conditionsOf(n) {
			return true
		}
		for _, c := range n.Status.Conditions {
			if c.Type == v1.ConditionHealthy {
				continue
			}
			old := meta.FindStatusCondition(o.Status.Conditions, c.Type)
			if old == nil {
				return true
			}
			oldStatus, oldReason := asRoutesSee(*old)
			if status, reason := asRoutesSee(c); status != oldStatus || reason != oldReason {
				return true
			}
		}
		return false
	}}
}

// asRoutesSee is what an EdgeProvider's condition says to its routes. A zone that
// resolves but cannot be listed (ZoneUnreadable, given only when every zone resolves)
// changes no route's plan: it is resolved for them, and the routes with records there,
// or waiting for it to be read, hear of each failure from the zone's queue. Taken for a
// change, each turn of a zone's readability reconciled every route of the edge, 100,000
// plans each way.
func asRoutesSee(c metav1.Condition) (metav1.ConditionStatus, string) {
	if c.Type == v1.ConditionZonesReady && c.Reason == v1.ReasonZoneUnreadable {
		return metav1.ConditionTrue, v1.ReasonZonesResolved
	}
	return c.Status, c.Reason
}

// requeueSafety bounds how long a route with pending or failing records waits when a
// queue notification is lost.
const requeueSafety = time.Minute

// staleReadRetry is how soon a route whose status write found a newer version is read
// again: the cache is usually a few milliseconds behind the API server.
const staleReadRetry = 100 * time.Millisecond
