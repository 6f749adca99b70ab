package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// RouteKVReconciler keeps the shared KV (Redis) that standalone proxies read filled
// with the route of every granted hostname as TenantRoutes change. Redis being down
// delays this, never routing: the proxies fall through to the lookup endpoint. What a
// change missed (Redis down, a restart) the periodic kvSync repairs.
type RouteKVReconciler struct {
	client.Client
	KV routes.KV
	// Source says which route each hostname leads to.
	Source routes.Source
	// Mu is held by a reconcile and by a whole kvSync run, so that a sync cannot
	// write back a route a reconcile just changed or deleted.
	Mu *sync.Mutex
}

// hostsKey is the Redis set of the hostnames written for a TenantRoute, so that they
// can be removed when it changes or goes.
func hostsKey(key types.NamespacedName) string { return hostsKeyPrefix + key.String() }

const hostsKeyPrefix = "tenantroute:hosts:"

// Reconcile implements reconcile.Reconciler.
func (r *RouteKVReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.Mu.Lock()
	defer r.Mu.Unlock()
	written, err := r.KV.Client.SMembers(ctx, hostsKey(req.NamespacedName)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return ctrl.Result{}, fmt.Errorf("reading the hostnames written for %s: %w", req.NamespacedName, err)
	}
	route := &v1.TenantRoute{}
	var current []string
	if err := r.Get(ctx, req.NamespacedName, route); err == nil && route.DeletionTimestamp.IsZero() {
		current = route.Spec.Hostnames
	} else if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	// Each hostname gets the route of whichever TenantRoute holds it now.
	src := r.Source
	put := map[string]routes.Route{}
	var gone []string
	for _, h := range slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(written), current...)))) {
		switch rt, err := src.Lookup(ctx, h); {
		case err == nil:
			put[h] = rt
		case errors.Is(err, routes.ErrNotFound):
			gone = append(gone, h)
		default:
			return ctrl.Result{}, err
		}
	}
	if err := r.KV.Put(ctx, put); err != nil {
		return ctrl.Result{}, fmt.Errorf("writing routes to Redis: %w", err)
	}
	if err := r.KV.Delete(ctx, gone...); err != nil {
		return ctrl.Result{}, fmt.Errorf("deleting routes from Redis: %w", err)
	}
	pipe := r.KV.Client.TxPipeline()
	pipe.Del(ctx, hostsKey(req.NamespacedName))
	if len(current) > 0 {
		members := make([]any, len(current))
		for i, h := range current {
			members[i] = h
		}
		pipe.SAdd(ctx, hostsKey(req.NamespacedName), members...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return ctrl.Result{}, fmt.Errorf("recording the hostnames written for %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler: TenantRoutes whose entries may have
// changed, and Regions through the TenantRoutes in them.
func (r *RouteKVReconciler) SetupWithManager(mgr ctrl.Manager, routes *TenantRouteReconciler) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.TenantRoute{}, builder.WithPredicates(leadsElsewhere())).
		Watches(&v1.Region{}, handler.EnqueueRequestsFromMapFunc(routesMatching(routes.byRegion)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("routekv").
		Complete(r)
}

// leadsElsewhere passes the TenantRoute updates that can change where its hostnames
// lead: its spec (tenantID, region, hostnames), its deletion, or its claims, which say
// which hostnames it holds and since when (the tie-break between two holders). The
// rest of its status (conditions, active edge, records, certificates) changes with
// every failover and every report and leads nowhere else: at 100,000 routes each such
// write was a reconcile and three or four round trips to Redis for entries that stayed
// the same.
func leadsElsewhere() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*v1.TenantRoute)
		tr, okNew := e.ObjectNew.(*v1.TenantRoute)
		if !okOld || !okNew {
			return true
		}
		return old.Generation != tr.Generation || !old.DeletionTimestamp.Equal(tr.DeletionTimestamp) ||
			!equality.Semantic.DeepEqual(old.Status.TenantID, tr.Status.TenantID) ||
			!equality.Semantic.DeepEqual(old.Status.Hostnames, tr.Status.Hostnames)
	}}
}

// kvSync writes every granted hostname's route to the KV again and deletes every
// route key no TenantRoute grants, whoever wrote it: on start (it runs on the leader,
// so on becoming leader too) and every Interval, which must be well below the
// entries' TTL. A route deleted while Redis was down is gone from Redis within one
// interval after it is back.
type kvSync struct {
	Reader   client.Reader
	Source   routes.Source
	KV       routes.KV
	Interval time.Duration
	Mu       *sync.Mutex // shared with RouteKVReconciler
}

// Start implements manager.Runnable.
func (s *kvSync) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("kvsync")
	kvSyncs.WithLabelValues("ok")
	kvSyncs.WithLabelValues("error")
	t := time.NewTicker(s.Interval)
	defer t.Stop()
	for {
		if deleted, err := s.sync(ctx); err != nil {
			kvSyncs.WithLabelValues("error").Inc()
			log.Info("the shared cache could not be synchronised; trying again at the next interval", "error", err.Error())
		} else {
			kvSyncs.WithLabelValues("ok").Inc()
			kvOrphansDeleted.Add(float64(deleted))
			if deleted > 0 {
				log.Info("deleted routes no TenantRoute grants from the shared cache", "deleted", deleted)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (s *kvSync) NeedLeaderElection() bool { return true }

func (s *kvSync) sync(ctx context.Context) (int, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	var list v1.TenantRouteList // read in place, not copied: only the granted hostnames are read
	if err := s.Reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing TenantRoutes: %w", err)
	}
	src := s.Source
	want := map[string]routes.Route{}
	for i := range list.Items {
		for _, h := range routes.Granted(&list.Items[i]) {
			switch r, err := src.Lookup(ctx, h); {
			case err == nil:
				want[h] = r
			case !errors.Is(err, routes.ErrNotFound):
				return 0, err
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	deleted, err := s.KV.Sync(ctx, want)
	if err != nil {
		return deleted, err
	}
	// The record of what each route wrote: deleted for routes that are gone, and
	// written again for routes that have none (Redis lost it: a restart without
	// persistence, a failover to an empty replica), or a hostname such a route drops
	// would stay in Redis, leading to it, until the next synchronisation.
	exists := map[string]bool{}
	for i := range list.Items {
		exists[hostsKey(client.ObjectKeyFromObject(&list.Items[i]))] = true
	}
	recorded, err := s.KV.Keys(ctx, hostsKeyPrefix+"*")
	if err != nil {
		return deleted, err
	}
	has := make(map[string]bool, len(recorded))
	for _, k := range recorded {
		has[k] = true
	}
	// One key per command (a Redis Cluster refuses a DEL of keys on several slots), in
	// pipelines of 1,000: after Redis lost its data, every route's record is written.
	pipe := s.KV.Client.Pipeline()
	flush := func(force bool) error {
		if !force && pipe.Len() < 1000 {
			return nil
		}
		_, err := pipe.Exec(ctx) // nothing is sent for an empty pipeline
		return err
	}
	for i := range list.Items {
		key := hostsKey(client.ObjectKeyFromObject(&list.Items[i]))
		if granted := routes.Granted(&list.Items[i]); len(granted) > 0 && !has[key] {
			members := make([]any, len(granted))
			for j, h := range granted {
				members[j] = h
			}
			pipe.SAdd(ctx, key, members...)
			if err := flush(false); err != nil {
				return deleted, err
			}
		}
	}
	for _, key := range slices.DeleteFunc(recorded, func(k string) bool { return exists[k] }) {
		pipe.Del(ctx, key)
		if err := flush(false); err != nil {
			return deleted, err
		}
	}
	return deleted, flush(true)
}
