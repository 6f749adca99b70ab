package routes

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyPrefix namespaces the routes in the shared cache.
const KeyPrefix = "tenantroute:route:"

// DefaultEntryTTL is how long an entry is believed without being written again.
const DefaultEntryTTL = 10 * time.Minute

// KV is the shared cache (the Workers KV of the original design): the operator
// writes it, proxies read it. Anything that can reach Redis could write it, so an
// entry is trusted only if it is authenticated: each carries an HMAC-SHA256, keyed by
// a secret shared by the operator and the proxies, over its host and its content, and
// an expiry. A proxy ignores (as a miss: the source of truth answers) an entry that
// is forged, moved to another host, malformed or expired, and says so through
// Rejected.
//
// An entry is "v1.<payload>.<mac>", both base64url; the payload is the route as JSON
// with "exp", its expiry in Unix seconds. Redis also expires it then.
type KV struct {
	Client redis.UniversalClient
	// Key authenticates entries; at least 32 bytes.
	Key []byte
	// TTL of an entry; the operator writes every entry again well before.
	TTL time.Duration
	// Rejected, if set, is told why an entry was ignored: forged, expired, malformed.
	Rejected func(reason string)
	// Clock, if set, is the Redis server's: entries are given and judged their expiry
	// by it, not by the writer's and the reader's own clocks, which may disagree.
	Clock *ServerClock

	wall func() time.Time // the local clock; tests make it jump
}

func (k KV) now(ctx context.Context) time.Time {
	wall := time.Now
	if k.wall != nil {
		wall = k.wall
	}
	if k.Clock != nil {
		return k.Clock.Now(ctx, wall)
	}
	return wall()
}

// ServerClock is the Redis server's clock as seen from this process. An entry's
// expiry written by one process's clock and judged by another's made both depend on
// their agreement: an operator whose clock stepped ten minutes back wrote entries
// every proxy found expired. The server's TIME is read once a minute and advanced in
// between by the monotonic clock, which a step of the wall clock does not move.
//
// The server is trusted only within MaxClockSkew of the local clock: a compromised
// Redis, or a man in the middle of a connection without TLS, answering TIME from the
// past would otherwise make every old sealed entry (a host's former tenant) current
// again. Past the bound the local clock, moved by the bound, is used: a lying server
// can extend an entry by twice the bound at most (sealed by a writer it told the time
// ahead, judged by a reader it told the time behind), and a local clock stepped by
// more than the bound is judged by itself again, as before the server's clock was used.
type ServerClock struct {
	client redis.Cmdable

	mu      sync.Mutex
	read    time.Time // when the server was last read, with its monotonic reading
	server  time.Time // what it said, within MaxClockSkew of the local clock then
	tried   time.Time // when it was last asked
	reading bool
}

// MaxClockSkew bounds how far the Redis server's clock is believed when it disagrees
// with the local one: more than the 10-minute steps a misconfigured NTP makes.
const MaxClockSkew = 15 * time.Minute

// NewServerClock returns the clock of client's server, read once (for up to 2 s)
// so that the first lookups do not judge entries by the local clock; if the server
// cannot be read yet, Now tries again once serverClockRetry has passed.
func NewServerClock(client redis.Cmdable) *ServerClock {
	c := &ServerClock{client: client, tried: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if t, err := client.Time(ctx).Result(); err == nil {
		c.read = time.Now()
		c.server = clampSkew(t, c.read)
	}
	return c
}

// clampSkew returns server moved to within MaxClockSkew of local.
func clampSkew(server, local time.Time) time.Time {
	if lo := local.Add(-MaxClockSkew); server.Before(lo) {
		return lo
	}
	if hi := local.Add(MaxClockSkew); server.After(hi) {
		return hi
	}
	return server
}

// serverClockRefresh is how often the server's clock is read again (for drift), and
// serverClockRetry how soon after a failed read: a server that refuses TIME (an ACL)
// or is down is not asked on every lookup, each a round trip more.
const (
	serverClockRefresh = time.Minute
	serverClockRetry   = 10 * time.Second
)

// Now returns the server's time. Until the server could be read it is wall's; one
// caller at a time reads it again, the others use what was read before. A server
// that cannot be read leaves the clock as it was (wall's, or the last reading).
func (c *ServerClock) Now(ctx context.Context, wall func() time.Time) time.Time {
	c.mu.Lock()
	read, server := c.read, c.server
	stale := (read.IsZero() || time.Since(read) > serverClockRefresh) && time.Since(c.tried) > serverClockRetry && !c.reading
	if stale {
		c.reading, c.tried = true, time.Now()
	}
	c.mu.Unlock()
	if stale {
		t, err := c.client.Time(ctx).Result()
		local := time.Now()
		c.mu.Lock()
		if err == nil {
			c.read, c.server = local, clampSkew(t, wall())
			read, server = c.read, c.server
		}
		c.reading = false
		c.mu.Unlock()
	}
	if read.IsZero() {
		return wall()
	}
	return server.Add(time.Since(read))
}

type entry struct {
	Route
	Exp int64 `json:"exp"`
}

// Name names the cache in the proxy's metrics.
func (KV) Name() string { return "redis" }

func (k KV) ttl() time.Duration {
	if k.TTL <= 0 {
		return DefaultEntryTTL
	}
	return k.TTL
}

// Lookup returns the route of host if its entry is authentic and current; a missing
// or untrusted entry is a miss (ErrNotFound).
func (k KV) Lookup(ctx context.Context, host string) (Route, error) {
	b, err := k.Client.Get(ctx, KeyPrefix+host).Result()
	if errors.Is(err, redis.Nil) {
		return Route{}, ErrNotFound
	}
	if err != nil {
		return Route{}, err
	}
	r, reason := k.open(host, b, k.now(ctx))
	if reason != "" {
		if k.Rejected != nil {
			k.Rejected(reason)
		}
		return Route{}, ErrNotFound
	}
	return r, nil
}

func (k KV) seal(host string, r Route, now time.Time) (string, error) {
	payload, err := json.Marshal(entry{Route: r, Exp: now.Add(k.ttl()).Unix()})
	if err != nil {
		return "", err
	}
	return k.sealValue(host, payload), nil
}

// sealValue authenticates payload as the value of name: "v1.<payload>.<mac>". Names
// of different kinds of entries never collide (a hostname has no ':'), so an entry
// cannot be replayed as another kind.
func (k KV) sealValue(name string, payload []byte) string {
	p := base64.RawURLEncoding.EncodeToString(payload)
	return "v1." + p + "." + base64.RawURLEncoding.EncodeToString(k.mac(name, p))
}

func (k KV) mac(name, payload string) []byte {
	m := hmac.New(sha256.New, k.Key)
	m.Write([]byte(name))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// openValue returns the payload of an authentic value of name, or why it is not to
// be believed (malformed, forged).
func (k KV) openValue(name, value string) ([]byte, string) {
	parts := strings.Split(value, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, "malformed"
	}
	sum, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sum, k.mac(name, parts[1])) {
		return nil, "forged"
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, "malformed"
	}
	return payload, ""
}

// open checks an entry and returns its route, or why it is not to be believed.
func (k KV) open(host, value string, now time.Time) (Route, string) {
	payload, reason := k.openValue(host, value)
	if reason != "" {
		return Route{}, reason
	}
	var e entry
	if json.Unmarshal(payload, &e) != nil {
		return Route{}, "malformed"
	}
	if now.Unix() >= e.Exp {
		return Route{}, "expired"
	}
	return e.Route, ""
}

// Put writes the routes of hosts, each authenticated and expiring after TTL.
func (k KV) Put(ctx context.Context, routes map[string]Route) error {
	now := k.now(ctx)
	pipe := k.Client.Pipeline()
	for host, r := range routes {
		v, err := k.seal(host, r, now)
		if err != nil {
			return err
		}
		pipe.Set(ctx, KeyPrefix+host, v, k.ttl())
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Delete removes hosts from the KV, one key per command in one pipeline: in a Redis
// Cluster the keys of one command must hash to one slot, and a DEL of several hosts
// was refused (CROSSSLOT).
func (k KV) Delete(ctx context.Context, hosts ...string) error {
	pipe := k.Client.Pipeline()
	for _, h := range hosts {
		pipe.Del(ctx, KeyPrefix+h)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Sync makes the KV hold exactly routes: every entry written again (with a fresh
// expiry) and every other route key deleted, whoever wrote it. It returns how many
// keys it deleted.
func (k KV) Sync(ctx context.Context, routes map[string]Route) (deleted int, err error) {
	batch := map[string]Route{}
	for host, r := range routes {
		batch[host] = r
		if len(batch) == 1000 {
			if err := k.Put(ctx, batch); err != nil {
				return 0, err
			}
			clear(batch)
		}
	}
	if err := k.Put(ctx, batch); err != nil {
		return 0, err
	}
	keys, err := k.Keys(ctx, KeyPrefix+"*")
	if err != nil {
		return 0, err
	}
	var stale []string
	for _, key := range keys {
		if host := strings.TrimPrefix(key, KeyPrefix); routes[host].Tenant == "" {
			stale = append(stale, host)
		}
	}
	for len(stale) > 0 {
		n := min(len(stale), 1000)
		if err := k.Delete(ctx, stale[:n]...); err != nil {
			return deleted, err
		}
		deleted += n
		stale = stale[n:]
	}
	return deleted, nil
}

// Keys lists the keys matching pattern, on every master of a Cluster (where SCAN
// would see one node only).
func (k KV) Keys(ctx context.Context, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	switch c := k.Client.(type) {
	case *redis.ClusterClient:
		return keys, c.ForEachMaster(ctx, scan)
	case *redis.Client:
		return keys, scan(ctx, c)
	}
	iter := k.Client.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// LoadKey reads an HMAC key from a file (a mounted Secret), never from a flag value
// that would show in ps.
func LoadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the shared cache's key: %w", err)
	}
	key := []byte(strings.TrimSpace(string(b)))
	if len(key) < 32 {
		return nil, fmt.Errorf("the shared cache's key in %s has %d bytes; at least 32 are needed", path, len(key))
	}
	return key, nil
}

// RedisOptions say how to reach Redis: one address, a Sentinel group (MasterName) or
// a Cluster (several addresses), with AUTH and TLS. Secrets come from files.
type RedisOptions struct {
	Addrs        []string
	MasterName   string
	Username     string
	PasswordFile string
	TLS          bool
	CAFile       string
}

// NewRedisClient returns a client with timeouts short enough that a dead Redis costs
// a request milliseconds, and few retries: the lookup falls through to the source.
func NewRedisClient(o RedisOptions) (redis.UniversalClient, error) {
	u := &redis.UniversalOptions{
		Addrs:         o.Addrs,
		MasterName:    o.MasterName,
		Username:      o.Username,
		DialTimeout:   200 * time.Millisecond,
		ReadTimeout:   100 * time.Millisecond,
		WriteTimeout:  100 * time.Millisecond,
		MaxRetries:    -1,
		DialerRetries: 1,
		PoolSize:      64,
	}
	if o.PasswordFile != "" {
		b, err := os.ReadFile(o.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("reading the Redis password: %w", err)
		}
		u.Password = strings.TrimSpace(string(b))
	}
	if o.TLS {
		u.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("reading the Redis CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("no certificate in %s", o.CAFile)
			}
			u.TLSConfig.RootCAs = pool
		}
	}
	return redis.NewUniversalClient(u), nil
}
