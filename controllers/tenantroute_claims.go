package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// routesMatching maps an object to the TenantRoutes whose index field names it.
func (r *TenantRouteReconciler) routesMatching(field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		return r.routeRequests(ctx, client.MatchingFields{field: o.GetName()})
	}
}

// routesInNamespace maps a Namespace whose labels changed to its TenantRoutes: a zone's
// namespaceSelector may now select it, or no longer.
func (r *TenantRouteReconciler) routesInNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	return r.routeRequests(ctx, client.InNamespace(o.GetName()))
}

// routeRequests lists TenantRoutes from the cache as reconcile requests. Only their
// names are read, so the cache's objects are not copied: an EdgeProvider's change
// lists all of its routes, which may be tens of thousands.
func (r *TenantRouteReconciler) routeRequests(ctx context.Context, opts ...client.ListOption) []reconcile.Request {
	var routes v1.TenantRouteList
	if err := r.List(ctx, &routes, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		log.FromContext(ctx).Error(err, "listing TenantRoutes to reconcile", "selector", opts)
		return nil
	}
	reqs := make([]reconcile.Request, len(routes.Items))
	for i, tr := range routes.Items {
		reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: tr.Namespace, Name: tr.Name}}
	}
	return reqs
}

// sharedHostnames enqueues the other TenantRoutes that share a hostname with a route
// that was created, changed (old and new hostnames) or deleted, so that a route
// waiting for a hostname takes it as soon as it is released.
func sharedHostnames(c client.Client) handler.EventHandler {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], self client.Object, hostnames ...[]string) {
		seen := map[types.NamespacedName]bool{{Namespace: self.GetNamespace(), Name: self.GetName()}: true}
		for _, hs := range hostnames {
			for _, h := range hs {
				var routes v1.TenantRouteList
				if err := c.List(ctx, &routes, client.MatchingFields{indexHostnames: h}); err != nil {
					log.FromContext(ctx).Error(err, "listing TenantRoutes by hostname", "hostname", h)
					continue
				}
				for _, tr := range routes.Items {
					key := types.NamespacedName{Namespace: tr.Namespace, Name: tr.Name}
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
