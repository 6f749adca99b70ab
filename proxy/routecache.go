package proxy

import (
	"sync"
	"sync/atomic"
	"time"
)

type cacheEntry struct {
	route      *CachedRoute
	expires    int64 // unix nanoseconds
	refreshAt  int64
	staleUntil int64 // the route may be served stale until then
	stale      bool  // kept only because every layer failed
	refreshing atomic.Bool
}

// routeCache is a sharded map whose shards are replaced whole on write (copy on
// write): a read is an atomic load and a map index with a []byte key, no lock and no
// allocation, so the hot path scales across cores. Writes (a miss, a refresh) copy
// one shard of 1/256th of the hosts.
type routeCache struct {
	shards   [256]cacheShard
	perShard int
}

type cacheShard struct {
	mu      sync.Mutex // serialises writers
	entries atomic.Pointer[map[string]*cacheEntry]
}

func newRouteCache(max int) *routeCache {
	c := &routeCache{}
	c.perShard = max/len(c.shards) + 1
	for i := range c.shards {
		m := map[string]*cacheEntry{}
		c.shards[i].entries.Store(&m)
	}
	return c
}

func (c *routeCache) shard(host []byte) *cacheShard {
	return &c.shards[fnv32(host)%uint32(len(c.shards))]
}

// fnv32 is FNV-1a: cheap, allocation-free, spreads hostnames well.
func fnv32(b []byte) uint32 {
	var h uint32 = 2166136261
	for _, c := range b {
		h = (h ^ uint32(c)) * 16777619
	}
	return h
}

func (c *routeCache) get(host []byte) *cacheEntry {
	return (*c.shard(host).entries.Load())[string(host)]
}

func (c *routeCache) put(host string, e *cacheEntry) {
	c.update(host, func(m map[string]*cacheEntry) {
		if len(m) >= c.perShard {
			// Full: drop entries past serving even stale, then expired ones, then,
			// if need be, any (map order is random).
			now := time.Now().UnixNano()
			for _, gone := range []func(*cacheEntry) bool{
				func(e *cacheEntry) bool { return e.staleUntil < now },
				func(e *cacheEntry) bool { return e.expires < now },
				func(*cacheEntry) bool { return true },
			} {
				for k, old := range m {
					if len(m) < c.perShard*3/4 {
						break
					}
					if gone(old) {
						delete(m, k)
					}
				}
			}
		}
		m[host] = e
	})
}

func (c *routeCache) delete(host string) {
	s := c.shard([]byte(host))
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.entries.Load()
	if _, ok := old[host]; !ok {
		return // nothing to copy the shard for (every grant change invalidates its host)
	}
	m := make(map[string]*cacheEntry, len(old))
	for k, v := range old {
		if k != host {
			m[k] = v
		}
	}
	s.entries.Store(&m)
}

// swap puts e in old's place, if old is still the host's entry: one Invalidate
// deleted is not put back.
func (c *routeCache) swap(host string, old, e *cacheEntry) {
	c.update(host, func(m map[string]*cacheEntry) {
		if m[host] == old {
			m[host] = e
		}
	})
}

func (c *routeCache) update(host string, change func(map[string]*cacheEntry)) {
	s := c.shard([]byte(host))
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.entries.Load()
	m := make(map[string]*cacheEntry, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	change(m)
	s.entries.Store(&m)
}

// negativeCache remembers hosts the source of truth has no route for, until a time.
// It is bounded on its own and sharded under locks: only unknown hosts read it, so it
// needs no lock-free path, and a full shard evicts expired entries first, then any.
type negativeCache struct {
	shards   [64]negativeShard
	perShard int
}

type negativeShard struct {
	mu      sync.Mutex
	expires map[string]int64
}

func newNegativeCache(max int) *negativeCache {
	c := &negativeCache{perShard: max/64 + 1}
	for i := range c.shards {
		c.shards[i].expires = map[string]int64{}
	}
	return c
}

func (c *negativeCache) shard(host []byte) *negativeShard {
	return &c.shards[fnv32(host)%uint32(len(c.shards))]
}

func (c *negativeCache) has(host []byte, now int64) bool {
	s := c.shard(host)
	s.mu.Lock()
	until, ok := s.expires[string(host)]
	s.mu.Unlock()
	return ok && now < until
}

func (c *negativeCache) put(host string, until int64) {
	s := c.shard([]byte(host))
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.expires) >= c.perShard {
		// Evict down to three quarters, expired entries first, so that a flood pays
		// for a scan once every quarter of a shard, not on every insert.
		now, low := time.Now().UnixNano(), c.perShard*3/4
		for k, t := range s.expires {
			if len(s.expires) < low {
				break
			}
			if t < now {
				delete(s.expires, k)
			}
		}
		for k := range s.expires {
			if len(s.expires) < low {
				break
			}
			delete(s.expires, k)
		}
	}
	s.expires[host] = until
}

func (c *negativeCache) delete(host string) {
	s := c.shard([]byte(host))
	s.mu.Lock()
	delete(s.expires, host)
	s.mu.Unlock()
}
