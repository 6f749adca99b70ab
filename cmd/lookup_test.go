package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// holder is a source of truth whose answer for every host is one tenant's route.
type holder struct{ tenant atomic.Value }

func (*holder) Name() string { return "source" }

func (h *holder) Lookup(context.Context, string) (routes.Route, error) {
	return routes.Route{Tenant: h.tenant.Load().(string), Region: "eu"}, nil
}

// TestAHandedOverHostnameIsNotReadBackFromRedis: a hostname moves from one tenant to
// another while Redis still holds the former tenant's route (routekv writes the new
// one a moment later). The embedded proxy drops the hostname from its cache when the
// grant changes; its next lookup must get the new tenant, not the Redis entry, which
// it would otherwise cache for a whole TTL. A standalone proxy does read Redis first:
// that is what spares the manager's lookup endpoint, and its documented bound on a
// hand-over is its cache TTL.
func TestAHandedOverHostnameIsNotReadBackFromRedis(t *testing.T) {
	srv := testenv.StartRedis(t)
	client, err := routes.NewRedisClient(routes.RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	kv := &routes.KV{Client: client, Key: []byte("test-hmac-key-0123456789abcdef0123456789"), TTL: time.Minute}
	const host = "shop.example.com"
	ctx := context.Background()
	if err := kv.Put(ctx, map[string]routes.Route{host: {Tenant: "former", Region: "eu"}}); err != nil {
		t.Fatal(err)
	}

	source := &holder{}
	source.tenant.Store("former")
	embedded := proxy.NewChain(proxy.ChainOptions{}, lookupLayers(source, kv, true)...)
	if got := tenantOf(embedded.Lookup(ctx, []byte(host))); got != "former" {
		t.Fatalf("before the hand-over the embedded proxy routes %s to %q", host, got)
	}
	source.tenant.Store("new") // the grant moved; Redis still says "former"
	embedded.Invalidate(host)
	if got := tenantOf(embedded.Lookup(ctx, []byte(host))); got != "new" {
		t.Errorf("after the hand-over the embedded proxy routes %s to %q, want the new tenant", host, got)
	}

	standalone := proxy.NewChain(proxy.ChainOptions{}, lookupLayers(source, kv, false)...)
	if got := tenantOf(standalone.Lookup(ctx, []byte(host))); got != "former" {
		t.Errorf("a standalone proxy answered %q: it should have read Redis before the lookup endpoint", got)
	}
}

func tenantOf(r *proxy.CachedRoute, _ proxy.Outcome) string {
	if r == nil {
		return "(none)"
	}
	return r.Tenant
}
