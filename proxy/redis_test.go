package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// TestRedisOutageUnderLoad: with routes held in memory for only 50 ms, lookups go to
// Redis all the time; Redis is killed and restarted under load, and no request fails
// or reaches the wrong region.
func TestRedisOutageUnderLoad(t *testing.T) {
	redisSrv := testenv.StartRedis(t)
	eu, _ := backend(t, "eu-west")
	us, _ := backend(t, "us-east")
	table := map[string]Route{}
	for i := range 20 {
		r := Route{Tenant: fmt.Sprintf("t%d", i), Region: "eu-west", Backends: []string{eu.URL}}
		if i%2 == 1 {
			r.Region, r.Backends = "us-east", []string{us.URL}
		}
		table[fmt.Sprintf("t%d.auth.example.com", i)] = r
	}
	rc, err := routes.NewRedisClient(routes.RedisOptions{Addrs: []string{redisSrv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	kv := routes.KV{Client: rc, Key: testKey}
	if err := kv.Put(context.Background(), table); err != nil {
		t.Fatal(err)
	}
	lookup := httptest.NewServer(routes.LookupHandler(&fakeLayer{name: "source", routes: table}, testToken, routes.Normalize))
	defer lookup.Close()

	chain := NewChain(ChainOptions{TTL: 50 * time.Millisecond, BreakerCooldown: 500 * time.Millisecond, Observe: ObserveLayer},
		kv, routes.HTTPSource{BaseURL: lookup.URL, Token: testToken})
	p := New(chain, Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.newServer()
	go func() { _ = srv.Serve(p.Listener(ln)) }()
	defer func() { _ = srv.Shutdown() }()

	var ok, failed, misrouted atomic.Int64
	var firstFailure atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for w := range 16 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				host := fmt.Sprintf("t%d.auth.example.com", i%20)
				req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
				req.Host = host
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, fmt.Sprintf("%s: %v %v", host, err, resp))
					if resp != nil {
						resp.Body.Close()
					}
					continue
				}
				resp.Body.Close()
				if resp.Header.Get("X-Backend") != table[host].Region {
					misrouted.Add(1)
				}
				ok.Add(1)
			}
		})
	}
	redisHits := func() float64 { return testutil.ToFloat64(lookups.WithLabelValues("redis", "hit")) }
	time.Sleep(time.Second)
	before := redisHits()
	redisSrv.Kill()
	time.Sleep(2 * time.Second)
	redisSrv.Start()
	if err := kv.Put(context.Background(), table); err != nil { // a new Redis is empty
		t.Fatal(err)
	}
	afterRestart := redisHits()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	t.Logf("%d requests, %d failed, %d misrouted; redis hits %.0f before the kill, %.0f after the restart",
		ok.Load()+failed.Load(), failed.Load(), misrouted.Load(), before, redisHits()-afterRestart)
	if failed.Load() != 0 {
		t.Errorf("%d requests failed while Redis was down, e.g. %v", failed.Load(), firstFailure.Load())
	}
	if misrouted.Load() != 0 {
		t.Errorf("%d requests reached another region", misrouted.Load())
	}
	if ok.Load() < 1000 {
		t.Errorf("only %d requests: the load was not sustained", ok.Load())
	}
	if before == 0 || redisHits() == afterRestart {
		t.Errorf("Redis was not used before the kill (%.0f hits) or after the restart", before)
	}
}

var (
	testKey   = []byte("test-hmac-key-0123456789abcdef0123456789")
	testToken = []byte("test-lookup-token-0123456789")
)

// An entry in Redis that the operator did not write (plain JSON, signed with another
// key, or moved from another host) is ignored and counted: the request still reaches
// the right tenant, through the source of truth.
func TestForgedRedisEntriesAreIgnored(t *testing.T) {
	redisSrv := testenv.StartRedis(t)
	client, err := routes.NewRedisClient(routes.RedisOptions{Addrs: []string{redisSrv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	right, _ := backend(t, "right")
	attacker, attacked := backend(t, "attacker")
	good := Route{Tenant: "acme", Region: "eu", Backends: []string{right.URL}}
	evil := Route{Tenant: "victim", Region: "eu", Backends: []string{attacker.URL}}
	ctx := context.Background()
	// Plain JSON, as an earlier version wrote and anyone reaching Redis can.
	if err := client.Set(ctx, routes.KeyPrefix+"plain.example.com", `{"tenant":"victim","region":"eu","backends":["`+attacker.URL+`"]}`, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Signed with another key.
	if err := (routes.KV{Client: client, Key: []byte("another-key-0123456789abcdef012345")}).Put(ctx, map[string]Route{"otherkey.example.com": evil}); err != nil {
		t.Fatal(err)
	}
	// Signed with the right key, for another host, then moved.
	kv := routes.KV{Client: client, Key: testKey, Rejected: ObserveKVRejected}
	if err := kv.Put(ctx, map[string]Route{"elsewhere.example.com": evil}); err != nil {
		t.Fatal(err)
	}
	moved, _ := client.Get(ctx, routes.KeyPrefix+"elsewhere.example.com").Result()
	if err := client.Set(ctx, routes.KeyPrefix+"moved.example.com", moved, 0).Err(); err != nil {
		t.Fatal(err)
	}
	hosts := []string{"plain.example.com", "otherkey.example.com", "moved.example.com"}
	table := map[string]Route{}
	for _, h := range hosts {
		table[h] = good
	}
	before := testutil.ToFloat64(kvRejected.WithLabelValues("forged")) + testutil.ToFloat64(kvRejected.WithLabelValues("malformed"))
	src := &fakeLayer{name: "source", routes: table}
	tp := serveProxy(t, New(NewChain(ChainOptions{}, kv, src), Options{}))
	for _, h := range hosts {
		resp := tp.get(t, h, "/", nil)
		if got := body(t, resp); got != "right" {
			t.Errorf("%s reached %q", h, got)
		}
	}
	if attacked.Load() != 0 {
		t.Errorf("the attacker's backend got %d requests", attacked.Load())
	}
	after := testutil.ToFloat64(kvRejected.WithLabelValues("forged")) + testutil.ToFloat64(kvRejected.WithLabelValues("malformed"))
	if after-before != 3 {
		t.Errorf("%v entries counted as rejected, want 3", after-before)
	}
	// An entry the operator wrote is believed.
	if err := kv.Put(ctx, map[string]Route{"real.example.com": good}); err != nil {
		t.Fatal(err)
	}
	if r, err := kv.Lookup(ctx, "real.example.com"); err != nil || r.Tenant != "acme" {
		t.Errorf("an authentic entry: %+v %v", r, err)
	}
}
