package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// RegionReconciler reports each Region's backend count, which kubectl get shows.
type RegionReconciler struct {
	client.Client
}

// +kubebuilder:rbac:groups=routing.tenantroute.io,resources=regions/status,verbs=get;update;patch

// Reconcile implements reconcile.Reconciler.
func (r *RegionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	region := &v1.Region{}
	if err := r.Get(ctx, req.NamespacedName, region); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := region.DeepCopy()
	region.Status.BackendCount = int32(len(region.Spec.Backends))
	region.Status.ObservedGeneration = region.Generation
	return ctrl.Result{}, patchStatus(ctx, r.Client, before, region, before.Status, region.Status)
}

// SetupWithManager registers the reconciler.
func (r *RegionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.Region{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("region").
		Complete(r)
}
