// Package proxy is the edge router: an HTTP reverse proxy that maps a request's host
// to its tenant's route (tenant, region, backends) and forwards it to a backend of
// that region only.
//
// The lookup goes through layers: an in-process cache, an optional shared KV (Redis)
// and the source of truth (the operator's informer cache, or its lookup endpoint).
// Each layer has a timeout budget and a circuit breaker; a failing layer is skipped
// and the next one answers; concurrent misses for a host share one lookup; when every
// source fails a known route is served stale. A cache or KV outage costs latency,
// never availability.
package proxy

import (
	"context"
	"errors"

	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/singleflight"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// Route is where a host's requests go (the shared route model's).
type Route = routes.Route

// ErrNotFound is a layer's answer for a host it knows has no route. From the source of
// truth it is authoritative; from a cache layer it is only a miss.
var ErrNotFound = routes.ErrNotFound

// Layer is one place routes can be looked up.
type Layer interface {
	Name() string
	Lookup(ctx context.Context, host string) (Route, error)
}

// Outcome says how a lookup was answered, for metrics and logs.
type Outcome uint8

// Lookup outcomes.
const (
	OutcomeHit      Outcome = iota // fresh in-process cache entry
	OutcomeResolved                // resolved through a layer
	OutcomeStale                   // every layer failed; a known route served past its TTL
	OutcomeNotFound                // no route for the host (cached negatively)
	OutcomeError                   // every layer failed and nothing was known
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"hit", "resolved", "stale", "not_found", "error"}

func (o Outcome) String() string { return outcomeNames[o] }

// ChainOptions tune a lookup chain.
type ChainOptions struct {
	// TTL of a cached route; it is refreshed in the background once RefreshAfter of
	// it has passed, so hot hosts never miss.
	TTL          time.Duration
	RefreshAfter time.Duration
	// NegativeTTL of a cached "no route".
	NegativeTTL time.Duration
	// MaxStale bounds how long past its TTL a route is served when every layer fails.
	MaxStale time.Duration
	// LayerTimeout is each layer's time budget per lookup.
	LayerTimeout time.Duration
	// BreakerFailures consecutive failures open a layer's breaker for BreakerCooldown.
	BreakerFailures uint32
	BreakerCooldown time.Duration
	// MaxEntries bounds the in-process cache of routes.
	MaxEntries int
	// MaxNegativeEntries bounds the cache of hosts without a route. It is a space of
	// its own: a flood of random hosts evicts only other random hosts, never a route
	// or the stale copy that would be served when every layer fails.
	MaxNegativeEntries int
	// Observe, if set, is told of each layer's answer: layer, result (hit, miss, error,
	// breaker_open).
	Observe func(layer, result string)
}

func (o *ChainOptions) defaults() {
	if o.TTL == 0 {
		o.TTL = 30 * time.Second
	}
	if o.RefreshAfter == 0 || o.RefreshAfter >= o.TTL {
		o.RefreshAfter = o.TTL * 3 / 4
	}
	if o.NegativeTTL == 0 {
		o.NegativeTTL = 5 * time.Second
	}
	if o.MaxStale == 0 {
		o.MaxStale = time.Hour
	}
	if o.LayerTimeout == 0 {
		o.LayerTimeout = 250 * time.Millisecond
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = 3
	}
	if o.BreakerCooldown == 0 {
		o.BreakerCooldown = 5 * time.Second
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = 1 << 20
	}
	if o.MaxNegativeEntries == 0 {
		o.MaxNegativeEntries = 100_000
	}
	if o.Observe == nil {
		o.Observe = func(string, string) {}
	}
}

type guarded struct {
	Layer
	breaker *gobreaker.CircuitBreaker[Route]
	probing atomic.Bool
}

// Chain looks routes up through the in-process cache and its layers, in order; the
// last layer is the source of truth.
type Chain struct {
	opts     ChainOptions
	cache    *routeCache
	negative *negativeCache
	layers   []*guarded
	flight   singleflight.Group
	// invalidations counts Invalidate calls: a lookup that began before one does not
	// cache its answer, which may be what the invalidation was about.
	invalidations atomic.Uint64
	// inMemory: every layer answers from memory (InMemory); the loop engine looks
	// its misses up in place rather than on a goroutine.
	inMemory bool
}

// InMemory is implemented by a layer that answers from memory, never waiting on the
// network (the manager's informer cache).
type InMemory interface{ InMemory() bool }

// NewChain returns a chain over layers; the last is the source of truth.
func NewChain(opts ChainOptions, layers ...Layer) *Chain {
	opts.defaults()
	c := &Chain{opts: opts, cache: newRouteCache(opts.MaxEntries), negative: newNegativeCache(opts.MaxNegativeEntries),
		inMemory: len(layers) > 0}
	for _, l := range layers {
		if m, ok := l.(InMemory); !ok || !m.InMemory() {
			c.inMemory = false
		}
		declareLayer(l.Name())
		c.layers = append(c.layers, &guarded{Layer: l, breaker: gobreaker.NewCircuitBreaker[Route](gobreaker.Settings{
			Name:        l.Name(),
			MaxRequests: 1,
			Timeout:     opts.BreakerCooldown,
			ReadyToTrip: func(counts gobreaker.Counts) bool { return counts.ConsecutiveFailures >= opts.BreakerFailures },
			// A layer that answers "not found" is working.
			IsSuccessful: func(err error) bool { return err == nil || errors.Is(err, ErrNotFound) },
		})})
	}
	return c
}

// Routed reports whether a lookup finds a route for name (certs.Router: only a
// routed hostname gets a certificate on demand); fresh demands an answer from a
// source or a fresh cache entry, not a stale one.
func (c *Chain) Routed(ctx context.Context, name string, fresh bool) (known bool, err error) {
	var buf [256]byte
	host, err := routes.NormalizeHost([]byte(name), buf[:0])
	if err != nil {
		return false, nil
	}
	route, outcome := c.Lookup(ctx, host)
	switch {
	case outcome == OutcomeError:
		return false, errors.New("the route lookup failed")
	case route == nil:
		return false, nil
	case fresh && outcome == OutcomeStale:
		return false, errors.New("only a stale route is known")
	}
	return true, nil
}

// Lookup returns the route of a normalised host. A fresh cache hit allocates nothing.
func (c *Chain) Lookup(ctx context.Context, host []byte) (*CachedRoute, Outcome) {
	return c.LookupAt(ctx, host, time.Now().UnixNano())
}

// LookupAt is Lookup with the current time given (in Unix nanoseconds), for callers
// that already read the clock.
func (c *Chain) LookupAt(ctx context.Context, host []byte, now int64) (*CachedRoute, Outcome) {
	if route, outcome, ok := c.cached(host, now); ok {
		return route, outcome
	}
	v, _, _ := c.flight.Do(string(host), func() (any, error) {
		r, o := c.resolve(ctx, string(host))
		return result{r, o}, nil
	})
	res := v.(result)
	return res.route, res.outcome
}

// cached answers a lookup from the in-process caches alone, without waiting: ok is
// false when the layers must be asked (LookupAt does).
func (c *Chain) cached(host []byte, now int64) (*CachedRoute, Outcome, bool) {
	if e := c.cache.get(host); e != nil {
		if now < e.expires {
			if now >= e.refreshAt && e.refreshing.CompareAndSwap(false, true) {
				go c.refresh(string(host))
			}
			if e.stale {
				return e.route, OutcomeStale, true
			}
			return e.route, OutcomeHit, true
		}
	}
	if c.negative.has(host, now) {
		return nil, OutcomeNotFound, true
	}
	return nil, 0, false
}

type result struct {
	route   *CachedRoute
	outcome Outcome
}

func (c *Chain) refresh(host string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(c.layers))*c.opts.LayerTimeout+time.Second)
	defer cancel()
	_, _, _ = c.flight.Do(host, func() (any, error) {
		r, o := c.resolve(ctx, host)
		return result{r, o}, nil
	})
}

// resolve asks each layer in turn and caches the answer.
func (c *Chain) resolve(ctx context.Context, host string) (*CachedRoute, Outcome) {
	began := c.invalidations.Load()
	current := func() bool { return c.invalidations.Load() == began }
	for i, l := range c.layers {
		authoritative := i == len(c.layers)-1
		// A layer whose breaker is not closed costs a request nothing: it is skipped,
		// and a background lookup (one at a time) finds out whether it is back.
		if l.breaker.State() != gobreaker.StateClosed {
			c.opts.Observe(l.Name(), "breaker_open")
			c.probe(l, host)
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, c.opts.LayerTimeout)
		r, err := l.breaker.Execute(func() (Route, error) { return l.Lookup(lctx, host) })
		cancel()
		switch {
		case err == nil:
			c.opts.Observe(l.Name(), "hit")
			cr := newCachedRoute(r)
			// Checked before and after the store: an Invalidate between the first check
			// and the store is seen by the second, and one after it deletes the entry.
			if current() {
				c.store(host, cr)
				c.negative.delete(host)
				if !current() {
					c.cache.delete(host)
				}
			}
			return cr, OutcomeResolved
		case errors.Is(err, ErrNotFound):
			c.opts.Observe(l.Name(), "miss")
			if authoritative {
				c.cache.delete(host)
				if current() {
					c.negative.put(host, time.Now().Add(c.opts.NegativeTTL).UnixNano())
					if !current() {
						c.negative.delete(host)
					}
				}
				return nil, OutcomeNotFound
			}
		case errors.Is(err, gobreaker.ErrOpenState), errors.Is(err, gobreaker.ErrTooManyRequests):
			c.opts.Observe(l.Name(), "breaker_open")
		default:
			c.opts.Observe(l.Name(), "error")
		}
	}
	// Every layer failed: serve what is known, within MaxStale. The stale entry is
	// kept for a second at a time, so that meanwhile requests are answered from the
	// cache and one background refresh a second tries the layers again.
	now := time.Now()
	if e := c.cache.get([]byte(host)); e != nil && now.UnixNano() < e.staleUntil {
		// Only in the entry's own place: one Invalidate deleted meanwhile is not put
		// back (it would keep putting itself back every second while the layers fail).
		c.cache.swap(host, e, &cacheEntry{route: e.route, stale: true, staleUntil: e.staleUntil,
			expires: min(now.Add(time.Second).UnixNano(), e.staleUntil), refreshAt: now.Add(100 * time.Millisecond).UnixNano()})
		return e.route, OutcomeStale
	}
	return nil, OutcomeError
}

// probe tries a layer whose breaker is open or half-open in the background; a success
// closes the breaker.
func (c *Chain) probe(l *guarded, host string) {
	if !l.probing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.probing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), c.opts.LayerTimeout)
		defer cancel()
		_, _ = l.breaker.Execute(func() (Route, error) { return l.Lookup(ctx, host) })
	}()
}

func (c *Chain) store(host string, r *CachedRoute) {
	now := time.Now()
	c.cache.put(host, &cacheEntry{route: r, expires: now.Add(c.opts.TTL).UnixNano(),
		refreshAt: now.Add(c.opts.RefreshAfter).UnixNano(), staleUntil: now.Add(c.opts.TTL + c.opts.MaxStale).UnixNano()})
}

// Invalidate drops a host from the in-process caches; a lookup of it under way does
// not cache its answer, and the next one asks the layers again.
func (c *Chain) Invalidate(host string) {
	c.invalidations.Add(1)
	c.flight.Forget(host)
	c.cache.delete(host)
	c.negative.delete(host)
}

// CachedRoute is a route as the proxy uses it; it is immutable but for its counters.
type CachedRoute struct {
	Route
	next      atomic.Uint64 // round robin over Backends
	upstreams atomic.Pointer[[]*upstream]
	latency   prometheus.Observer // upstream latency of the route's region; nil without backends, when no request reaches one
}

// newCachedRoute labels the route's latency with its region only when the route has
// backends: the region is the tenant's spec.region, and only one that names an existing
// Region (which an administrator creates) has any. Labelled by any name a tenant wrote,
// the series would grow without end.
func newCachedRoute(r Route) *CachedRoute {
	c := &CachedRoute{Route: r}
	if len(r.Backends) > 0 {
		c.latency = upstreamSeconds.WithLabelValues(r.Region)
	}
	return c
}

func (r *CachedRoute) observeUpstream(d time.Duration) { r.latency.Observe(d.Seconds()) }
