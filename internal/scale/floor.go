package scale

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/apifloor"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// floorSample is how many routes the floor is measured on at most. A short sample
// measured the API server cheaper than a long stream of the same patches: with
// nothing else running, 5,000 patches cost it 30% less each than the first 40,000 of
// a stream did, and at 100,000 routes a 5,000-patch floor ran faster than any 30 s of
// the run (its watch cache, which keeps 75 s of events, and its heap were still
// growing). A phase of the run is one long stream, so the floor is as long as one: every
// route up to 30,000 (over 100 s of patches), not all of 100,000, which would add ten
// minutes to the run.
const floorSample = 30000

// floor measures, on this run's API server and etcd right after the manager stopped,
// what the statuses the operator wrote cost per patch: a sample of new routes in the
// routes' namespace gets the sync's status of one real route, then its failover's,
// each as a merge patch from the status before, as the operator writes them. A
// cluster-wide watch of the routes stands in for the manager's informer (the
// harness's own watch of the namespace is there too, as during the run).
func (r *run) floor(ctx context.Context, synced, failedOver *v1.TenantRouteStatus) (sync, failover apifloor.Cost, err error) {
	cfg := rest.CopyConfig(r.w.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the API server sets the pace, not the client
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return sync, failover, err
	}
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	watch, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme(), DefaultTransform: cache.TransformStripManagedFields()})
	if err != nil {
		return sync, failover, err
	}
	if _, err := watch.GetInformer(watchCtx, &v1.TenantRoute{}); err != nil {
		return sync, failover, err
	}
	go func() { _ = watch.Start(watchCtx) }()
	if !watch.WaitForCacheSync(watchCtx) {
		return sync, failover, fmt.Errorf("the stand-in watch of the routes did not sync")
	}
	routes := make([]*v1.TenantRoute, min(r.cfg.Routes, floorSample))
	for i := range routes {
		name := fmt.Sprintf("floor%06d", i)
		routes[i] = &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: harness.RoutesNamespace},
			Spec: v1.TenantRouteSpec{TenantID: name, Region: harness.Region, Hostnames: []string{name + "." + r.zones[i%len(r.zones)]},
				Edges: []string{harness.CloudflareEdge, harness.AWSEdge}, TTL: 60}}
	}
	if _, err := apifloor.Each(routes, func(tr *v1.TenantRoute) error { return c.Create(ctx, tr) }); err != nil {
		return sync, failover, fmt.Errorf("creating the floor's routes: %w", err)
	}
	cp, err := apifloor.For(r.w.Env, cfg)
	if err != nil {
		return sync, failover, err
	}
	// The two statuses cost the API server within a third of each other in every run
	// measured; samples further apart than that caught a burst of the control plane's
	// own work, and are measured once more (alternating, so that every patch changes
	// the status).
	for attempt := 0; ; attempt++ {
		if sync, err = apifloor.Patch(ctx, c, cp, routes, withStatus(synced)); err != nil {
			return sync, failover, err
		}
		if failover, err = apifloor.Patch(ctx, c, cp, routes, withStatus(failedOver)); err != nil {
			return sync, failover, err
		}
		if apart := max(sync.API, failover.API) / max(min(sync.API, failover.API), 1e-9); apart < 1.6 || attempt == 1 {
			return sync, failover, nil
		}
		r.cfg.Log("the floor's samples disagree (%.2f and %.2f ms of API server CPU a patch): measuring again",
			sync.API*1000, failover.API*1000)
	}
}

// withStatus gives a route a copy of sample, with the route's own hostname.
func withStatus(sample *v1.TenantRouteStatus) func(*v1.TenantRoute) {
	return func(tr *v1.TenantRoute) {
		s := sample.DeepCopy()
		for i := range s.Hostnames {
			s.Hostnames[i].Hostname = tr.Spec.Hostnames[0]
		}
		tr.Status = *s
	}
}
