package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// lostHostname is a hostname an older TenantRoute holds.
type lostHostname struct {
	Hostname string
	Holder   types.NamespacedName
}

// claimHostnames splits the route's hostnames into those it holds and those an older
// TenantRoute claims. The older route keeps a contested hostname — a rule that gives
// the same answer whichever route is reconciled first, so ownership never flip-flops.
func (r *TenantRouteReconciler) claimHostnames(ctx context.Context, route *v1.TenantRoute) ([]string, []lostHostname, error) {
	var held []string
	var lost []lostHostname
	for _, h := range route.Spec.Hostnames {
		var others v1.TenantRouteList
		if err := r.List(ctx, &others, client.MatchingFields{indexHostnames: h}); err != nil {
			return nil, nil, fmt.Errorf("listing TenantRoutes with hostname %s: %w", h, err)
		}
		var holder *v1.TenantRoute
		for i := range others.Items {
			o := &others.Items[i]
			if o.UID != route.UID && older(o, route) && (holder == nil || older(o, holder)) {
				holder = o
			}
		}
		if holder != nil {
			lost = append(lost, lostHostname{Hostname: h, Holder: types.NamespacedName{Namespace: holder.Namespace, Name: holder.Name}})
			continue
		}
		held = append(held, h)
	}
	return held, lost, nil
}

// older orders routes by creation time, then by namespace and name.
func older(a, b *v1.TenantRoute) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// routesMatching maps an object to the TenantRoutes whose index field names it.
func (r *TenantRouteReconciler) routesMatching(field string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		var routes v1.TenantRouteList
		if err := r.List(ctx, &routes, client.MatchingFields{field: o.GetName()}); err != nil {
			log.FromContext(ctx).Error(err, "listing TenantRoutes", "field", field, "value", o.GetName())
			return nil
		}
		reqs := make([]reconcile.Request, len(routes.Items))
		for i, tr := range routes.Items {
			reqs[i] = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: tr.Namespace, Name: tr.Name}}
		}
		return reqs
	}
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
