package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// A route without custom domains, nearly every route, keeps its conditions as they
// are: no copy of them per reconcile, and a CustomDomainsVerified left from an earlier
// spec still goes.
func TestNoCustomDomainsKeepsTheConditions(t *testing.T) {
	r := &TenantRouteReconciler{}
	tr := &v1.TenantRoute{}
	tr.Status.Conditions = []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionTrue}, {Type: v1.ConditionRecordsSynced, Status: metav1.ConditionTrue}}
	first := &tr.Status.Conditions[0]
	if n := testing.AllocsPerRun(100, func() { r.reportCustomDomains(tr, nil, nil, nil) }); n != 0 {
		t.Errorf("%v allocations for a route without custom domains", n)
	}
	if &tr.Status.Conditions[0] != first || len(tr.Status.Conditions) != 2 {
		t.Errorf("conditions replaced: %v", tr.Status.Conditions)
	}
	tr.Status.Conditions = append(tr.Status.Conditions, metav1.Condition{Type: v1.ConditionCustomDomainsVerified, Status: metav1.ConditionTrue})
	r.reportCustomDomains(tr, nil, nil, nil)
	if len(tr.Status.Conditions) != 2 || tr.Status.Conditions[1].Type != v1.ConditionRecordsSynced {
		t.Errorf("CustomDomainsVerified not removed: %v", tr.Status.Conditions)
	}
}
