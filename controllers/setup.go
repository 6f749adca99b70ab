// Package controllers reconciles TenantRoutes, EdgeProviders and Regions.
package controllers

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/tenantroute/tenantroute-operator/edge"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// Options configure the operator's controllers.
type Options struct {
	// Namespace holds the EdgeProviders' credential Secrets: the operator's own.
	Namespace string
	// RouteNamespaces are the namespaces whose TenantRoutes the manager's cache holds,
	// when not all: the grants are learnt from the API server in those only.
	RouteNamespaces []string
	// Instance names this installation in the ownership marker of its records; two
	// installations writing the same zones need different instances.
	Instance string
	// ZoneResync is how often each zone is listed again; between listings the
	// operator's own writes keep its view current.
	ZoneResync time.Duration
	// Queue tunes the per-zone apply queues (coalescing window, backoff).
	Queue zonequeue.Options
	// Revalidate is how often EdgeProvider credentials and zones are checked again.
	Revalidate time.Duration
	// MaxConcurrentReconciles of TenantRoutes.
	MaxConcurrentReconciles int
	// RedisKV, if set, is kept filled with every granted hostname's route for
	// standalone proxies, and synchronised whole every KVSyncInterval.
	RedisKV        *routes.KV
	KVSyncInterval time.Duration
	// CertBook, if set, is where the proxies record the certificates they serve; each
	// granted hostname's certificate is then reported in status, read again every
	// CertStatusInterval (1 min).
	CertBook           routes.CertBook
	CertStatusInterval time.Duration
	// DNSResolver (host:port) is asked whether custom domains' owners proved control,
	// every CustomDomainInterval; a domain that loses its proof stays routed for
	// CustomDomainGrace. Without a resolver no custom domain is routed.
	DNSResolver          string
	CustomDomainInterval time.Duration
	CustomDomainGrace    time.Duration
	// DeletionTimeout bounds how long a TenantRoute's deletion waits for zones it
	// cannot reach (a zone gone for good, revoked credentials); then it completes,
	// naming the records possibly left behind in a Warning event (default 1 h).
	DeletionTimeout time.Duration
	// KeepOrphans turns off the sweep that deletes, on start and at every zone resync,
	// the records of this installation whose TenantRoute no longer exists.
	KeepOrphans bool
	// EventQPS and EventBurst budget TenantRoute events; FailoverEvents is how many
	// routes get their own event per health transition (see eventSink).
	EventQPS       float64
	EventBurst     int
	FailoverEvents int
}

// Setup registers every controller with the manager; provider queues run until ctx
// is done. It returns the source of truth of the routes, read from the manager's
// cache, for the proxy and the lookup endpoint.
func Setup(ctx context.Context, mgr ctrl.Manager, o Options) (routes.Source, error) {
	source, err := routes.NewSource(ctx, mgr.GetCache())
	if err != nil {
		return routes.Source{}, err
	}
	return source, setup(ctx, mgr, o, source)
}

func setup(ctx context.Context, mgr ctrl.Manager, o Options, source routes.Source) error {
	if o.Instance == "" {
		o.Instance = "default"
	}
	if o.ZoneResync == 0 {
		o.ZoneResync = 10 * time.Minute
	}
	if o.Revalidate == 0 {
		o.Revalidate = 10 * time.Minute
	}
	o.Queue.Resync = o.ZoneResync
	accounts := newAccounts(ctx)
	sink := newEventSink(mgr.GetEventRecorder("tenantroute-operator"), cmp.Or(o.EventQPS, DefaultEventQPS),
		cmp.Or(o.EventBurst, DefaultEventBurst), cmp.Or(o.FailoverEvents, DefaultFailoverEvents))
	var recorder events.EventRecorder = sink
	monitor := edge.NewMonitor()
	status, err := newStatusWriter(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme())
	if err != nil {
		return err
	}
	tenantRoutes := &TenantRouteReconciler{
		status: status,
		Client: mgr.GetClient(), Recorder: recorder, Accounts: accounts,
		Instance: o.Instance, MaxConcurrentReconciles: o.MaxConcurrentReconciles,
		Monitor: monitor, Claims: routes.NewClaims(), APIReader: mgr.GetAPIReader(), routeNamespaces: o.RouteNamespaces, rewrites: &rewriteTracker{wake: make(chan struct{}, 1)},
		DeletionTimeout: cmp.Or(o.DeletionTimeout, time.Hour), KeepOrphans: o.KeepOrphans,
		PendingGrace: cmp.Or(o.Queue.MaxWait, zonequeue.DefaultMaxWait) + 5*time.Second,
	}
	if o.DNSResolver != "" {
		tenantRoutes.Verifier = &domainVerifier{Resolver: o.DNSResolver,
			Interval: cmp.Or(o.CustomDomainInterval, time.Minute), Grace: cmp.Or(o.CustomDomainGrace, time.Hour),
			Answered: tenantRoutes.requests.addAfter}
	}
	failover := newFailover(mgr.GetClient(), recorder, tenantRoutes, accounts, monitor)
	failover.newWave = sink.newWave
	monitor.OnTransition = failover.OnTransition
	monitor.OnProbe = observeProbe
	if err := mgr.Add(monitor); err != nil {
		return fmt.Errorf("adding the edge monitor: %w", err)
	}
	if err := mgr.Add(failover); err != nil {
		return fmt.Errorf("adding the failover handler: %w", err)
	}
	// The grants are learnt as soon as this replica leads, beside the controllers'
	// start, rather than by the first reconcile, which waited for them: at 10,000
	// routes the seeding's pages took 0.56 s, after the controllers had spent 0.25 s
	// handing the cache's routes to their handlers. A failure is only logged: every
	// reconcile seeds again until one succeeds.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		start := time.Now()
		if err := tenantRoutes.Claims.EnsureSeeded(ctx, tenantRoutes.APIReader, o.RouteNamespaces...); err != nil {
			if ctx.Err() == nil {
				ctrl.LoggerFrom(ctx).Error(err, "learning the grants on becoming leader; the reconciles try again")
			}
			return nil
		}
		ctrl.LoggerFrom(ctx).V(1).Info("learnt the grants", "took", time.Since(start).Round(time.Millisecond).String())
		return nil
	})); err != nil {
		return fmt.Errorf("adding the grants' seeding: %w", err)
	}
	accounts.ready = tenantRoutes.edgeReady
	if err := tenantRoutes.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the TenantRoute controller: %w", err)
	}
	if !o.KeepOrphans {
		o.Queue.Orphaned = tenantRoutes.orphaned
		o.Queue.Swept = func(_ string, records int) { orphanRecordsDeleted.Add(float64(records)) }
	}
	edges := &EdgeProviderReconciler{
		Client: mgr.GetClient(), Recorder: recorder, Accounts: accounts, Monitor: monitor,
		Namespace: o.Namespace, Instance: o.Instance, ZoneResync: o.ZoneResync, QueueOptions: o.Queue, Notify: tenantRoutes.notify,
		Revalidate: o.Revalidate,
	}
	if err := edges.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the EdgeProvider controller: %w", err)
	}
	if err := (&RegionReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the Region controller: %w", err)
	}
	if o.CertBook != nil {
		if err := mgr.Add(&certStatus{Client: mgr.GetClient(), Book: o.CertBook, Recorder: recorder,
			Interval: cmp.Or(o.CertStatusInterval, time.Minute)}); err != nil {
			return fmt.Errorf("adding the certificate status reporter: %w", err)
		}
	}
	if o.RedisKV != nil {
		var mu sync.Mutex
		if err := (&RouteKVReconciler{Client: mgr.GetClient(), KV: *o.RedisKV, Source: source, Mu: &mu}).SetupWithManager(mgr, tenantRoutes); err != nil {
			return fmt.Errorf("setting up the Redis route writer: %w", err)
		}
		if o.KVSyncInterval <= 0 {
			o.KVSyncInterval = max(time.Second, cmp.Or(o.RedisKV.TTL, routes.DefaultEntryTTL)/3)
		}
		if err := mgr.Add(&kvSync{Reader: mgr.GetClient(), Source: source, KV: *o.RedisKV, Interval: o.KVSyncInterval, Mu: &mu}); err != nil {
			return fmt.Errorf("adding the Redis synchroniser: %w", err)
		}
	}
	return nil
}
