package controllers

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// routesMatching maps an object to the TenantRoutes whose index holds its name.
func routesMatching(idx *routes.Index) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		keys, err := idx.Keys(ctx, o.GetName())
		if err != nil {
			log.FromContext(ctx).Error(err, "finding the TenantRoutes to reconcile")
			return nil
		}
		reqs := make([]reconcile.Request, len(keys))
		for i, key := range keys {
			reqs[i] = reconcile.Request{NamespacedName: key}
		}
		return reqs
	}
}

// routesInNamespace maps a Namespace whose labels changed to its TenantRoutes: a zone's
// namespaceSelector may now select it, or no longer.
func (r *TenantRouteReconciler) routesInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	// Only their names are read, so the cache's objects are not copied.
	var list v1.TenantRouteList
	if err := r.List(ctx, &list, client.InNamespace(o.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the TenantRoutes of a namespace", "namespace", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i, tr := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: tr.Namespace, Name: tr.Name}}
	}
	return reqs
}

// sharedHostnames enqueues the other TenantRoutes that share a hostname with a route
// that was created, changed (old and new hostnames) or deleted, so that a route
// waiting for a hostname takes it as soon as it is released. byHostname indexes the
// routes by spec.hostnames.
func sharedHostnames(byHostname *routes.Index) handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], self client.Object, hostnames ...[]string) {
		seen := map[types.NamespacedName]bool{{Namespace: self.GetNamespace(), Name: self.GetName()}: true}
		for _, hs := range hostnames {
			for _, h := range hs {
				keys, err := byHostname.Keys(ctx, h)
				if err != nil {
					log.FromContext(ctx).Error(err, "finding the TenantRoutes that list a hostname", "hostname", h)
					continue
				}
				for _, key := range keys {
					if !seen[key] {
						seen[key] = true
						q.Add(reconcile.Request{NamespacedName: key})
					}
				}
			}
		}
	}
	hostnames := func(o client.Object) []string {
		if tr, ok := o.(*v1.TenantRoute); ok {
			return tr.Spec.Hostnames
		}
		return nil
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object, hostnames(e.Object))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetGeneration() == e.ObjectNew.GetGeneration() &&
				e.ObjectOld.GetDeletionTimestamp().Equal(e.ObjectNew.GetDeletionTimestamp()) {
				return
			}
			enqueue(ctx, q, e.ObjectNew, hostnames(e.ObjectOld), hostnames(e.ObjectNew))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object, hostnames(e.Object))
		},
	}
}

// disownedGrants enqueues a TenantRoute whose status came to record a grant the
// registry gives to another route, or to none: the write of a former leader that
// resumed after its lease ran out, or a hand edit. Its reconcile writes the status the
// registry decides (Conflict where another holds the name). Without it, readers would
// follow the stale grant, the earlier one by Holder's rule, until the route next
// changed.
func disownedGrants(claims *routes.Claims) handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			old, okOld := e.ObjectOld.(*v1.TenantRoute)
			tr, ok := e.ObjectNew.(*v1.TenantRoute)
			if !ok || !okOld || slices.Equal(routes.Granted(old), routes.Granted(tr)) {
				return
			}
			if claims.Disowns(tr) {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: tr.Namespace, Name: tr.Name}})
			}
		},
	}
}
