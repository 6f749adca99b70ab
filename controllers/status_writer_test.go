package controllers

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// The status patch is the one controller-runtime's MergeFrom makes of the same change,
// removals (null) and the optimistic lock included: the writer only computes it from
// less.
func TestStatusPatchIsMergeFroms(t *testing.T) {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	full := func() *v1.TenantRoute {
		tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: "tenants", ResourceVersion: "42", Generation: 3},
			Spec: v1.TenantRouteSpec{TenantID: "acme", Region: "eu", Hostnames: []string{"acme.example.com"}, Edges: []string{"cf", "aws"}}}
		tr.Status = v1.TenantRouteStatus{ObservedGeneration: 2, ActiveEdge: "cf", LastFailoverTime: &now,
			Providers:     []v1.ProviderRecordStatus{{Edge: "cf", State: v1.RecordsSynced, Records: 1}, {Edge: "aws", State: v1.RecordsPending, Records: 0, Message: "applying"}},
			Conditions:    []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonPending, Message: "applying records in aws", LastTransitionTime: now, ObservedGeneration: 2}},
			CustomDomains: []v1.CustomDomainStatus{{Hostname: "login.acme.com", CNAMETarget: "acme.example.com"}},
			TenantID:      &v1.ClaimStatus{State: v1.ClaimConflict, Since: now, Message: "held by tenants/other"},
			Hostnames:     []v1.HostnameClaim{{Hostname: "acme.example.com", ClaimStatus: v1.ClaimStatus{State: v1.ClaimGranted, Since: now}}}}
		return tr
	}
	changes := map[string]func(*v1.TenantRoute){
		"nothing": func(*v1.TenantRoute) {},
		"ready": func(tr *v1.TenantRoute) {
			tr.Status.ObservedGeneration = 3
			tr.Status.Providers[1] = v1.ProviderRecordStatus{Edge: "aws", State: v1.RecordsSynced, Records: 1}
			tr.Status.Conditions[0] = metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1.ReasonReady, Message: "records point at cf", LastTransitionTime: now, ObservedGeneration: 3}
		},
		"fields removed": func(tr *v1.TenantRoute) {
			tr.Status.LastFailoverTime = nil
			tr.Status.CustomDomains = nil
			tr.Status.Providers[1].Message = ""
		},
		"an object's field removed": func(tr *v1.TenantRoute) {
			tr.Status.TenantID.State, tr.Status.TenantID.Message = v1.ClaimGranted, ""
		},
		"an object removed, a generation gone": func(tr *v1.TenantRoute) {
			tr.Status.TenantID, tr.Status.ObservedGeneration, tr.Status.Hostnames = nil, 0, []v1.HostnameClaim{}
		},
		"fields added": func(tr *v1.TenantRoute) {
			tr.Status.Certificates = []v1.HostnameCertificate{{Hostname: "acme.example.com"}}
			tr.Status.Hostnames = append(tr.Status.Hostnames, v1.HostnameClaim{Hostname: "b.example.com"})
		},
		"failover": func(tr *v1.TenantRoute) {
			tr.Status.ActiveEdge = "aws"
			tr.Status.Conditions = append(tr.Status.Conditions, metav1.Condition{Type: v1.ConditionFailedOver, Status: metav1.ConditionTrue, Reason: v1.ReasonFailedOver, LastTransitionTime: now})
		},
	}
	for name, change := range changes {
		for _, lock := range []bool{false, true} {
			before, after := full(), full()
			change(after)
			var opts []client.MergeFromOption
			if lock {
				opts = append(opts, client.MergeFromWithOptimisticLock{})
			}
			want, err := client.MergeFromWithOptions(before, opts...).Data(after)
			if err != nil {
				t.Fatal(err)
			}
			got, err := statusPatch(before, after, lock)
			if err != nil {
				t.Fatal(err)
			}
			var w, g map[string]any
			if err := json.Unmarshal(want, &w); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatal(err)
			}
			if _, ok := w["status"]; !ok {
				w["status"] = map[string]any{} // MergeFrom leaves an unchanged status out
			}
			if !reflect.DeepEqual(w, g) {
				t.Errorf("%s (lock %t): patch\n  %s\nwant what MergeFrom sends\n  %s", name, lock, got, want)
			}
		}
	}
}

// statusPatch reads a field's emptiness as omitempty does for the kinds of field the
// status has today; a struct value, an inline or untagged field would need more.
func TestStatusFieldsAreWhatStatusPatchHandles(t *testing.T) {
	typ := reflect.TypeFor[v1.TenantRouteStatus]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, options, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "" || name == "-" || !f.IsExported():
			t.Errorf("%s: json tag %q; statusPatch needs a named field", f.Name, f.Tag.Get("json"))
		case !slices.Contains([]reflect.Kind{reflect.Int64, reflect.String, reflect.Pointer, reflect.Slice}, f.Type.Kind()):
			t.Errorf("%s is a %s; statusPatch handles numbers, strings, pointers and slices", f.Name, f.Type.Kind())
		case !strings.Contains(options, "omitempty"):
			t.Logf("%s is not omitempty: sent even when empty, as MergeFrom would", f.Name)
		}
	}
}
