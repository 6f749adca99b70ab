package controllers

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/clip"
	"github.com/tenantroute/tenantroute-operator/providers"
)

type statusReport struct {
	outcome  string
	result   ctrl.Result
	rejected error
}

// maxConditionMessage is the longest condition message the API server accepts; past it
// it refuses the whole status. The Conflict message of a route with many hostnames,
// each naming its holder, can pass it, as could provider errors before maxQuoted.
const maxConditionMessage = 32768

// updateStatus writes what the reconcile found into the route's status and records
// the events of its transitions in rec (sent once the status is written).
func (r *TenantRouteReconciler) updateStatus(route *v1.TenantRoute, in *routePlan, states []*edgeState, rec events.EventRecorder) statusReport {
	previous := map[string]v1.ProviderRecordStatus{}
	for _, p := range route.Status.Providers {
		previous[p.Edge] = p
	}
	r.reportActiveEdge(route, in, rec)

	var providersStatus []v1.ProviderRecordStatus
	var failing, pending, conflicts, rejected []string
	for _, s := range states {
		state, message := s.state()
		if s.removing && state == v1.RecordsSynced && s.records == 0 {
			continue // its records are gone: it drops out of status
		}
		st := v1.ProviderRecordStatus{Edge: s.edge, State: state, Records: int32(s.records),
			Message: clip.String(message, maxConditionMessage)}
		providersStatus = append(providersStatus, st)
		was := previous[s.edge]
		switch state {
		case v1.RecordsError:
			failing = append(failing, fmt.Sprintf("%s: %s", s.edge, message))
			if was.State != v1.RecordsError {
				rec.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonProviderError, "ApplyRecords", "%s: %s", s.edge, message)
			}
		case v1.RecordsPending:
			pending = append(pending, s.edge)
		default:
			if was.State == v1.RecordsError {
				rec.Eventf(route, nil, corev1.EventTypeNormal, v1.ReasonProviderRecovered, "ApplyRecords", "%s: records in sync again", s.edge)
			}
		}
		conflicts = append(conflicts, s.conflicts...)
		// A refusal is an error of the reconcile that finds it; the same one found
		// again, at each of the route's checks, is its status alone.
		if was.State != st.State || was.Message != st.Message {
			rejected = append(rejected, s.rejected...)
		}
	}
	route.Status.Providers = providersStatus
	route.Status.TenantID = &in.tenant
	route.Status.Hostnames = in.claims
	var lost, unproven []string
	forbidden := false
	for _, c := range in.claims {
		switch c.State {
		case v1.ClaimForbidden:
			forbidden = true
			lost = append(lost, fmt.Sprintf("%s: %s", c.Hostname, c.Message))
		case v1.ClaimConflict:
			lost = append(lost, fmt.Sprintf("%s: %s", c.Hostname, c.Message))
		case v1.ClaimPendingVerification:
			unproven = append(unproven, c.Hostname)
		}
	}
	r.reportCustomDomains(route, in.custom, unproven, rec)
	if in.tenant.State != v1.ClaimGranted {
		lost = []string{in.tenant.Message + ": no hostname is granted"}
	}
	conflicts = append(lost, conflicts...)

	gen := route.Generation
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: clip.String(message, maxConditionMessage), ObservedGeneration: gen})
	}

	oldConflict := previousCondition(route.Status.Conditions, v1.ConditionConflict)
	if len(conflicts) > 0 {
		message := clip.String(strings.Join(conflicts, "; "), maxConditionMessage) // as stored, for the comparison below
		set(v1.ConditionConflict, metav1.ConditionTrue, v1.ReasonConflict, message)
		if oldConflict == nil || oldConflict.Status != metav1.ConditionTrue || oldConflict.Message != message {
			rec.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonConflict, "ClaimHostname", "%s", message)
		}
	} else {
		set(v1.ConditionConflict, metav1.ConditionFalse, v1.ReasonNoConflict, "the tenantID and every hostname are granted to this TenantRoute")
	}

	switch {
	case len(failing) > 0:
		set(v1.ConditionRecordsSynced, metav1.ConditionFalse, v1.ReasonProviderError, strings.Join(failing, "; "))
	case len(pending) > 0:
		set(v1.ConditionRecordsSynced, metav1.ConditionFalse, v1.ReasonPending, "applying records in "+strings.Join(pending, ", "))
	default:
		set(v1.ConditionRecordsSynced, metav1.ConditionTrue, v1.ReasonSynced, "records are in place in every provider")
	}

	report := statusReport{outcome: "ready"}
	oldReady := previousCondition(route.Status.Conditions, v1.ConditionReady)
	switch {
	case len(failing) > 0:
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonProviderError, "records are failing in "+strings.Join(failing, "; "))
		report.outcome, report.result = "provider_error", ctrl.Result{RequeueAfter: requeueSafety}
	case in.active == "":
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonNoEdge, "none of spec.edges names an existing EdgeProvider")
		report.outcome = "provider_error"
	case in.regionErr != nil:
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonRegionNotFound, in.regionErr.Error())
		report.outcome = "provider_error"
	case len(pending) > 0:
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonPending, "applying records in "+strings.Join(pending, ", "))
		report.outcome, report.result = "pending", ctrl.Result{RequeueAfter: requeueSafety}
	case forbidden:
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonForbidden, "some hostnames may not be claimed from this namespace: see the Conflict condition")
		report.outcome = "conflict"
	case len(conflicts) > 0:
		set(v1.ConditionReady, metav1.ConditionFalse, v1.ReasonConflict, "some hostnames are held by others: see the Conflict condition")
		report.outcome = "conflict"
	default:
		set(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonReady, fmt.Sprintf("records point at %s in every provider", in.active))
		if oldReady == nil || oldReady.Status != metav1.ConditionTrue {
			rec.Eventf(route, nil, corev1.EventTypeNormal, v1.ReasonReady, "ApplyRecords", "records point at %s in every provider", in.active)
		}
	}
	if len(rejected) > 0 {
		report.rejected = reconcile.TerminalError(fmt.Errorf("%w: %s", errRejected, strings.Join(rejected, "; ")))
	}
	// Custom domains are checked again every interval: a proof that appears is seen,
	// one that goes is noticed.
	if len(in.custom) > 0 && r.Verifier != nil && (report.result.RequeueAfter == 0 || r.Verifier.Interval < report.result.RequeueAfter) {
		report.result.RequeueAfter = r.Verifier.Interval
	}
	return report
}

// reportCustomDomains records the custom domains' proofs, with a condition, and an
// event when a domain is verified or loses its proof.
func (r *TenantRouteReconciler) reportCustomDomains(route *v1.TenantRoute, custom []v1.CustomDomainStatus, unproven []string, rec events.EventRecorder) {
	before := map[string]v1.CustomDomainStatus{}
	for _, c := range route.Status.CustomDomains {
		before[c.Hostname] = c
	}
	for _, c := range custom {
		old, seen := before[c.Hostname]
		switch {
		case c.Message == "" && c.VerifiedAt != nil && (!seen || old.VerifiedAt == nil):
			rec.Eventf(route, nil, corev1.EventTypeNormal, v1.ReasonDomainVerified, "VerifyDomain",
				"%s: proof of control found; the domain is routed", c.Hostname)
		case proofLost(c) && seen && !proofLost(old):
			rec.Eventf(route, nil, corev1.EventTypeWarning, v1.ReasonDomainUnverified, "VerifyDomain",
				"%s lost its proof of control: %s", c.Hostname, c.Message)
		}
	}
	route.Status.CustomDomains = custom
	gen := route.Generation
	switch {
	case len(custom) == 0:
		// RemoveStatusCondition copies the conditions even when the type is absent, as it
		// is on nearly every route: a slice per reconcile, 5% of a failover's allocation.
		if meta.FindStatusCondition(route.Status.Conditions, v1.ConditionCustomDomainsVerified) != nil {
			meta.RemoveStatusCondition(&route.Status.Conditions, v1.ConditionCustomDomainsVerified)
		}
	case len(unproven) > 0:
		meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{Type: v1.ConditionCustomDomainsVerified,
			Status: metav1.ConditionFalse, Reason: v1.ReasonDomainPending, ObservedGeneration: gen,
			Message: "not routed until their owner proves control (see status.customDomains): " + strings.Join(unproven, ", ")})
	default:
		meta.SetStatusCondition(&route.Status.Conditions, metav1.Condition{Type: v1.ConditionCustomDomainsVerified,
			Status: metav1.ConditionTrue, Reason: v1.ReasonVerified, ObservedGeneration: gen,
			Message: "every custom domain's owner proved control"})
	}
}

var errRejected = fmt.Errorf("the provider rejected records")

func countActions(changes []providers.Change) (created, updated, deleted int) {
	for _, c := range changes {
		switch c.Action {
		case providers.Create:
			created++
		case providers.Update:
			updated++
		case providers.Delete:
			deleted++
		}
	}
	return
}

// previousCondition copies a condition before meta.SetStatusCondition changes it in
// place, so that a transition can be told from no change.
func previousCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		prev := *c
		return &prev
	}
	return nil
}

// eventBuffer holds the events of one reconcile until its status is written.
type eventBuffer struct {
	events []func(events.EventRecorder)
}

// Eventf implements events.EventRecorder.
func (b *eventBuffer) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	b.events = append(b.events, func(rec events.EventRecorder) {
		rec.Eventf(regarding, related, eventtype, reason, action, note, args...)
	})
}

func (b *eventBuffer) pending() bool { return len(b.events) > 0 }

func (b *eventBuffer) send(rec events.EventRecorder) {
	for _, e := range b.events {
		e(rec)
	}
	b.events = nil
}
