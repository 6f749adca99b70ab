package controllers

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/providers"
)

// A failover plans thousands of routes from one snapshot of the cache; a route whose
// deletion completed meanwhile must not get records again from it: nothing would
// delete them. A route created again under the same name is another object and is
// served.
func TestRetiredRoutesGetNoRecords(t *testing.T) {
	r := &TenantRouteReconciler{Accounts: newAccounts(context.Background())}
	route := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "uid-1"},
		Spec: v1.TenantRouteSpec{Edges: []string{"cf"}}}
	plan := &routePlan{edges: map[string]*v1.EdgeProvider{"cf": {}}, active: "cf",
		zones: []desired.ZoneRecords{{Edge: "cf", Zone: "example.com", Records: []providers.Record{{Name: "r.example.com", Type: "CNAME"}}}}}
	const owner = "default/ns/r"
	if states := r.declareRecords(route, owner, plan, nil); len(states) == 0 {
		t.Fatal("a live route declared nothing")
	}
	r.retire(owner, route.UID)
	if states := r.declareRecords(route, owner, plan, nil); states != nil {
		t.Errorf("a deleted route declared records from an old snapshot: %+v", states)
	}
	again := route.DeepCopy()
	again.UID = "uid-2"
	if states := r.declareRecords(again, owner, plan, nil); len(states) == 0 {
		t.Error("a route created again under the same name declared nothing")
	}
}

// A route whose records wait for an EdgeProvider not connected yet is marked awaiting
// it, whatever order its zones come in (the empty desires in the edge's other zones
// included); a route with no records for the edge is not.
func TestRecordsForAnAccountNotConnectedYetAwaitIt(t *testing.T) {
	r := &TenantRouteReconciler{Accounts: newAccounts(context.Background())}
	route := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "uid-1"},
		Spec: v1.TenantRouteSpec{Edges: []string{"cf", "aws"}}}
	record := []providers.Record{{Name: "r.example.com", Type: "CNAME"}}
	plan := &routePlan{edges: map[string]*v1.EdgeProvider{"cf": {}, "aws": {}}, active: "cf",
		zones: []desired.ZoneRecords{
			{Edge: "cf", Zone: "example.com", Records: record},
			{Edge: "cf", Zone: "example.org"}, // an empty desire after the records
			{Edge: "aws", Zone: "example.org"},
		}}
	awaiting := map[string]bool{}
	for _, s := range r.declareRecords(route, "default/ns/r", plan, nil) {
		awaiting[s.edge] = s.awaiting
	}
	if !awaiting["cf"] || awaiting["aws"] {
		t.Errorf("awaiting by edge %v, want cf (its records wait) and not aws (nothing for it)", awaiting)
	}
}
