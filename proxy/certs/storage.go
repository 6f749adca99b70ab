package certs

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// RedisStorage keeps the ACME account, certificates and keys in Redis, so that every
// proxy replica and every restart share them: one replica obtains a hostname's
// certificate and the others load it. Anything that can reach Redis could read it, so
// each value is sealed with AES-256-GCM under a key derived from the shared cache's
// key, and bound to its storage key (a value moved to another key does not open).
//
// Locks are Redis keys set only if absent, with a token and an expiry that a holder
// keeps pushing back while it works; a replica that dies mid-order leaves a lock that
// expires within LockTTL.
type RedisStorage struct {
	kv   routes.KV
	aead cipher.AEAD

	mu    sync.Mutex
	locks map[string][]heldLock // by name, oldest first
}

type heldLock struct {
	token string
	stop  chan struct{}
}

const (
	storagePrefix = "tenantroute:tls:"
	lockPrefix    = "tenantroute:tls-lock:"
	// lockTTL is how long a lock outlives a holder that stopped refreshing it.
	lockTTL = 30 * time.Second
	// redisOpTimeout bounds each storage command: the lookup client's own timeouts
	// are tuned for routing, and certificates are a few kilobytes.
	redisOpTimeout = 2 * time.Second
)

// lockRefresh is how often a holder pushes its lock's expiry back (a variable for the
// tests).
var lockRefresh = lockTTL / 3

// NewRedisStorage returns the shared certificate storage over kv's client and key.
func NewRedisStorage(kv routes.KV) (*RedisStorage, error) {
	if len(kv.Key) < 32 {
		return nil, errors.New("certificate storage in Redis needs the shared cache's key (32 bytes or more)")
	}
	m := hmac.New(sha256.New, kv.Key)
	m.Write([]byte("tenantroute certificate storage v1"))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &RedisStorage{kv: kv, aead: aead, locks: map[string][]heldLock{}}, nil
}

func (s *RedisStorage) String() string { return "redis" }

func (s *RedisStorage) seal(key string, value []byte, modified time.Time) []byte {
	plain := make([]byte, 8, 8+len(value))
	binary.BigEndian.PutUint64(plain, uint64(modified.UnixNano()))
	plain = append(plain, value...)
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	_, _ = rand.Read(nonce)
	return s.aead.Seal(nonce, nonce, plain, []byte(key))
}

func (s *RedisStorage) open(key string, sealed []byte) ([]byte, time.Time, error) {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		storageUnreadable.Inc()
		return nil, time.Time{}, fmt.Errorf("certificate storage: %s is not a sealed value: %w", key, fs.ErrNotExist)
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(key))
	if err != nil || len(plain) < 8 {
		// As if absent: after the shared key is rotated, the account and the
		// certificates are obtained again and overwrite what no longer opens, instead
		// of every load failing until someone deletes the keys by hand.
		storageUnreadable.Inc()
		return nil, time.Time{}, fmt.Errorf("certificate storage: %s does not open with this key (written with another key, or tampered with): %w", key, fs.ErrNotExist)
	}
	return plain[8:], time.Unix(0, int64(binary.BigEndian.Uint64(plain[:8]))), nil
}

// Store implements certmagic.Storage.
func (s *RedisStorage) Store(ctx context.Context, key string, value []byte) error {
	opCtx, cancel := context.WithTimeout(ctx, redisOpTimeout)
	defer cancel()
	if err := s.kv.Client.Set(opCtx, storagePrefix+key, s.seal(key, value, time.Now()), 0).Err(); err != nil {
		return storageFailed(ctx, "write", fmt.Errorf("certificate storage: writing %s: %w", key, err))
	}
	return nil
}

func (s *RedisStorage) load(ctx context.Context, key string) ([]byte, time.Time, error) {
	opCtx, cancel := context.WithTimeout(ctx, redisOpTimeout)
	defer cancel()
	b, err := s.kv.Client.Get(opCtx, storagePrefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, time.Time{}, fs.ErrNotExist
	}
	if err != nil {
		return nil, time.Time{}, storageFailed(ctx, "read", fmt.Errorf("certificate storage: reading %s: %w", key, err))
	}
	return s.open(key, b)
}

// Load implements certmagic.Storage; a missing key is fs.ErrNotExist.
func (s *RedisStorage) Load(ctx context.Context, key string) ([]byte, error) {
	v, _, err := s.load(ctx, key)
	return v, err
}

// Delete implements certmagic.Storage: a key, or every key under it. A file is
// deleted by its name; only a name that was no file is looked for as a directory (a
// scan of the whole keyspace, which grows with every hostname: the library deletes a
// file after every challenge it solves).
func (s *RedisStorage) Delete(ctx context.Context, key string) error {
	opCtx, cancel := context.WithTimeout(ctx, redisOpTimeout)
	defer cancel()
	n, err := s.kv.Client.Del(opCtx, storagePrefix+key).Result()
	if err != nil {
		return storageFailed(ctx, "delete", fmt.Errorf("certificate storage: deleting %s: %w", key, err))
	}
	if n > 0 || isFileName(key) {
		return nil // a file has nothing under it
	}
	keys, err := s.kv.Keys(opCtx, storagePrefix+escapeGlob(key)+"/*")
	if err != nil {
		return storageFailed(ctx, "list", fmt.Errorf("certificate storage: listing %s: %w", key, err))
	}
	for _, k := range keys {
		// One key per command: in a Redis Cluster the keys live on different slots.
		if err := s.kv.Client.Del(opCtx, k).Err(); err != nil {
			return storageFailed(ctx, "delete", fmt.Errorf("certificate storage: deleting %s: %w", strings.TrimPrefix(k, storagePrefix), err))
		}
	}
	return nil
}

// isFileName reports a name the library gives files only (certificates, keys,
// metadata, challenge tokens): no directory has it.
func isFileName(key string) bool {
	return strings.HasSuffix(key, ".crt") || strings.HasSuffix(key, ".key") || strings.HasSuffix(key, ".json")
}

// Exists implements certmagic.Storage. A key is read and opened: one that does not
// open counts as absent, as for Load. (Answered by EXISTS, a certificate written with
// a rotated key existed but never loaded: the library saw it there and ordered
// nothing, and every handshake of its hostname failed until someone deleted the keys
// by hand.) Only a missing key is looked for as a directory (a scan, which the library
// needs rarely).
func (s *RedisStorage) Exists(ctx context.Context, key string) bool {
	opCtx, cancel := context.WithTimeout(ctx, redisOpTimeout)
	b, err := s.kv.Client.Get(opCtx, storagePrefix+key).Bytes()
	cancel()
	if err == nil {
		_, _, err = s.open(key, b)
		return err == nil
	}
	if !errors.Is(err, redis.Nil) {
		_ = storageFailed(ctx, "read", err)
		return false
	}
	if isFileName(key) {
		return false
	}
	_, err = s.Stat(ctx, key)
	return err == nil
}

// List implements certmagic.Storage.
func (s *RedisStorage) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	opCtx, cancel := context.WithTimeout(ctx, redisOpTimeout)
	defer cancel()
	dir := strings.TrimSuffix(path, "/") + "/"
	keys, err := s.kv.Keys(opCtx, storagePrefix+escapeGlob(dir)+"*")
	if err != nil {
		return nil, storageFailed(ctx, "list", fmt.Errorf("certificate storage: listing %s: %w", path, err))
	}
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		k = strings.TrimPrefix(k, storagePrefix)
		if !recursive {
			// Only the entries directly in path: a deeper key names its directory.
			rest := strings.TrimPrefix(k, dir)
			if i := strings.IndexByte(rest, '/'); i >= 0 {
				k = dir + rest[:i]
			}
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		return nil, fs.ErrNotExist
	}
	return out, nil
}

// Stat implements certmagic.Storage.
func (s *RedisStorage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	v, modified, err := s.load(ctx, key)
	if err == nil {
		return certmagic.KeyInfo{Key: key, Modified: modified, Size: int64(len(v)), IsTerminal: true}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return certmagic.KeyInfo{}, err
	}
	if _, err := s.List(ctx, key, false); err != nil {
		return certmagic.KeyInfo{}, err
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

var (
	// unlockScript deletes a lock only if this holder still owns it.
	unlockScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)
	// refreshScript pushes a lock's expiry back only if this holder still owns it.
	refreshScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end return 0`)
)

// Lock implements certmagic.Locker: it waits until name is free or ctx ends.
func (s *RedisStorage) Lock(ctx context.Context, name string) error {
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	key := lockPrefix + name
	wait := 100 * time.Millisecond
	for {
		opCtx, cancel := context.WithTimeout(ctx, redisOpTimeout)
		ok, err := s.kv.Client.SetNX(opCtx, key, token, lockTTL).Result()
		cancel()
		if err == nil && ok {
			break
		}
		if err != nil {
			_ = storageFailed(ctx, "lock", err)
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("certificate storage: locking %s: %w", name, err)
			}
			return fmt.Errorf("certificate storage: waiting for the lock on %s: %w", name, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
	stop := make(chan struct{})
	s.mu.Lock()
	holders := s.locks[name]
	for i := range holders {
		// This process held the lock before and lost it (its refreshes failed while
		// Redis was away, and it expired): that holder's refresher stops here. Its
		// Unlock, which comes first, is given its own token, which no longer matches:
		// it must not release the lock taken since.
		if holders[i].stop != nil {
			close(holders[i].stop)
			holders[i].stop = nil
		}
	}
	s.locks[name] = append(holders, heldLock{token: token, stop: stop})
	s.mu.Unlock()
	every := lockRefresh
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), redisOpTimeout)
				kept, err := refreshScript.Run(ctx, s.kv.Client, []string{key}, token, lockTTL.Milliseconds()).Int()
				cancel()
				switch {
				case err != nil:
					// Past lockTTL without a refresh another replica may take the lock.
					storageErrors.WithLabelValues("refresh").Inc()
				case kept == 0:
					select {
					case <-stop:
						return // released meanwhile: Unlock stops the refresh before it deletes
					default:
					}
					// Gone (expired while Redis was away, or evicted): another replica
					// may be ordering the same certificate now. Counted once; there is
					// nothing left to refresh.
					storageErrors.WithLabelValues("refresh").Inc()
					return
				}
			}
		}
	}()
	return nil
}

// Unlock implements certmagic.Locker.
func (s *RedisStorage) Unlock(ctx context.Context, name string) error {
	// certmagic's Unlock names no holder: the oldest is released (whose lock, if a
	// later Lock took the name, has expired and is left alone by its token).
	s.mu.Lock()
	holders := s.locks[name]
	if len(holders) == 0 {
		s.mu.Unlock()
		return fmt.Errorf("certificate storage: %s is not locked by this proxy", name)
	}
	held := holders[0]
	if len(holders) == 1 {
		delete(s.locks, name)
	} else {
		s.locks[name] = holders[1:]
	}
	s.mu.Unlock()
	if held.stop != nil {
		close(held.stop)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisOpTimeout)
	defer cancel()
	if err := unlockScript.Run(ctx, s.kv.Client, []string{lockPrefix + name}, held.token).Err(); err != nil {
		return storageFailed(context.Background(), "unlock", fmt.Errorf("certificate storage: unlocking %s (it expires within %s): %w", name, lockTTL, err))
	}
	return nil
}

// escapeGlob escapes what SCAN's MATCH would take for a pattern.
func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
