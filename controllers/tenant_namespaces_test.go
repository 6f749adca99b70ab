package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// A tenantID is first come, first served across the cluster: without a reservation
// any namespace may create a TenantRoute with a tenantID nobody holds yet, and the
// proxy would send its traffic to the region's backends as that tenant. The policy in
// config/policy reserves tenantIDs for the namespace whose annotation lists them: a
// TenantRoute of another namespace is refused them at creation, without learning
// which namespace holds them; the reserving namespace, and other tenantIDs, are
// admitted.
func TestAReservedTenantIDIsRefusedToOtherNamespaces(t *testing.T) {
	ctx := context.Background()
	if err := testenv.Apply(ctx, k8s, "config/policy/tenant_namespaces.yaml"); err != nil {
		t.Fatal(err)
	}
	owner, intruder := "reserve-owner", "reserve-intruder"
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: owner, Labels: map[string]string{"routing.tenantroute.io/reserves-tenant-ids": "true"},
			Annotations: map[string]string{"routing.tenantroute.io/tenant-ids": "bigbank, BigBank-EU"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: intruder}},
	} {
		if err := k8s.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, ns) })
	}
	route := func(ns, tenant string) *v1.TenantRoute {
		return &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "r-" + tenant, Namespace: ns},
			Spec: v1.TenantRouteSpec{TenantID: tenant, Region: "eu", Hostnames: []string{tenant + ".auth.example.com"}, Edges: []string{"cf"}, TTL: 60}}
	}
	const want = "spec.tenantID: bigbank-eu is reserved for another namespace"
	// The API server loads a new policy within a second or so.
	eventually(t, 20*time.Second, func() error {
		err := k8s.Create(ctx, route(intruder, "bigbank-eu"), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("admission of a reserved tenantID from another namespace: %v", err)
		}
		return nil
	})
	if err := k8s.Create(ctx, route(intruder, "bigbank-eu"), client.DryRunAll); err == nil || strings.Contains(err.Error(), owner) {
		t.Errorf("the refusal names the reserving namespace: %v", err)
	}
	for _, ok := range []*v1.TenantRoute{route(owner, "bigbank"), route(owner, "bigbank-eu"), route(intruder, "smallshop")} {
		if err := k8s.Create(ctx, ok, client.DryRunAll); err != nil {
			t.Errorf("tenantID %s in namespace %s: %v, want admitted", ok.Spec.TenantID, ok.Namespace, err)
		}
	}
}
