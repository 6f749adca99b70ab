package routes

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

func testKV(t *testing.T) KV {
	t.Helper()
	srv := testenv.StartRedis(t)
	client, err := NewRedisClient(RedisOptions{Addrs: []string{srv.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	return KV{Client: client, Key: []byte("test-hmac-key-0123456789abcdef0123456789"), TTL: time.Minute, Clock: NewServerClock(client)}
}

func TestExpiredEntriesAreIgnored(t *testing.T) {
	kv := testKV(t)
	var rejected []string
	kv.Rejected = func(reason string) { rejected = append(rejected, reason) }
	r := Route{Tenant: "acme", Region: "eu", Backends: []string{"http://eu:80"}}
	// Written two TTLs ago and kept alive in Redis: its own expiry still holds.
	old, err := kv.seal("acme.example.com", r, time.Now().Add(-2*kv.TTL))
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Client.Set(context.Background(), KeyPrefix+"acme.example.com", old, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Lookup(context.Background(), "acme.example.com"); err != ErrNotFound || len(rejected) != 1 || rejected[0] != "expired" {
		t.Errorf("an expired entry: %v, rejected %v", err, rejected)
	}
	// Redis expires entries too.
	if err := kv.Put(context.Background(), map[string]Route{"acme.example.com": r}); err != nil {
		t.Fatal(err)
	}
	if ttl := kv.Client.TTL(context.Background(), KeyPrefix+"acme.example.com").Val(); ttl <= 0 || ttl > kv.TTL {
		t.Errorf("the entry's Redis TTL: %s", ttl)
	}
}

func TestSyncLeavesExactlyTheGrantedRoutes(t *testing.T) {
	kv := testKV(t)
	ctx := context.Background()
	r := Route{Tenant: "acme", Region: "eu"}
	if err := kv.Put(ctx, map[string]Route{"gone.example.com": r, "kept.example.com": r}); err != nil {
		t.Fatal(err)
	}
	if err := kv.Client.Set(ctx, KeyPrefix+"forged.example.com", "{}", 0).Err(); err != nil {
		t.Fatal(err)
	}
	deleted, err := kv.Sync(ctx, map[string]Route{"kept.example.com": r, "new.example.com": r})
	if err != nil || deleted != 2 {
		t.Fatalf("sync: deleted %d, %v", deleted, err)
	}
	keys, _ := kv.Client.Keys(ctx, KeyPrefix+"*").Result()
	if len(keys) != 2 {
		t.Errorf("left %v", keys)
	}
	for _, h := range []string{"kept.example.com", "new.example.com"} {
		if got, err := kv.Lookup(ctx, h); err != nil || got.Tenant != "acme" {
			t.Errorf("%s: %+v %v", h, got, err)
		}
	}
}

// The operator's clock jumps ten minutes back (or a proxy's forward): entries it
// writes must still be believed by the proxies, or every tenant behind them is a
// miss until the clocks agree again. Expiry is judged by the KV server's clock.
func TestEntriesOutliveAWriterClockJump(t *testing.T) {
	reader := testKV(t)
	writer := reader
	writer.wall = func() time.Time { return time.Now().Add(-10 * time.Minute) }
	var rejected []string
	reader.Rejected = func(reason string) { rejected = append(rejected, reason) }
	r := Route{Tenant: "acme", Region: "eu", Backends: []string{"http://eu:80"}}
	if err := writer.Put(context.Background(), map[string]Route{"acme.example.com": r}); err != nil {
		t.Fatal(err)
	}
	if got, err := reader.Lookup(context.Background(), "acme.example.com"); err != nil || got.Tenant != "acme" {
		t.Errorf("an entry written by a clock ten minutes behind: %v, %v (rejected %v)", got, err, rejected)
	}
	// And a clock ten minutes ahead does not make entries outlive their TTL.
	writer.wall = func() time.Time { return time.Now().Add(10 * time.Minute) }
	if err := writer.Put(context.Background(), map[string]Route{"acme.example.com": r}); err != nil {
		t.Fatal(err)
	}
	sealed := reader.Client.Get(context.Background(), KeyPrefix+"acme.example.com").Val()
	if _, reason := reader.open("acme.example.com", sealed, reader.now(context.Background()).Add(2*reader.TTL)); reason != "expired" {
		t.Errorf("an entry read two TTLs after it was written by a clock ten minutes ahead: %q, want expired", reason)
	}
}

// timeOff is a Redis server (or a man in the middle) that answers TIME off by its
// duration and serves everything else as it is.
type timeOff time.Duration

func (timeOff) DialHook(next redis.DialHook) redis.DialHook { return next }
func (timeOff) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (d timeOff) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if t, ok := cmd.(*redis.TimeCmd); ok && err == nil {
			t.SetVal(t.Val().Add(time.Duration(d)))
		}
		return err
	}
}

func TestAServerAnsweringOldTimeCannotReviveExpiredEntries(t *testing.T) {
	writer := testKV(t)
	writer.Clock = nil
	// Sealed half an hour ago with a one-minute TTL: long expired, though Redis
	// still holds the key (it counts the TTL from the write).
	writer.wall = func() time.Time { return time.Now().Add(-30 * time.Minute) }
	r := Route{Tenant: "former", Region: "eu", Backends: []string{"http://eu:80"}}
	if err := writer.Put(context.Background(), map[string]Route{"acme.example.com": r}); err != nil {
		t.Fatal(err)
	}
	writer.Client.AddHook(timeOff(-time.Hour))
	reader := writer
	reader.wall = nil
	reader.Clock = NewServerClock(reader.Client)
	var rejected []string
	reader.Rejected = func(reason string) { rejected = append(rejected, reason) }
	if got, err := reader.Lookup(context.Background(), "acme.example.com"); err == nil {
		t.Errorf("an entry expired 29 minutes ago was served as %q by a server whose TIME is an hour early", got.Tenant)
	}
	if len(rejected) != 1 || rejected[0] != "expired" {
		t.Errorf("rejected %v, want [expired]", rejected)
	}
	// Beyond the bound the server is believed only as far as the bound.
	if skew := reader.now(context.Background()).Sub(time.Now()); skew > -MaxClockSkew+time.Second || skew < -MaxClockSkew-time.Second {
		t.Errorf("the clock an hour early is taken %v off, want -%v (the bound)", skew, MaxClockSkew)
	}
}

// The bound holds when the server's clock is read again (once a minute), not only at
// the first read.
func TestARefreshOfTheServerClockIsBoundedToo(t *testing.T) {
	kv := testKV(t)
	clock := NewServerClock(kv.Client)
	if skew := clock.Now(context.Background(), time.Now).Sub(time.Now()); skew.Abs() > time.Second {
		t.Fatalf("an honest server's clock is taken %v off", skew)
	}
	kv.Client.AddHook(timeOff(-time.Hour))
	clock.mu.Lock()
	clock.read = clock.read.Add(-2 * serverClockRefresh) // due for a refresh
	clock.tried = clock.read
	clock.mu.Unlock()
	skew := clock.Now(context.Background(), time.Now).Sub(time.Now())
	if skew > -MaxClockSkew+time.Second || skew < -MaxClockSkew-time.Second {
		t.Errorf("read again from a server an hour early, the clock is taken %v off, want -%v (the bound)", skew, MaxClockSkew)
	}
}

// timeRefused is a Redis whose ACL refuses TIME; it counts the attempts.
type timeRefused struct{ asked *atomic.Int32 }

func (timeRefused) DialHook(next redis.DialHook) redis.DialHook { return next }
func (timeRefused) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h timeRefused) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ok := cmd.(*redis.TimeCmd); ok {
			h.asked.Add(1)
			err := errors.New("NOPERM User has no permissions to run the 'time' command")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// A server that refuses TIME leaves the local clock in use, and is not asked again on
// every lookup (each would cost a round trip more).
func TestAServerRefusingTimeIsNotAskedOnEveryLookup(t *testing.T) {
	kv := testKV(t)
	var asked atomic.Int32
	kv.Client.AddHook(timeRefused{&asked})
	kv.Clock = NewServerClock(kv.Client)
	r := Route{Tenant: "acme", Region: "eu", Backends: []string{"http://eu:80"}}
	if err := kv.Put(context.Background(), map[string]Route{"acme.example.com": r}); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if got, err := kv.Lookup(context.Background(), "acme.example.com"); err != nil || got.Tenant != "acme" {
			t.Fatalf("lookup on the local clock: %v, %v", got, err)
		}
	}
	if n := asked.Load(); n > 2 {
		t.Errorf("TIME asked %d times for 101 operations", n)
	}
}

// A server answering TIME an hour ahead is believed only as far as the bound: writers
// do not seal entries to live an hour longer.
func TestAServerAnsweringTimeAheadIsBounded(t *testing.T) {
	kv := testKV(t)
	kv.Client.AddHook(timeOff(time.Hour))
	skew := NewServerClock(kv.Client).Now(context.Background(), time.Now).Sub(time.Now())
	if skew < MaxClockSkew-time.Second || skew > MaxClockSkew+time.Second {
		t.Errorf("a clock an hour ahead is taken %v off, want %v (the bound)", skew, MaxClockSkew)
	}
}

// In a Redis Cluster the keys of one command must hash to one slot: a DEL of several
// hosts was refused (CROSSSLOT), so a synchronisation with two orphans failed every
// time, and a route that dropped two hostnames kept them in Redis until they expired.
// (One node holding every slot still refuses a command across slots.)
func TestSeveralHostsAreDeletedFromACluster(t *testing.T) {
	srv := testenv.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if info, _ := admin.ClusterInfo(ctx).Result(); strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the one-node cluster is not ok")
		}
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
	defer cluster.Close()
	kv := KV{Client: cluster, Key: []byte("test-hmac-key-0123456789abcdef0123456789"), TTL: time.Minute}
	r := Route{Tenant: "acme", Region: "eu"}
	all := map[string]Route{"a.example.com": r, "b.example.com": r, "c.example.com": r}
	if err := kv.Put(ctx, all); err != nil {
		t.Fatal(err)
	}
	if deleted, err := kv.Sync(ctx, map[string]Route{"c.example.com": r}); err != nil || deleted != 2 {
		t.Fatalf("a synchronisation with two orphans: %d deleted, %v", deleted, err)
	}
	if err := kv.Put(ctx, all); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "a.example.com", "b.example.com"); err != nil {
		t.Fatalf("deleting two hosts: %v", err)
	}
	for host := range all {
		_, err := kv.Lookup(ctx, host)
		if gone := errors.Is(err, ErrNotFound); gone != (host != "c.example.com") {
			t.Errorf("%s: %v", host, err)
		}
	}
}
