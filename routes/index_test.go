package routes_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// The index finds routes across namespaces through controller-runtime's List, in a
// cache of all namespaces (the manager's) and in one of several namespaces (the
// tests'), and keeps one key per value. A hashed index finds the same, and never a
// route whose value only shares the bucket.
func TestIndexFindsRoutesAcrossNamespacesWithOneKeyPerValue(t *testing.T) {
	env, cfg, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx := context.Background()
	k8s, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	newRoute := func(ns, name string, hostnames ...string) *v1.TenantRoute {
		tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1.TenantRouteSpec{TenantID: ns + "-" + name, Region: "eu", Hostnames: hostnames, Edges: []string{"cf"}}}
		if err := k8s.Create(ctx, tr); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	shop := newRoute("team-a", "shop", "shop.example.com", "www.example.com")
	rival := newRoute("team-b", "rival", "shop.example.com")
	// twin's hostname falls in www.example.com's bucket of a hashed index.
	twinHost := ""
	for i := 0; twinHost == ""; i++ {
		if h := fmt.Sprintf("h%d.example.com", i); routes.HashedKey(h) == routes.HashedKey("www.example.com") {
			twinHost = h
		}
	}
	newRoute("team-b", "twin", twinHost)

	type newIndex func(context.Context, cache.Cache, string, func(*v1.TenantRoute) []string) (*routes.Index, error)
	for name, tc := range map[string]struct {
		opts     cache.Options
		newIndex newIndex
	}{
		"all namespaces":         {cache.Options{}, routes.NewIndex},
		"two namespaces":         {cache.Options{DefaultNamespaces: map[string]cache.Config{"team-a": {}, "team-b": {}}}, routes.NewIndex},
		"hashed, all namespaces": {cache.Options{}, routes.NewHashedIndex},
		"hashed, two namespaces": {cache.Options{DefaultNamespaces: map[string]cache.Config{"team-a": {}, "team-b": {}}}, routes.NewHashedIndex},
	} {
		t.Run(name, func(t *testing.T) {
			opts := tc.opts
			opts.Scheme = testenv.Scheme()
			c, err := cache.New(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			byHost, err := tc.newIndex(ctx, c, "spec.hostnames", func(tr *v1.TenantRoute) []string { return tr.Spec.Hostnames })
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() { _ = c.Start(cctx) }()
			if !c.WaitForCacheSync(cctx) {
				t.Fatal("the cache did not sync")
			}
			keys := func(host string) []string {
				t.Helper()
				ks, err := byHost.Keys(ctx, host)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, k := range ks {
					out = append(out, k.String())
				}
				slices.Sort(out)
				return out
			}
			if got := keys("shop.example.com"); !slices.Equal(got, []string{"team-a/shop", "team-b/rival"}) {
				t.Errorf("routes listing shop.example.com, across namespaces: %v", got)
			}
			if got, err := byHost.Routes(ctx, "www.example.com"); err != nil || len(got) != 1 || got[0].Name != "shop" {
				t.Errorf("Routes(www.example.com) = %v, %v", got, err)
			}
			if got := keys(twinHost); !slices.Equal(got, []string{"team-b/twin"}) {
				t.Errorf("routes listing %s: %v", twinHost, got)
			}
			if got := keys("nobody.example.com"); len(got) != 0 {
				t.Errorf("a hostname nobody lists: %v", got)
			}
			// One key per value: no namespaced duplicate beside it. The namespaced
			// lookups of controller-runtime's own field indexes find nothing.
			var inNS v1.TenantRouteList
			if err := c.List(ctx, &inNS, client.InNamespace("team-a"), client.MatchingFields{"spec.hostnames": "www.example.com"}); err != nil || len(inNS.Items) != 0 {
				t.Errorf("a namespaced lookup found %d routes (%v): the index keeps namespaced keys", len(inNS.Items), err)
			}
		})
	}

	// Changes follow: a hostname dropped, a route deleted.
	c, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	byHost, err := routes.NewIndex(ctx, c, "spec.hostnames", func(tr *v1.TenantRoute) []string { return tr.Spec.Hostnames })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := routes.NewIndex(ctx, c, "spec.hostnames", func(tr *v1.TenantRoute) []string { return nil }); err == nil {
		t.Error("a second index of the same name was taken silently")
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = c.Start(cctx) }()
	c.WaitForCacheSync(cctx)
	shop.Spec.Hostnames = []string{"www.example.com"}
	if err := k8s.Update(ctx, shop); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, rival); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ks, err := byHost.Keys(ctx, "shop.example.com")
		if err != nil {
			t.Fatal(err)
		}
		if len(ks) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("shop.example.com still indexed for %v after the change", ks)
		}
	}
}
