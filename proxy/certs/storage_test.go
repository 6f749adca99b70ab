package certs

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// TestRedisStorageKeepsCertmagicsContract: what the ACME library expects of a
// storage (missing keys are fs.ErrNotExist, directories are prefixes), values
// unreadable to anyone without the key and not movable between keys, and locks that
// exclude across replicas.
func TestRedisStorageKeepsCertmagicsContract(t *testing.T) {
	r := testenv.StartRedis(t)
	kv := routes.KV{Client: redis.NewClient(&redis.Options{Addr: r.Addr()}), Key: []byte(strings.Repeat("k", 32))}
	s, err := NewRedisStorage(kv)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for k, v := range map[string]string{
		"certificates/ca/a.test/a.test.crt": "CERT-A", "certificates/ca/a.test/a.test.key": "KEY-A",
		"certificates/ca/b.test/b.test.crt": "CERT-B", "acme/ca/users/x/x.json": "USER",
	} {
		if err := s.Store(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := s.Load(ctx, "certificates/ca/a.test/a.test.key"); err != nil || string(v) != "KEY-A" {
		t.Fatalf("Load: %q %v", v, err)
	}
	if _, err := s.Load(ctx, "certificates/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Load of a missing key: %v, want fs.ErrNotExist", err)
	}
	// The private key is not in Redis in clear.
	raw, _ := kv.Client.Get(ctx, storagePrefix+"certificates/ca/a.test/a.test.key").Bytes()
	if len(raw) == 0 || bytes.Contains(raw, []byte("KEY-A")) {
		t.Fatalf("stored in clear: %q", raw)
	}
	// A value copied to another key (one certificate's key served for another name)
	// does not open.
	kv.Client.Set(ctx, storagePrefix+"certificates/ca/b.test/b.test.key", raw, 0)
	if _, err := s.Load(ctx, "certificates/ca/b.test/b.test.key"); err == nil {
		t.Fatal("a value moved to another key was accepted")
	}
	// After the shared key is rotated, what no longer opens is absent for Exists as for
	// Load: the library orders a certificate only where Exists says there is none.
	rotated, err := NewRedisStorage(routes.KV{Client: kv.Client, Key: []byte(strings.Repeat("r", 32))})
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Exists(ctx, "certificates/ca/a.test/a.test.crt") || !s.Exists(ctx, "certificates/ca/a.test/a.test.crt") {
		t.Fatal("Exists of a value that does not open with the storage's key")
	}
	list, err := s.List(ctx, "certificates/ca", false)
	slices.Sort(list)
	if err != nil || !slices.Equal(list, []string{"certificates/ca/a.test", "certificates/ca/b.test"}) {
		t.Fatalf("List: %v %v", list, err)
	}
	if list, _ := s.List(ctx, "certificates", true); len(list) != 4 {
		t.Fatalf("recursive List: %v", list)
	}
	if info, err := s.Stat(ctx, "certificates/ca/a.test"); err != nil || info.IsTerminal {
		t.Fatalf("Stat of a directory: %+v %v", info, err)
	}
	if info, err := s.Stat(ctx, "certificates/ca/a.test/a.test.crt"); err != nil || !info.IsTerminal || info.Size != 6 || time.Since(info.Modified) > time.Minute {
		t.Fatalf("Stat of a key: %+v %v", info, err)
	}
	if err := s.Delete(ctx, "certificates/ca/a.test"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/ca/a.test/a.test.crt") || s.Exists(ctx, "certificates/ca/a.test") || !s.Exists(ctx, "acme/ca/users/x/x.json") {
		t.Fatal("Delete of a directory")
	}

	// Locks exclude across replicas (two storages on one Redis).
	other, err := NewRedisStorage(routes.KV{Client: redis.NewClient(&redis.Options{Addr: r.Addr()}), Key: kv.Key})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Lock(ctx, "issue_cert_a.test"); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := other.Lock(waitCtx, "issue_cert_a.test"); err == nil {
		t.Fatal("a second replica took a held lock")
	}
	got := make(chan error, 1)
	go func() { got <- other.Lock(ctx, "issue_cert_a.test") }()
	time.Sleep(200 * time.Millisecond)
	if err := s.Unlock(ctx, "issue_cert_a.test"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the lock was not handed over after Unlock")
	}
	// Unlock by a replica that does not hold it leaves the holder's lock alone.
	if err := s.Unlock(ctx, "issue_cert_a.test"); err == nil {
		t.Fatal("Unlock of a lock held by another replica succeeded")
	}
	if n, _ := kv.Client.Exists(ctx, lockPrefix+"issue_cert_a.test").Result(); n != 1 {
		t.Fatal("the holder's lock was removed by another replica")
	}
	if ttl, _ := kv.Client.PTTL(ctx, lockPrefix+"issue_cert_a.test").Result(); ttl <= 0 || ttl > lockTTL {
		t.Fatalf("lock TTL %s: a dead holder's lock must expire", ttl)
	}

	// A holder whose lock expired (its refreshes failed) and a later holder in the same
	// process: the first Unlock must not release the lock the second took.
	if err := s.Lock(ctx, "issue_cert_b.test"); err != nil {
		t.Fatal(err)
	}
	kv.Client.Del(ctx, lockPrefix+"issue_cert_b.test") // expired
	if err := s.Lock(ctx, "issue_cert_b.test"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unlock(ctx, "issue_cert_b.test"); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := other.Lock(waitCtx, "issue_cert_b.test"); err == nil {
		t.Fatal("the expired holder's Unlock released the lock taken since")
	}
	if err := s.Unlock(ctx, "issue_cert_b.test"); err != nil {
		t.Fatal(err)
	}
	if err := other.Lock(ctx, "issue_cert_b.test"); err != nil {
		t.Fatalf("after both Unlocks: %v", err)
	}
	// Released, so that their refreshes stop before this test's Redis does.
	for _, name := range []string{"issue_cert_a.test", "issue_cert_b.test"} {
		if err := other.Unlock(ctx, name); err != nil {
			t.Error(err)
		}
	}
}

// scanCounter counts the SCAN commands a client sends.
type scanCounter struct{ scans int }

func (*scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "scan" {
			c.scans++
		}
		return next(ctx, cmd)
	}
}
func (*scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The library deletes a file after every challenge it solves (its token) and on
// every cleaning: a scan of the whole keyspace each time, which grows with every
// hostname's route and certificate, cost Redis a pass over all of them per order
// and, past the storage's 2 s budget, failed the delete. A file is deleted by its
// name; only a directory is looked for under its prefix.
func TestDeletingAFileScansNothing(t *testing.T) {
	r := testenv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: r.Addr()})
	counter := &scanCounter{}
	client.AddHook(counter)
	s, err := NewRedisStorage(routes.KV{Client: client, Key: []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"acme/ca/challenge_tokens/a.test.json", "ocsp/a.test-0123abcd",
		"certificates/ca/b.test/b.test.crt", "certificates/ca/b.test/b.test.key"} {
		if err := s.Store(ctx, k, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"acme/ca/challenge_tokens/a.test.json", "ocsp/a.test-0123abcd", "acme/ca/challenge_tokens/gone.test.json"} {
		if err := s.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%s): %v", k, err)
		}
		if n, _ := client.Exists(ctx, storagePrefix+k).Result(); n != 0 {
			t.Errorf("%s is still there", k)
		}
	}
	if counter.scans != 0 {
		t.Errorf("deleting three files scanned the keyspace %d times, want none", counter.scans)
	}
	// A directory is still deleted with everything under it.
	if err := s.Delete(ctx, "certificates/ca/b.test"); err != nil {
		t.Fatal(err)
	}
	if s.Exists(ctx, "certificates/ca/b.test/b.test.crt") || s.Exists(ctx, "certificates/ca/b.test/b.test.key") {
		t.Error("a directory's keys outlived its Delete")
	}
}

// A storage that cannot write (Redis full) or answer (Redis gone) is counted by
// operation, one count a failed command; a caller that gave up is not the storage's
// failure. The library only logs such errors, and a certificate that cannot be written
// is ordered again by every replica and at every restart, into the CA's
// duplicate-certificate limit, with nothing to alert on.
func TestStorageFailuresAreCounted(t *testing.T) {
	s, kv, r := startStorage(t)
	ctx := context.Background()
	const key = "certificates/ca/full.test/full.test.crt"
	if err := s.Store(ctx, key, []byte("CERT")); err != nil {
		t.Fatal(err)
	}
	if err := s.Lock(ctx, "issue_cert_held.test"); err != nil {
		t.Fatal(err)
	}
	// counts runs f and checks what it added to each operation's failures. A lock's
	// refresh runs in the background (every 10 s), and left out.
	counts := func(what string, f func() error, want map[string]float64) {
		t.Helper()
		ops := []string{"write", "read", "delete", "list", "lock", "unlock"}
		before := map[string]float64{}
		for _, op := range ops {
			before[op] = testutil.ToFloat64(storageErrors.WithLabelValues(op))
		}
		if err := f(); err == nil {
			t.Errorf("%s: no error", what)
		}
		for _, op := range ops {
			if got := testutil.ToFloat64(storageErrors.WithLabelValues(op)) - before[op]; got != want[op] {
				t.Errorf("%s: %v %s failures counted, want %v", what, got, op, want[op])
			}
		}
	}
	absentIsNoError := func(err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}

	// Redis full, as at maxmemory with no eviction: writes are refused, reads served.
	if err := kv.Client.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	counts("a write to a full Redis", func() error { return s.Store(ctx, key+".new", []byte("CERT")) }, map[string]float64{"write": 1})
	// A lock is tried again until its caller gives up: each refused try counts (tries
	// at 0, 100, 300 and 700 ms within the second waited; fewer on a busy machine).
	locks := testutil.ToFloat64(storageErrors.WithLabelValues("lock"))
	lockCtx, cancel := context.WithTimeout(ctx, time.Second)
	if err := s.Lock(lockCtx, "issue_cert_full.test"); err == nil {
		t.Error("a full Redis gave a lock")
	}
	cancel()
	if n := testutil.ToFloat64(storageErrors.WithLabelValues("lock")) - locks; n < 1 || n > 4 {
		t.Errorf("a lock refused for the second its caller waited: %v failures counted, want one a try (1 to 4)", n)
	}
	if v, err := s.Load(ctx, key); err != nil || string(v) != "CERT" {
		t.Errorf("a full Redis's read: %q, %v", v, err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	counts("a read its caller gave up", func() error { _, err := s.Load(canceled, key); return err }, nil)

	// Redis gone.
	r.Kill()
	counts("Load", func() error { _, err := s.Load(ctx, key); return absentIsNoError(err) }, map[string]float64{"read": 1})
	counts("Stat", func() error { _, err := s.Stat(ctx, key); return absentIsNoError(err) }, map[string]float64{"read": 1})
	counts("Exists", func() error {
		if s.Exists(ctx, key) {
			return nil
		}
		return errors.New("absent")
	}, map[string]float64{"read": 1})
	counts("List", func() error { _, err := s.List(ctx, "certificates", true); return absentIsNoError(err) }, map[string]float64{"list": 1})
	counts("Delete", func() error { return s.Delete(ctx, key) }, map[string]float64{"delete": 1})
	counts("Unlock", func() error { return s.Unlock(ctx, "issue_cert_held.test") }, map[string]float64{"unlock": 1})
}

// A held lock found gone at its refresh (expired while Redis was away, or evicted) is
// counted once, and no longer refreshed: another replica may be ordering the same
// certificate. The refresh script answered 0 and nothing said so.
func TestALostLockIsCounted(t *testing.T) {
	s, kv, _ := startStorage(t)
	defer func(d time.Duration) { lockRefresh = d }(lockRefresh)
	lockRefresh = 50 * time.Millisecond
	ctx := context.Background()
	refreshes := storageErrors.WithLabelValues("refresh")
	before := testutil.ToFloat64(refreshes)
	if err := s.Lock(ctx, "issue_cert_lost.test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // refreshed, kept
	if n := testutil.ToFloat64(refreshes) - before; n != 0 {
		t.Fatalf("%v refresh failures counted while the lock was held", n)
	}
	kv.Client.Del(ctx, lockPrefix+"issue_cert_lost.test") // evicted
	time.Sleep(400 * time.Millisecond)
	if n := testutil.ToFloat64(refreshes) - before; n != 1 {
		t.Errorf("a lock found gone: %v refresh failures counted, want 1", n)
	}
	if err := s.Unlock(ctx, "issue_cert_lost.test"); err != nil {
		t.Error(err)
	}
	// A lock released while a refresh is under way is not lost: Unlock's delete can
	// land before the refresh reads the key.
	lockRefresh = time.Millisecond
	before = testutil.ToFloat64(refreshes)
	for range 200 {
		if err := s.Lock(ctx, "issue_cert_released.test"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		if err := s.Unlock(ctx, "issue_cert_released.test"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := testutil.ToFloat64(refreshes) - before; n != 0 {
		t.Errorf("200 locks released while refreshed: %v counted lost, want none", n)
	}
}

// startStorage is a storage over a Redis of the test's own, with the production
// client's settings (no retries: one command, one attempt).
func startStorage(t *testing.T) (*RedisStorage, routes.KV, *testenv.Redis) {
	t.Helper()
	r := testenv.StartRedis(t)
	kv := routes.KV{Client: redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1}), Key: []byte(strings.Repeat("k", 32))}
	s, err := NewRedisStorage(kv)
	if err != nil {
		t.Fatal(err)
	}
	return s, kv, r
}
