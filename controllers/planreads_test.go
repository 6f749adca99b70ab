package controllers

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// A pass over many routes (a failover's) reads each EdgeProvider and Region once, and
// gives each route what a reconcile would read for it: the existing EdgeProviders among
// those it lists now or listed before, and its Region's error.
func TestPlanReadsReadEachObjectOncePerPass(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gets := map[string]int{}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		&v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: "cf"}},
		&v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: "aws"}},
		&v1.Region{ObjectMeta: metav1.ObjectMeta{Name: "eu"}},
	).WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		gets[fmt.Sprintf("%T %s", obj, key.Name)]++
		return c.Get(ctx, key, obj, opts...)
	}}).Build()
	r := &TenantRouteReconciler{Client: c}
	route := func(region string, edges []string, before ...string) *v1.TenantRoute {
		tr := &v1.TenantRoute{Spec: v1.TenantRouteSpec{Region: region, Edges: edges}}
		for _, e := range before {
			tr.Status.Providers = append(tr.Status.Providers, v1.ProviderRecordStatus{Edge: e})
		}
		return tr
	}
	routes := []*v1.TenantRoute{
		route("eu", []string{"cf", "aws"}),
		route("eu", []string{"aws"}, "cf"),  // moved off cf: its records there still count
		route("eu", []string{"aws", "cf"}),  // the same set in another order
		route("us", []string{"cf", "gone"}), // a missing Region and EdgeProvider
	}
	ctx := context.Background()
	reads := newPlanReads()
	for range 1000 {
		for _, tr := range routes {
			got, err := reads.edgeProviders(ctx, r, tr)
			if err != nil {
				t.Fatal(err)
			}
			want, err := r.edgeProviders(ctx, tr)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%v (before %v): %d EdgeProviders in the pass, %d read directly", tr.Spec.Edges, tr.Status.Providers, len(got), len(want))
			}
			for name := range want {
				if got[name] == nil {
					t.Fatalf("%v: EdgeProvider %s missing from the pass", tr.Spec.Edges, name)
				}
			}
			if gotErr, wantErr := reads.checkRegion(ctx, r, tr), r.checkRegion(ctx, tr); fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("region %s: %v in the pass, %v read directly", tr.Spec.Region, gotErr, wantErr)
			}
		}
	}
	// The direct reads above are 1000 per route; the pass's own are what is over that.
	for obj, n := range gets {
		direct := 0
		switch obj {
		case "*v1alpha1.EdgeProvider cf":
			direct = 4000 // every route lists or listed cf
		case "*v1alpha1.EdgeProvider aws":
			direct = 3000
		case "*v1alpha1.EdgeProvider gone", "*v1alpha1.Region us":
			direct = 1000
		case "*v1alpha1.Region eu":
			direct = 3000
		}
		// cf and aws: once per distinct edge list (3 lists with aws, 4 with cf); the
		// missing Region is read again each time, as a reconcile would.
		passReads := n - direct
		limit := map[string]int{"*v1alpha1.EdgeProvider cf": 4, "*v1alpha1.EdgeProvider aws": 3,
			"*v1alpha1.EdgeProvider gone": 1, "*v1alpha1.Region eu": 1, "*v1alpha1.Region us": 1000}[obj]
		if passReads > limit {
			t.Errorf("%s: read %d times in the pass, want at most %d", obj, passReads, limit)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = reads.edgeProviders(ctx, r, routes[0]) }); n != 0 {
		t.Errorf("a route's EdgeProviders, already read in the pass, cost %v allocations", n)
	}
}
