package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// sharedFlags configure what the operator and the proxies share: Redis and the
// lookup endpoint. Secrets are read from files (mounted Secrets), never taken as flag
// values, which anyone on the node could read with ps.
type sharedFlags struct {
	redis        routes.RedisOptions
	redisAddrs   string
	hmacKeyFile  string
	entryTTL     time.Duration
	kvSync       time.Duration
	lookupSecret string
}

func bindSharedFlags(fs *flag.FlagSet, s *sharedFlags) {
	fs.StringVar(&s.redisAddrs, "redis-addr", "", "Redis shared by proxies, host:port (several, comma-separated: a Cluster, or Sentinels with --redis-master-name). Optional.")
	fs.StringVar(&s.redis.MasterName, "redis-master-name", "", "Redis Sentinel: the master's name; --redis-addr then lists the Sentinels.")
	fs.StringVar(&s.redis.Username, "redis-username", "", "Redis ACL user.")
	fs.StringVar(&s.redis.PasswordFile, "redis-password-file", "", "File holding the Redis password (AUTH).")
	fs.BoolVar(&s.redis.TLS, "redis-tls", false, "Speak TLS to Redis.")
	fs.StringVar(&s.redis.CAFile, "redis-ca-file", "", "CA bundle that signs Redis' certificate (with --redis-tls).")
	fs.StringVar(&s.hmacKeyFile, "redis-hmac-key-file", "", "File holding the key (at least 32 bytes) that authenticates the routes in Redis; the same for the operator and every proxy. Required with --redis-addr.")
	fs.DurationVar(&s.entryTTL, "redis-entry-ttl", routes.DefaultEntryTTL, "How long a route in Redis is believed; the operator writes every route again every third of it.")
	fs.DurationVar(&s.kvSync, "redis-sync-interval", 0, "How often the operator writes every route to Redis again and deletes those no TenantRoute grants (default: a third of --redis-entry-ttl).")
	fs.StringVar(&s.lookupSecret, "lookup-token-file", "", "File holding the lookup endpoint's bearer token; required to serve it (manager) and to use it (--mode=proxy).")
}

// kv returns the shared cache, or nil without --redis-addr.
func (s *sharedFlags) kv() (*routes.KV, error) {
	if s.redisAddrs == "" {
		return nil, nil
	}
	if s.hmacKeyFile == "" {
		return nil, errors.New("--redis-addr needs --redis-hmac-key-file: entries in Redis are authenticated")
	}
	key, err := routes.LoadKey(s.hmacKeyFile)
	if err != nil {
		return nil, err
	}
	s.redis.Addrs = strings.Split(s.redisAddrs, ",")
	client, err := routes.NewRedisClient(s.redis)
	if err != nil {
		return nil, err
	}
	if s.entryTTL < time.Second {
		return nil, fmt.Errorf("--redis-entry-ttl (%s) must be at least 1s", s.entryTTL)
	}
	if s.kvSync > 0 && s.kvSync >= s.entryTTL {
		return nil, fmt.Errorf("--redis-sync-interval (%s) must be shorter than --redis-entry-ttl (%s)", s.kvSync, s.entryTTL)
	}
	return &routes.KV{Client: client, Key: key, TTL: s.entryTTL, Rejected: proxy.ObserveKVRejected, Clock: routes.NewServerClock(client)}, nil
}

// lookupToken reads the lookup endpoint's token.
func (s *sharedFlags) lookupToken() ([]byte, error) {
	if s.lookupSecret == "" {
		return nil, errors.New("the lookup endpoint needs --lookup-token-file (or --lookup-bind-address=0 to turn it off)")
	}
	b, err := os.ReadFile(s.lookupSecret)
	if err != nil {
		return nil, fmt.Errorf("reading the lookup token: %w", err)
	}
	token := []byte(strings.TrimSpace(string(b)))
	if len(token) < 16 {
		return nil, fmt.Errorf("the lookup token in %s has %d bytes; at least 16 are needed", s.lookupSecret, len(token))
	}
	return token, nil
}
