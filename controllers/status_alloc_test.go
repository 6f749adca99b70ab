package controllers

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
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

// A provider error is quoted in a route's status in a bounded form, and no condition
// message passes what the API server accepts (32,768 bytes): past it, the API server
// refused the whole status. At 100,000 routes, a Route53 batch refused change by
// change (80 KB of reasons) had 32 routes' statuses refused so, in both RecordsSynced
// and Ready.
func TestAProviderErrorOfAnySizeLeavesTheStatusWritable(t *testing.T) {
	huge := errors.New(strings.Repeat("Tried to create resource record set [name='t.example.com.', type='CNAME'] but it already exisé; ", 1200))
	s := &edgeState{edge: "aws"}
	s.add("example.com", zonequeue.Outcome{Err: huge})
	s.add("other.example.com", zonequeue.Outcome{Err: huge, Failed: []providers.Failure{{Err: huge,
		Change: providers.Change{Action: providers.Create, New: &providers.Record{Name: "t.other.example.com", Type: providers.TypeCNAME}}}}})
	route := &v1.TenantRoute{Spec: v1.TenantRouteSpec{Edges: []string{"aws"}}}
	in := &routePlan{active: "aws", tenant: v1.ClaimStatus{State: v1.ClaimGranted}, edges: map[string]*v1.EdgeProvider{"aws": {}}}
	for i := range 2000 {
		in.claims = append(in.claims, v1.HostnameClaim{Hostname: fmt.Sprintf("h%04d.example.com", i),
			ClaimStatus: v1.ClaimStatus{State: v1.ClaimConflict, Message: "held by TenantRoute tenants/another-route-with-a-long-name"}})
	}
	r := &TenantRouteReconciler{}
	rec := events.NewFakeRecorder(16)
	r.updateStatus(route, in, []*edgeState{s}, rec)
	for _, c := range route.Status.Conditions {
		if len(c.Message) > 32768 || !utf8.ValidString(c.Message) {
			t.Errorf("%s: a message of %d bytes (valid UTF-8 %t)", c.Type, len(c.Message), utf8.ValidString(c.Message))
		}
		if c.Type == v1.ConditionReady && (!strings.Contains(c.Message, "zone example.com") || !strings.Contains(c.Message, "zone other.example.com")) {
			t.Errorf("Ready does not name both failing zones: %.200s", c.Message)
		}
	}
	for _, p := range route.Status.Providers {
		if len(p.Message) > 4096 {
			t.Errorf("providers[%s]: a message of %d bytes", p.Edge, len(p.Message))
		}
	}
	// The same findings again tell nothing new: a clipped message compared with the
	// whole one sent a Conflict event at every reconcile.
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	r.updateStatus(route, in, []*edgeState{s}, rec)
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, v1.ReasonConflict) {
			t.Errorf("a second reconcile with the same conflicts sent an event: %.120s", e)
		}
	}
}
