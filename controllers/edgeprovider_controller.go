package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/edge"
	"github.com/tenantroute/tenantroute-operator/internal/clip"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/connect"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
)

// Provider types shown in status.type.
const (
	TypeCloudflare = "Cloudflare"
	TypeRoute53    = "Route53"
)

// Indexes on EdgeProviders and TenantRoutes.
const (
	indexSecret    = "spec.secretName"
	indexEdges     = "spec.edges"
	indexRegion    = "spec.region"
	indexHostnames = "spec.hostnames"
	indexTenantID  = "spec.tenantID"
)

// EdgeProviderReconciler builds each EdgeProvider's provider client from its Secret,
// resolves its zones and reports CredentialsReady and ZonesReady.
type EdgeProviderReconciler struct {
	client.Client
	Recorder events.EventRecorder
	Accounts *Accounts
	// Namespace holds the credential Secrets (the operator's namespace).
	Namespace string
	// ZoneResync is how often a zone is listed again (the cache's lifetime).
	ZoneResync time.Duration
	// QueueOptions tune the per-zone apply queues.
	QueueOptions zonequeue.Options
	// Notify receives the outcome changes of the apply queues.
	Notify func(edge, zone, owner string, o zonequeue.Outcome)
	// Revalidate is how often credentials and zones are checked again.
	Revalidate time.Duration
	// Monitor probes each EdgeProvider's health check.
	Monitor *edge.Monitor

	// Instance names this installation in the ownership marker of its records: the
	// records deleted with an EdgeProvider are this installation's only.
	Instance string

	rejections sync.Map // EdgeProvider name -> refusals of its credentials in a row
	announced  sync.Map // EdgeProvider name -> what its deletion last reported
	// unreadable asks for a reconcile when a zone stops or starts being readable, so
	// that ZonesReady says so (zonequeue.Options.Readable); zonesSeen holds what the
	// last reconcile of each EdgeProvider found of each resolved zone (edge/zone ->
	// v1.ZoneStatus), kept while the zone does not resolve.
	unreadable requests
	zonesSeen  sync.Map
}

// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=edgeproviders,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=edgeproviders/finalizers,verbs=update
// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=edgeproviders/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch,namespace=system
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile implements reconcile.Reconciler.
func (r *EdgeProviderReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	ep := &v1.EdgeProvider{}
	if err := r.Get(ctx, req.NamespacedName, ep); err != nil {
		if apierrors.IsNotFound(err) {
			r.Accounts.Remove(req.Name)
			r.Monitor.Forget(req.Name)
			r.forgetZones(req.Name, nil)
			edgeHealthGauge.DeleteLabelValues(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ep.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, ep)
	}
	defer r.Accounts.markTried(ep.Name)
	if controllerutil.AddFinalizer(ep, v1.Finalizer) {
		if err := r.Update(ctx, ep); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}
	before := ep.DeepCopy()
	defer func() {
		if retErr == nil {
			ep.Status.ObservedGeneration = ep.Generation
		}
		// Optimistic locking: the failover handler writes the Healthy condition, which
		// a patch from a stale copy must not undo.
		retErr = errors.Join(retErr, patchStatus(ctx, r.Client, before, ep, before.Status, ep.Status, client.MergeFromWithOptimisticLock{}))
	}()

	ep.Status.Type = providerType(ep)
	r.Monitor.Watch(ep.Name, checkOf(ep), desired.EdgeHealth(ep))
	// Transitions set the gauge too; this sets it on a new leader, which inherits the
	// health from the status and sees no transition while an edge stays down.
	h, _ := r.Monitor.Health(ep.Name)
	edgeHealthGauge.WithLabelValues(ep.Name).Set(healthValue(h))
	if meta.FindStatusCondition(ep.Status.Conditions, v1.ConditionHealthy) == nil {
		setHealth(ep, edge.Unknown, edge.Probe{})
	}
	creds, reason, err := connect.ReadCredentials(ctx, r.getSecret, r.Namespace, ep)
	switch {
	case err != nil && reason == "":
		// Reading the Secret failed for a passing reason: keep the account, retry.
		return ctrl.Result{}, err
	case err != nil:
		r.Accounts.Remove(ep.Name)
		r.setCondition(ep, v1.ConditionCredentialsReady, metav1.ConditionFalse, reason, err.Error())
		meta.RemoveStatusCondition(&ep.Status.Conditions, v1.ConditionZonesReady)
		// The Secret watch brings the EdgeProvider back when the Secret appears.
		return ctrl.Result{}, nil
	}
	return r.connect(ctx, ep, creds, fmt.Sprintf("%d/%s", ep.Generation, creds.Version))
}

// connect makes sure the EdgeProvider has an account built from its current spec and
// Secret, with a queue for every zone that resolves. An account whose spec and Secret
// did not change is kept, queues and pending work included: only zones that did not
// resolve yet are tried again, and once all did, the credentials are checked at the
// Revalidate pace.
func (r *EdgeProviderReconciler) connect(ctx context.Context, ep *v1.EdgeProvider, creds connect.Credentials, fingerprint string) (ctrl.Result, error) {
	acct := r.Accounts.Get(ep.Name)
	fresh := acct == nil || acct.Fingerprint != fingerprint
	if fresh {
		p, err := connect.New(ctx, ep, creds, observeProvider(ep.Name))
		if err != nil {
			r.setCondition(ep, v1.ConditionCredentialsReady, metav1.ConditionFalse, v1.ReasonCredentialsRejected, err.Error())
			return ctrl.Result{}, reconcile.TerminalError(err)
		}
		// The queues list each zone again at their own, staggered resync; the cache's
		// expiry is only a backstop and must not come first: expiring together (the
		// zones of an account are first listed together), every zone of the account
		// was listed at once, and a 100,000-route failover's writes waited behind 876
		// Route53 list pages.
		acct = newAccount(ep.Name, fingerprint, providers.NewCached(p, 2*r.ZoneResync))
	}
	var missing, unreachable, conflicting []string
	var rejected error
	resolvedNow := 0
	var wanted []providers.Zone
	for _, z := range ep.Spec.Zones {
		if _, ok := acct.Queue(z.Name); !ok {
			wanted = append(wanted, providers.Zone{Name: z.Name, ID: z.ID})
		}
	}
	resolved, errs := acct.Provider.ResolveZones(ctx, wanted)
	var claimed map[string]string
	if len(wanted) > 0 {
		var err error
		if claimed, err = r.zonesClaimed(ctx, ep); err != nil {
			return ctrl.Result{}, err
		}
	}
	for i, zone := range resolved {
		z, err := wanted[i], errs[i]
		holder := ""
		if err == nil {
			if holder = r.Accounts.zoneHolder(zone.ID, ep.Name); holder == "" {
				holder = claimed[zone.ID]
			}
		}
		switch {
		case holder != "":
			// One EdgeProvider per zone: the records carry the installation's marker,
			// not the EdgeProvider's, so the other's deletion (or its removal of a
			// route's edge) would delete what this one keeps, and the routes would
			// still read Ready from this one's listing.
			conflicting = append(conflicting, fmt.Sprintf("%s (managed by EdgeProvider %s)", z.Name, holder))
			r.Accounts.conflicts.Store(ep.Name+"/"+z.Name, holder)
		case err == nil:
			r.Accounts.conflicts.Delete(ep.Name + "/" + z.Name)
			opts := r.QueueOptions
			opts.Log = log.FromContext(ctx).WithName("zonequeue").WithValues("edge", ep.Name)
			opts.Flushed = observeFlush(ep.Name)
			opts.Readable = r.wakeOnReadable(ep.Name, zone.Name)
			acct.AddQueue(zone.Name, zonequeue.New(acct.Provider, zone, opts, func(owner string, o zonequeue.Outcome) {
				r.Notify(ep.Name, zone.Name, owner, o)
			}))
			resolvedNow++
		case isAuthError(err):
			rejected = err
		case providers.IsPermanent(err):
			missing = append(missing, fmt.Sprintf("%s (%v)", z.Name, err))
		default:
			// Retried every 10 s: the provider's text, with its request ids, would
			// rewrite the status each time.
			unreachable = append(unreachable, fmt.Sprintf("%s (%s)", z.Name, errorSummary(err)))
		}
	}
	refused := !meta.IsStatusConditionTrue(ep.Status.Conditions, v1.ConditionCredentialsReady)
	if !fresh && resolvedNow == 0 && len(missing)+len(unreachable) == 0 && rejected == nil && len(ep.Spec.Zones) > 0 &&
		(refused || acct.checkDue(r.Revalidate/2)) {
		// Nothing to resolve: check that the credentials still work (again at once
		// while they are refused).
		z := ep.Spec.Zones[0]
		if q, ok := acct.Queue(z.Name); ok {
			if _, err := acct.Provider.ResolveZone(ctx, q.Zone()); isAuthError(err) {
				rejected = err
			}
		}
	}
	if rejected != nil {
		// Keep the installed account, its queues and their pending work: a 401/403 is
		// often passing (a token being rotated, an IAM change propagating, a provider
		// incident), and dropping the queues would stall the failovers and deletions in
		// them until the next revalidation. The queues retry their own calls with
		// backoff; the credentials are checked again with backoff too.
		r.setCondition(ep, v1.ConditionCredentialsReady, metav1.ConditionFalse, v1.ReasonCredentialsRejected,
			"the provider refused the credentials: "+rejected.Error())
		if r.Accounts.Get(ep.Name) == nil {
			meta.RemoveStatusCondition(&ep.Status.Conditions, v1.ConditionZonesReady)
		}
		return ctrl.Result{RequeueAfter: r.rejectedBackoff(ep.Name)}, nil
	}
	r.rejections.Delete(ep.Name)
	if fresh {
		r.Accounts.Set(acct)
	} else if resolvedNow > 0 && r.Accounts.ready != nil {
		r.Accounts.ready(ep.Name) // routes in the newly resolved zones were waiting
	}
	queues := acct.Queues()
	// A resolved zone that cannot be listed holds up only the routes waiting for it to
	// be read (a name let go, an edge removed, a deletion), and its queue retries with
	// backoff; this is where its EdgeProvider says so. A queue that has not listed its
	// zone yet (a new account after an edit or a rotated Secret, a new leader) keeps
	// what the status last said of the same zone: reporting it readable until its
	// first listing fails again would flap ZonesReady, with an event each way.
	last := map[string]v1.ZoneStatus{}
	for _, z := range ep.Status.Zones {
		last[z.Name] = z
	}
	inSpec := map[string]bool{}
	for _, z := range ep.Spec.Zones {
		inSpec[ep.Name+"/"+z.Name] = true
		// A zone that did not resolve for a while left the status, not this memory.
		if seen, ok := r.zonesSeen.Load(ep.Name + "/" + z.Name); ok && last[z.Name].Name == "" {
			last[z.Name] = seen.(v1.ZoneStatus)
		}
	}
	r.forgetZones(ep.Name, func(key string) bool { return !inSpec[key] })
	ep.Status.Zones = nil
	var unreadable []string
	var carried []*zonequeue.Queue
	for _, z := range ep.Spec.Zones {
		q, ok := queues[z.Name]
		if !ok {
			continue
		}
		zs := v1.ZoneStatus{Name: z.Name, ID: q.Zone().ID}
		switch tried, err := q.Listed(); {
		case err != nil:
			// The kind and code only: the provider's text carries request ids, and
			// would rewrite the status at every reconcile.
			zs.ListError = errorSummary(err)
		case !tried && last[z.Name].ID == zs.ID && last[z.Name].ListError != "":
			zs.ListError = last[z.Name].ListError
			carried = append(carried, q)
		}
		if zs.ListError != "" {
			unreadable = append(unreadable, fmt.Sprintf("%s (%s)", z.Name, zs.ListError))
		}
		r.zonesSeen.Store(ep.Name+"/"+z.Name, zs)
		ep.Status.Zones = append(ep.Status.Zones, zs)
	}
	for _, q := range carried {
		// Listed after it was asked, and before its error was stored for its
		// Readable: no wake-up came, so ask for one.
		if tried, _ := q.Listed(); tried {
			r.unreadable.add(types.NamespacedName{Name: ep.Name})
			break
		}
	}
	if len(queues) > 0 {
		r.setCondition(ep, v1.ConditionCredentialsReady, metav1.ConditionTrue, v1.ReasonCredentialsAccepted, "the provider accepted the credentials")
	}
	switch {
	case len(unreachable) > 0:
		r.setCondition(ep, v1.ConditionZonesReady, metav1.ConditionUnknown, v1.ReasonProviderUnreachable,
			"could not reach the provider to resolve zones: "+zoneList(unreachable))
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	case len(conflicting) > 0:
		// Looked at again shortly: the zone is this one's once the other is gone.
		r.setCondition(ep, v1.ConditionZonesReady, metav1.ConditionFalse, v1.ReasonZoneConflict,
			"zones another EdgeProvider manages, left alone until it is deleted: "+zoneList(conflicting))
		return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
	case len(missing) > 0:
		msg := "zones not found at the provider: " + zoneList(missing)
		if len(unreadable) > 0 {
			msg += "; zones that cannot be listed: " + zoneList(unreadable)
		}
		r.setCondition(ep, v1.ConditionZonesReady, metav1.ConditionFalse, v1.ReasonZoneNotFound, msg)
	case len(unreadable) > 0:
		r.setCondition(ep, v1.ConditionZonesReady, metav1.ConditionFalse, v1.ReasonZoneUnreadable,
			"zones that cannot be listed, retried with backoff: "+zoneList(unreadable))
	default:
		r.setCondition(ep, v1.ConditionZonesReady, metav1.ConditionTrue, v1.ReasonZonesResolved,
			fmt.Sprintf("%d zones resolved", len(queues)))
	}
	return ctrl.Result{RequeueAfter: r.Revalidate}, nil
}

// zonesClaimed returns the zones (by provider id) that another EdgeProvider manages
// before ep: its status lists them, and it came first (older, or as old and named
// first). Read from the statuses, the rule is the same after a restart or a change of
// leader, whichever EdgeProvider is reconciled first: held in memory alone, a
// Terminating EdgeProvider reconciled first would take the zone and delete the other's
// records with itself.
func (r *EdgeProviderReconciler) zonesClaimed(ctx context.Context, ep *v1.EdgeProvider) (map[string]string, error) {
	var all v1.EdgeProviderList
	if err := r.List(ctx, &all); err != nil {
		return nil, fmt.Errorf("listing EdgeProviders: %w", err)
	}
	claimed := map[string]string{}
	for _, o := range all.Items {
		first := o.CreationTimestamp.Before(&ep.CreationTimestamp) ||
			(o.CreationTimestamp.Equal(&ep.CreationTimestamp) && o.Name < ep.Name)
		if o.Name == ep.Name || !first {
			continue
		}
		for _, z := range o.Status.Zones {
			if z.ID != "" {
				claimed[z.ID] = o.Name
			}
		}
	}
	return claimed, nil
}

// wakeOnReadable is a zone queue's Readable: it reconciles the EdgeProvider when the
// zone cannot be listed, and when it can after the last reconcile said it could not
// (an earlier failure, or the status of an account this one replaces or of a former
// leader, carried over). It reads what the last reconcile found when the listing
// answers, not when the queue was made: that reconcile may have read a stale copy and
// been followed by one that read the status. A first listing that succeeds where
// nothing was wrong asks for nothing: at the start every zone lists.
func (r *EdgeProviderReconciler) wakeOnReadable(edge, zone string) func(error) {
	return func(err error) {
		seen, _ := r.zonesSeen.Load(edge + "/" + zone)
		if err != nil || seen != nil && seen.(v1.ZoneStatus).ListError != "" {
			r.unreadable.add(types.NamespacedName{Name: edge})
		}
	}
}

// forgetZones drops what the reconciles found of an EdgeProvider's zones, those that
// drop says (all when nil).
func (r *EdgeProviderReconciler) forgetZones(edge string, drop func(key string) bool) {
	for _, m := range []*sync.Map{&r.zonesSeen, &r.Accounts.conflicts} {
		m.Range(func(key, _ any) bool {
			if k := key.(string); strings.HasPrefix(k, edge+"/") && (drop == nil || drop(k)) {
				m.Delete(key)
			}
			return true
		})
	}
}

// zonesNamed is how many zones a condition's message names; status.zones has them all.
const zonesNamed = 10

// zoneList joins the first zonesNamed entries of a list of zones and says how many
// more there are. A message is bounded by the API (32,768 characters for a condition,
// which refuses the whole status beyond), and an EdgeProvider may have 100 zones,
// each quoted with a provider's error of a few hundred characters.
func zoneList(zones []string) string {
	if len(zones) <= zonesNamed {
		return strings.Join(zones, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(zones[:zonesNamed], "; "), len(zones)-zonesNamed)
}

// rejectedBackoff is how long until the credentials of an EdgeProvider the provider
// refused are tried again: 5 s, doubling with each refusal in a row, at most
// Revalidate.
func (r *EdgeProviderReconciler) rejectedBackoff(edge string) time.Duration {
	n := 0
	if v, ok := r.rejections.Load(edge); ok {
		n = v.(int)
	}
	r.rejections.Store(edge, n+1)
	return min(5*time.Second<<min(n, 16), r.Revalidate)
}

// isAuthError reports a permanent failure caused by the credentials.
func isAuthError(err error) bool {
	switch providers.ErrorCode(err) {
	case "10000", "9109", "401", "403", "InvalidClientTokenId", "SignatureDoesNotMatch", "AccessDenied",
		"UnrecognizedClientException", "IncompleteSignature", "MissingAuthenticationToken":
		return true
	}
	return false
}

// setCondition sets a condition and emits an event when its status or reason changes.
func (r *EdgeProviderReconciler) setCondition(ep *v1.EdgeProvider, typ string, status metav1.ConditionStatus, reason, message string) {
	old := previousCondition(ep.Status.Conditions, typ)
	meta.SetStatusCondition(&ep.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
		Message: clip.String(message, maxConditionMessage), ObservedGeneration: ep.Generation})
	if old != nil && old.Status == status && old.Reason == reason {
		return
	}
	eventType := corev1.EventTypeNormal
	if status != metav1.ConditionTrue {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(ep, nil, eventType, reason, typ, "%s", message)
}

// getSecret reads a Secret from the cache, for connect.ReadCredentials.
func (r *EdgeProviderReconciler) getSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	return secret, r.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, secret)
}

func providerType(ep *v1.EdgeProvider) string {
	if ep.Spec.Cloudflare != nil {
		return TypeCloudflare
	}
	return TypeRoute53
}

// SetupWithManager registers the reconciler; Secrets in the operator's namespace map
// to the EdgeProviders that name them.
func (r *EdgeProviderReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &v1.EdgeProvider{}, indexSecret,
		func(o client.Object) []string {
			if name, _ := connect.SecretRef(o.(*v1.EdgeProvider)); name != "" {
				return []string{name}
			}
			return nil
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.EdgeProvider{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, deletionStarted()))).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.providersOfSecret)).
		WatchesRawSource(source.Func(r.unreadable.start)).
		Named("edgeprovider").
		Complete(r)
}

func (r *EdgeProviderReconciler) providersOfSecret(ctx context.Context, o client.Object) []reconcile.Request {
	if o.GetNamespace() != r.Namespace {
		return nil
	}
	var list v1.EdgeProviderList
	if err := r.List(ctx, &list, client.MatchingFields{indexSecret: o.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "listing EdgeProviders of a Secret", "secret", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i, ep := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Name: ep.Name}}
	}
	return reqs
}

// deletionStarted passes the update that marks an object for deletion.
func deletionStarted() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// patchStatus writes status only when it changed.
func patchStatus(ctx context.Context, c client.Client, before, after client.Object, beforeStatus, afterStatus any, opts ...client.MergeFromOption) error {
	if equality.Semantic.DeepEqual(beforeStatus, afterStatus) {
		return nil
	}
	if err := client.IgnoreNotFound(c.Status().Patch(ctx, after, client.MergeFromWithOptions(before, opts...))); err != nil {
		return fmt.Errorf("patching status: %w", err)
	}
	return nil
}
