package controllers

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// decodedRoute is a TenantRoute as the informer gets it: decoded from JSON, so that
// every string is its own copy and slices have the decoder's spare capacity.
func decodedRoute(t *testing.T, i int) *v1.TenantRoute {
	t.Helper()
	tr := &v1.TenantRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: fmt.Sprintf("t%d", i), Finalizers: []string{v1.Finalizer},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}},
		Spec: v1.TenantRouteSpec{TenantID: fmt.Sprintf("t%d", i), Region: "eu", Edges: []string{"cloudflare", "aws"},
			Hostnames: []string{fmt.Sprintf("t%d.example.com", i)}},
		Status: v1.TenantRouteStatus{ActiveEdge: "cloudflare",
			Providers: []v1.ProviderRecordStatus{{Edge: "cloudflare", State: v1.RecordsSynced, Records: 1}, {Edge: "aws", State: v1.RecordsSynced, Records: 1}},
			Hostnames: []v1.HostnameClaim{{Hostname: fmt.Sprintf("t%d.example.com", i), ClaimStatus: v1.ClaimStatus{State: v1.ClaimGranted}}},
			TenantID:  &v1.ClaimStatus{State: v1.ClaimGranted},
		},
	}
	for _, typ := range []string{"Ready", "RecordsSynced", "EdgeHealthy", "FailedOver", "Conflict"} {
		tr.Status.Conditions = append(tr.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue,
			Reason: "Ready", Message: "records point at cloudflare in every provider"})
	}
	b, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	out := &v1.TenantRoute{}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCompactRoutesSharesRepeatedStringsAndKeepsTheRoute(t *testing.T) {
	a, b := decodedRoute(t, 1), decodedRoute(t, 2)
	if cap(a.Status.Conditions) == len(a.Status.Conditions) {
		t.Fatal("the decoder left no spare capacity: the test does not test trimming")
	}
	wantA := a.DeepCopy()
	wantA.ManagedFields = nil
	for _, tr := range []*v1.TenantRoute{a, b} {
		if _, err := CompactRoutes(tr); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(a, wantA) {
		t.Errorf("the compacted route reads differently:\n%+v\nwant\n%+v", a, wantA)
	}
	same := func(what, x, y string) {
		t.Helper()
		if unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: two copies of %q", what, x)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("finalizer", a.Finalizers[0], b.Finalizers[0])
	same("region", a.Spec.Region, b.Spec.Region)
	same("edge", a.Spec.Edges[1], b.Spec.Edges[1])
	same("active edge", a.Status.ActiveEdge, b.Status.ActiveEdge)
	same("active edge and a provider's edge", a.Status.ActiveEdge, b.Status.Providers[0].Edge)
	same("record state", string(a.Status.Providers[1].State), string(b.Status.Providers[1].State))
	same("claim state", string(a.Status.Hostnames[0].State), string(b.Status.TenantID.State))
	same("condition type", a.Status.Conditions[3].Type, b.Status.Conditions[3].Type)
	same("condition reason", a.Status.Conditions[0].Reason, b.Status.Conditions[4].Reason)
	same("condition message", a.Status.Conditions[0].Message, b.Status.Conditions[0].Message)
	if unsafe.StringData(a.Spec.Hostnames[0]) == unsafe.StringData(b.Spec.Hostnames[0]) {
		t.Error("two different hostnames share memory")
	}
	if c := a.Status.Conditions; cap(c) != len(c) {
		t.Errorf("conditions: %d of room for %d", len(c), cap(c))
	}
}

func TestInternerStartsOverWhenFull(t *testing.T) {
	in := interner{m: map[string]string{}}
	for i := range internMaxEntries + 10 {
		in.get(fmt.Sprintf("request id %d", i))
	}
	if n := len(in.m); n > internMaxEntries {
		t.Fatalf("%d entries, above the bound of %d", n, internMaxEntries)
	}
	x, y := string([]byte("Ready")), string([]byte("Ready"))
	if unsafe.StringData(in.get(x)) != unsafe.StringData(in.get(y)) {
		t.Error("a full table stopped sharing strings")
	}
	long := string(make([]byte, internMaxLen+1))
	in.get(long)
	if _, kept := in.m[long]; kept {
		t.Error("a string past the length bound was kept")
	}
}

// kubectl apply's copy of the applied object is not kept in the cache; the route's
// other annotations are.
func TestCompactRoutesDropsKubectlsLastApplied(t *testing.T) {
	tr := decodedRoute(t, 1)
	tr.Annotations = map[string]string{lastApplied: `{"apiVersion":"routing.tenantroute.io/v1alpha1","kind":"TenantRoute"}`,
		v1.DeletionPolicyAnnotation: v1.DeletionPolicyOrphan}
	if _, err := CompactRoutes(tr); err != nil {
		t.Fatal(err)
	}
	if _, kept := tr.Annotations[lastApplied]; kept || tr.Annotations[v1.DeletionPolicyAnnotation] != v1.DeletionPolicyOrphan {
		t.Errorf("annotations after compaction: %v", tr.Annotations)
	}
	only := decodedRoute(t, 2)
	only.Annotations = map[string]string{lastApplied: "{}"}
	if _, err := CompactRoutes(only); err != nil {
		t.Fatal(err)
	}
	if only.Annotations != nil {
		t.Errorf("an empty annotation map is kept: %v", only.Annotations)
	}
}
