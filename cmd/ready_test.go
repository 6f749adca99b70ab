package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// The manager's health endpoint answers from its start, but the embedded proxy and
// the lookup endpoint listen only once its caches are in (seconds, or minutes at
// 100,000 routes): readiness waits for them, or a rollout sends clients to ports
// nothing listens on. It fails again as soon as the proxy drains.
func TestReadinessWaitsForTheListeners(t *testing.T) {
	p := proxy.New(proxy.NewChain(proxy.ChainOptions{}, routes.HTTPSource{BaseURL: "http://127.0.0.1:1"}), proxy.Options{})
	lookup := httpServer("127.0.0.1:0", http.NotFoundHandler())
	if p.Ready() == nil || lookup.ready(nil) == nil {
		t.Fatalf("ready before listening: proxy %v, lookup %v", p.Ready(), lookup.ready(nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = (&proxy.Server{Proxy: p, Listen: "127.0.0.1:0"}).Start(ctx) }()
	go func() { _ = lookup.Start(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for p.Ready() != nil || lookup.ready(nil) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not ready once listening: proxy %v, lookup %v", p.Ready(), lookup.ready(nil))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	for p.Ready() == nil {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("still ready while draining")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The side servers (lookup, metrics, probes) close idle connections and bound a
// request's time and header: net/http's defaults keep an idle connection for good,
// each a descriptor of a process that faces the internet.
func TestSideServersAreBounded(t *testing.T) {
	srv := httpServer(":0", http.NotFoundHandler()).srv
	if srv.IdleTimeout <= 0 || srv.ReadTimeout <= 0 || srv.WriteTimeout <= 0 || srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 64<<10 {
		t.Errorf("idle %s, read %s, write %s, header %d bytes", srv.IdleTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.MaxHeaderBytes)
	}
}
