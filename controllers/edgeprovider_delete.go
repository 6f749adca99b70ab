package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/connect"
)

// reconcileDelete deletes every record this installation wrote in the EdgeProvider's
// zones, then lets it go: records left behind would point at an edge nobody runs any
// more, which whoever takes that edge's name or address next could serve (a dangling
// record). TenantRoutes stop declaring records in an EdgeProvider being deleted and
// report it. The annotation routing.tenantroute.io/deletion-policy: Orphan leaves the
// records in place.
func (r *EdgeProviderReconciler) reconcileDelete(ctx context.Context, ep *v1.EdgeProvider) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(ep, v1.Finalizer) {
		return ctrl.Result{}, nil
	}
	if ep.Annotations[v1.DeletionPolicyAnnotation] != v1.DeletionPolicyOrphan {
		left, blocked, err := r.deleteRecords(ctx, ep)
		if err != nil {
			return ctrl.Result{}, err // transient: retried with backoff
		}
		if blocked != "" {
			if r.announce(ep.Name, blocked) {
				r.Recorder.Eventf(ep, nil, corev1.EventTypeWarning, v1.ReasonDeletionBlocked, "DeleteRecords", "%s", blocked)
			}
			return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
		}
		if left > 0 {
			if r.announce(ep.Name, "deleting") {
				r.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, v1.ReasonDeletingRecords, "DeleteRecords",
					"deleting the records of %d TenantRoutes from its zones", left)
			}
			// The queues do not report to this controller: look again shortly.
			return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
		}
		r.Recorder.Eventf(ep, nil, corev1.EventTypeNormal, v1.ReasonRecordsDeleted, "DeleteRecords", "no record of this operator is left in its zones")
	}
	// The account goes only once the finalizer is: a failed update (a conflict with a
	// status write) is retried, and the retry needs the account to check again.
	controllerutil.RemoveFinalizer(ep, v1.Finalizer)
	if err := client.IgnoreNotFound(r.Update(ctx, ep)); err != nil {
		return ctrl.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	r.Accounts.Remove(ep.Name)
	r.Monitor.Forget(ep.Name)
	edgeHealthGauge.DeleteLabelValues(ep.Name)
	r.announced.Delete(ep.Name)
	log.FromContext(ctx).Info("EdgeProvider released", "orphanPolicy", ep.Annotations[v1.DeletionPolicyAnnotation] == v1.DeletionPolicyOrphan)
	return ctrl.Result{}, nil
}

// deleteRecords asks each zone's queue to delete the records of every owner of this
// installation found in the zone, and returns how many owners still have records
// there, or why it cannot delete them.
func (r *EdgeProviderReconciler) deleteRecords(ctx context.Context, ep *v1.EdgeProvider) (left int, blocked string, err error) {
	acct := r.Accounts.Get(ep.Name)
	if acct == nil {
		// Deleted while the operator was down, or since it restarted: build the account
		// from its Secret first.
		if creds, reason, err := connect.ReadCredentials(ctx, r.getSecret, r.Namespace, ep); err == nil && reason == "" {
			if _, err := r.connect(ctx, ep, creds, fmt.Sprintf("%d/%s", ep.Generation, creds.Version)); err != nil {
				log.FromContext(ctx).Error(err, "connecting to delete the EdgeProvider's records")
			}
			acct = r.Accounts.Get(ep.Name)
		}
	}
	if acct == nil {
		return 0, "its records cannot be deleted while its credentials or zones are not ready; " +
			"the annotation " + v1.DeletionPolicyAnnotation + ": " + v1.DeletionPolicyOrphan + " leaves them in place", nil
	}
	queues := acct.Queues()
	for _, z := range ep.Spec.Zones {
		if queues[z.Name] == nil && r.Accounts.conflict(ep.Name, z.Name) != "" {
			continue // another EdgeProvider manages it: nothing there is this one's
		}
		if queues[z.Name] == nil {
			return 0, fmt.Sprintf("zone %s is not resolved, its records cannot be deleted; the annotation %s: %s leaves them in place",
				z.Name, v1.DeletionPolicyAnnotation, v1.DeletionPolicyOrphan), nil
		}
	}
	for _, q := range queues {
		records, err := acct.Provider.ListRecords(ctx, q.Zone())
		if err != nil && providers.IsPermanent(err) {
			// A zone gone at the provider, or credentials revoked: no retry changes
			// that, and the deletion says so rather than retrying in silence.
			return 0, fmt.Sprintf("zone %s cannot be listed: %s; the annotation %s: %s leaves the records in place",
				q.Zone().Name, errorSummary(err), v1.DeletionPolicyAnnotation, v1.DeletionPolicyOrphan), nil
		}
		if err != nil {
			return 0, "", fmt.Errorf("listing zone %s: %w", q.Zone().Name, err)
		}
		// The owners with records in the zone, and those the queue knows, whose records
		// may be on their way.
		owners := map[string]bool{}
		for _, rec := range records {
			if strings.HasPrefix(rec.Owner, r.Instance+"/") {
				owners[rec.Owner] = true
			}
		}
		for _, owner := range q.Owners() {
			owners[owner] = true
		}
		for owner := range owners {
			// Retract, not an empty Desire: these owners have or may have records here,
			// whatever the queue saw at its last listing.
			out := q.Retract(owner)
			if out.Err != nil && providers.IsPermanent(out.Err) {
				return 0, fmt.Sprintf("zone %s: %s; the annotation %s: %s leaves the records in place",
					q.Zone().Name, errorSummary(out.Err), v1.DeletionPolicyAnnotation, v1.DeletionPolicyOrphan), nil
			}
			if !out.Synced || out.Records > 0 {
				left++
			}
		}
		q.Expedite()
	}
	return left, "", nil
}

// announce reports whether what is announced about an EdgeProvider's deletion
// changed, so that each event is emitted once rather than at every requeue.
func (r *EdgeProviderReconciler) announce(edge, what string) bool {
	prev, loaded := r.announced.Swap(edge, what)
	return !loaded || prev.(string) != what
}
