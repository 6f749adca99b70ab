package routes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyPrefix namespaces the proxy's keys in the shared KV.
const KeyPrefix = "tenantroute:route:"

// KV is the shared cache (the Workers KV of the original design): the operator
// writes it, proxies read it. Entries never expire on their own: the operator writes and deletes them.
type KV struct {
	Client redis.UniversalClient
}

// Name implements Layer.
func (KV) Name() string { return "redis" }

// Lookup implements Layer; a missing key is a miss (ErrNotFound), not an answer.
func (k KV) Lookup(ctx context.Context, host string) (Route, error) {
	b, err := k.Client.Get(ctx, KeyPrefix+host).Bytes()
	if errors.Is(err, redis.Nil) {
		return Route{}, ErrNotFound
	}
	if err != nil {
		return Route{}, err
	}
	var r Route
	if err := json.Unmarshal(b, &r); err != nil {
		return Route{}, fmt.Errorf("decoding %s: %w", KeyPrefix+host, err)
	}
	return r, nil
}

// Put writes the routes of hosts; Delete removes hosts.
func (k KV) Put(ctx context.Context, routes map[string]Route) error {
	pipe := k.Client.Pipeline()
	for host, r := range routes {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		pipe.Set(ctx, KeyPrefix+host, b, 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// Delete removes hosts from the KV.
func (k KV) Delete(ctx context.Context, hosts ...string) error {
	if len(hosts) == 0 {
		return nil
	}
	keys := make([]string, len(hosts))
	for i, h := range hosts {
		keys[i] = KeyPrefix + h
	}
	return k.Client.Del(ctx, keys...).Err()
}

// NewRedisClient returns a client with timeouts short enough that a dead Redis costs
// a request milliseconds, and few retries: the chain falls through to the source.
func NewRedisClient(addr string) redis.UniversalClient {
	return redis.NewClient(&redis.Options{
		Addr:          addr,
		DialTimeout:   200 * time.Millisecond,
		ReadTimeout:   100 * time.Millisecond,
		WriteTimeout:  100 * time.Millisecond,
		MaxRetries:    -1,
		DialerRetries: 1,
		PoolSize:      64,
	})
}
