package proxy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeLayer answers from a map, or fails, or is slow, and counts its calls.
type fakeLayer struct {
	name   string
	mu     sync.Mutex
	routes map[string]Route
	fail   error
	delay  time.Duration
	gate   chan struct{} // when set, lookups wait for it to close
	calls  atomic.Int64
}

func (f *fakeLayer) Name() string { return f.name }

func (f *fakeLayer) Lookup(ctx context.Context, host string) (Route, error) {
	f.calls.Add(1)
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	delay, fail, r, ok := f.delay, f.fail, f.routes[host], f.routes != nil && f.routes[host].Tenant != ""
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return Route{}, ctx.Err()
		}
	}
	if fail != nil {
		return Route{}, fail
	}
	if !ok {
		return Route{}, ErrNotFound
	}
	return r, nil
}

func (f *fakeLayer) set(fail error, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.delay = fail, delay
}

var acme = Route{Tenant: "acme", Region: "eu-west", Backends: []string{"http://eu-west-a:8080"}}

func newSource() *fakeLayer {
	return &fakeLayer{name: "source", routes: map[string]Route{"acme.auth.example.com": acme}}
}

var errDown = errors.New("connection refused")

func TestHitAllocatesNothing(t *testing.T) {
	c := NewChain(ChainOptions{}, newSource())
	host := []byte("acme.auth.example.com")
	if r, o := c.Lookup(context.Background(), host); o != OutcomeResolved || r.Tenant != "acme" {
		t.Fatalf("first lookup: %v %v", r, o)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, o := c.Lookup(context.Background(), host); o != OutcomeHit {
			t.Fatalf("outcome %v", o)
		}
	})
	if allocs != 0 {
		t.Errorf("a cache hit allocates %v times", allocs)
	}
}

func TestConcurrentMissesShareOneLookup(t *testing.T) {
	src := newSource()
	src.gate = make(chan struct{})
	c := NewChain(ChainOptions{}, src)
	var wg sync.WaitGroup
	var started sync.WaitGroup
	started.Add(1000)
	for range 1000 {
		wg.Go(func() {
			started.Done()
			if r, _ := c.Lookup(context.Background(), []byte("acme.auth.example.com")); r == nil || r.Tenant != "acme" {
				t.Error("no route")
			}
		})
	}
	started.Wait()
	time.Sleep(50 * time.Millisecond) // let the goroutines reach the lookup
	close(src.gate)
	wg.Wait()
	if n := src.calls.Load(); n != 1 {
		t.Errorf("1000 concurrent misses made %d source calls, want 1", n)
	}
}

func TestEveryLayerFailingServesStale(t *testing.T) {
	kv, src := &fakeLayer{name: "kv"}, newSource()
	c := NewChain(ChainOptions{TTL: 20 * time.Millisecond, MaxStale: time.Minute}, kv, src)
	host := []byte("acme.auth.example.com")
	c.Lookup(context.Background(), host)
	kv.set(errDown, 0)
	src.set(errDown, 0)
	time.Sleep(30 * time.Millisecond) // past the TTL
	r, o := c.Lookup(context.Background(), host)
	if o != OutcomeStale || r == nil || r.Tenant != "acme" {
		t.Fatalf("with every layer down: %v %v, want the stale route", r, o)
	}
	// An unknown host gets no route, not an error page of someone else's.
	if r, o := c.Lookup(context.Background(), []byte("other.example.com")); o != OutcomeError || r != nil {
		t.Errorf("unknown host with every layer down: %v %v", r, o)
	}
	// Past MaxStale nothing is served.
	c2 := NewChain(ChainOptions{TTL: 10 * time.Millisecond, MaxStale: 10 * time.Millisecond}, newSource())
	c2.Lookup(context.Background(), host)
	c2.layers[0].Layer.(*fakeLayer).set(errDown, 0)
	time.Sleep(30 * time.Millisecond)
	if _, o := c2.Lookup(context.Background(), host); o != OutcomeError {
		t.Errorf("past MaxStale: %v", o)
	}
}

func TestOpenBreakerSkipsTheDeadLayer(t *testing.T) {
	kv, src := &fakeLayer{name: "kv"}, newSource()
	kv.set(errDown, 0)
	c := NewChain(ChainOptions{TTL: time.Hour, BreakerFailures: 3, BreakerCooldown: time.Hour}, kv, src)
	hosts := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, h := range hosts {
		src.routes[h+".example.com"] = acme
		if r, o := c.Lookup(context.Background(), []byte(h+".example.com")); o != OutcomeResolved || r == nil {
			t.Fatalf("%s: %v %v", h, r, o)
		}
	}
	if n := kv.calls.Load(); n != 3 {
		t.Errorf("the failing layer was called %d times for %d misses, want 3 (then its breaker opens)", n, len(hosts))
	}
	// Once its cooldown is over the layer is tried again in the background, never on a
	// request's path, and a success closes the breaker.
	c2 := NewChain(ChainOptions{TTL: time.Hour, BreakerFailures: 1, BreakerCooldown: 10 * time.Millisecond}, kv, src)
	c2.Lookup(context.Background(), []byte("a.example.com"))
	kv.set(nil, time.Hour) // back, but slow: a request must not wait for it
	time.Sleep(20 * time.Millisecond)
	done := make(chan Outcome)
	go func() { _, o := c2.Lookup(context.Background(), []byte("b.example.com")); done <- o }()
	select {
	case o := <-done:
		if o != OutcomeResolved {
			t.Errorf("outcome %v", o)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a request waited for the half-open layer")
	}
}

func TestSlowLayerIsCutOffByItsBudget(t *testing.T) {
	kv, src := &fakeLayer{name: "kv"}, newSource()
	kv.set(nil, time.Hour)
	c := NewChain(ChainOptions{LayerTimeout: 20 * time.Millisecond}, kv, src)
	done := make(chan Outcome)
	go func() {
		_, o := c.Lookup(context.Background(), []byte("acme.auth.example.com"))
		done <- o
	}()
	select {
	case o := <-done:
		if o != OutcomeResolved {
			t.Errorf("outcome %v", o)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a slow layer held the lookup past its budget")
	}
}

func TestEmptyLayerFallsThrough(t *testing.T) {
	kv, src := &fakeLayer{name: "kv", routes: map[string]Route{}}, newSource()
	c := NewChain(ChainOptions{}, kv, src)
	if r, o := c.Lookup(context.Background(), []byte("acme.auth.example.com")); o != OutcomeResolved || r.Tenant != "acme" {
		t.Errorf("%v %v", r, o)
	}
	if kv.calls.Load() != 1 || src.calls.Load() != 1 {
		t.Errorf("kv %d, source %d calls", kv.calls.Load(), src.calls.Load())
	}
}

func TestUnknownHostIsCachedNegatively(t *testing.T) {
	src := newSource()
	c := NewChain(ChainOptions{NegativeTTL: time.Hour}, src)
	for range 5 {
		if r, o := c.Lookup(context.Background(), []byte("nobody.example.com")); o != OutcomeNotFound || r != nil {
			t.Fatalf("%v %v", r, o)
		}
	}
	if n := src.calls.Load(); n != 1 {
		t.Errorf("%d source calls for an unknown host, want 1", n)
	}
}

func TestHotRoutesRefreshInTheBackground(t *testing.T) {
	src := newSource()
	c := NewChain(ChainOptions{TTL: time.Hour, RefreshAfter: 10 * time.Millisecond}, src)
	host := []byte("acme.auth.example.com")
	c.Lookup(context.Background(), host)
	time.Sleep(20 * time.Millisecond)
	src.mu.Lock()
	src.routes["acme.auth.example.com"] = Route{Tenant: "acme", Region: "us-east", Backends: acme.Backends}
	src.mu.Unlock()
	if r, o := c.Lookup(context.Background(), host); o != OutcomeHit || r.Region != "eu-west" {
		t.Fatalf("the refreshing lookup must answer from the cache: %v %v", r, o)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if r, _ := c.Lookup(context.Background(), host); r.Region == "us-east" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the route was never refreshed")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// BenchmarkLookupHit: go test -run '^$' -bench LookupHit -benchmem ./proxy/
func BenchmarkLookupHit(b *testing.B) {
	c := NewChain(ChainOptions{TTL: time.Hour}, newSource())
	host := []byte("acme.auth.example.com")
	c.Lookup(context.Background(), host)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, o := c.Lookup(ctx, host); o != OutcomeHit {
				b.Fatal(o)
			}
		}
	})
}

// A hostname handed to another tenant is invalidated: the next lookup asks the source
// again, and a lookup that was under way when the hand-over happened (it read the
// former tenant) does not cache its answer.
func TestInvalidateForgetsARouteAndALookupUnderWay(t *testing.T) {
	const host = "acme.auth.example.com"
	src := newSource()
	c := NewChain(ChainOptions{TTL: time.Hour, NegativeTTL: time.Hour}, src)
	if r, _ := c.Lookup(context.Background(), []byte(host)); r == nil || r.Tenant != "acme" {
		t.Fatalf("first lookup: %v", r)
	}
	handOver := func(tenant string) {
		src.mu.Lock()
		r := acme
		r.Tenant = tenant
		src.routes[host] = r
		src.mu.Unlock()
		c.Invalidate(host)
	}
	handOver("beta")
	if r, _ := c.Lookup(context.Background(), []byte(host)); r == nil || r.Tenant != "beta" {
		t.Fatalf("after the hand-over: %v, want beta", r)
	}

	// A lookup reads the source, then the hand-over happens before it caches.
	c.Invalidate(host)
	src.gate = make(chan struct{})
	done := make(chan *CachedRoute)
	go func() {
		r, _ := c.Lookup(context.Background(), []byte(host))
		done <- r
	}()
	for src.calls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	// The lookup is inside the source, which answers beta (it read the route before
	// the hand-over); the hand-over to gamma is invalidated before it caches.
	c.Invalidate(host)
	close(src.gate)
	if r := <-done; r == nil || r.Tenant != "beta" {
		t.Fatalf("the lookup under way answered %v", r)
	}
	src.gate = nil
	src.mu.Lock()
	src.routes[host] = Route{Tenant: "gamma", Region: acme.Region, Backends: acme.Backends}
	src.mu.Unlock()
	if r, _ := c.Lookup(context.Background(), []byte(host)); r == nil || r.Tenant != "gamma" {
		t.Fatalf("after a hand-over during a lookup: %v, want gamma (the lookup under way cached the former tenant)", r)
	}
}
