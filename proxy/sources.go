package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// HostnameIndex is the field index of TenantRoutes by hostname the cluster source
// needs; the operator registers it.
const HostnameIndex = "spec.hostnames"

// ClusterSource is the source of truth when the proxy runs in the manager: the
// manager's informer cache. It keeps answering while the API server is away.
type ClusterSource struct {
	Reader client.Reader
}

// Name implements Layer.
func (ClusterSource) Name() string { return "source" }

// Lookup implements Layer: the oldest TenantRoute claiming the host (the one that
// holds it) and its Region's backends.
func (s ClusterSource) Lookup(ctx context.Context, host string) (Route, error) {
	var routes v1.TenantRouteList
	if err := s.Reader.List(ctx, &routes, client.MatchingFields{HostnameIndex: host}); err != nil {
		return Route{}, fmt.Errorf("listing TenantRoutes of %s: %w", host, err)
	}
	var holder *v1.TenantRoute
	for i := range routes.Items {
		tr := &routes.Items[i]
		if holder == nil || tr.CreationTimestamp.Before(&holder.CreationTimestamp) ||
			(tr.CreationTimestamp.Equal(&holder.CreationTimestamp) && tr.Namespace+"/"+tr.Name < holder.Namespace+"/"+holder.Name) {
			holder = tr
		}
	}
	if holder == nil {
		return Route{}, ErrNotFound
	}
	r := Route{Tenant: holder.Spec.TenantID, Region: holder.Spec.Region}
	region := &v1.Region{}
	switch err := s.Reader.Get(ctx, client.ObjectKey{Name: holder.Spec.Region}, region); {
	case apierrors.IsNotFound(err):
		// Known tenant, unknown region: no backend, so a clear 503, never another region.
	case err != nil:
		return Route{}, fmt.Errorf("reading Region %s: %w", holder.Spec.Region, err)
	default:
		for _, b := range region.Spec.Backends {
			r.Backends = append(r.Backends, b.URL)
		}
	}
	return r, nil
}

// LookupHandler serves the read-only lookup endpoint standalone proxies use:
// GET /v1/routes?host=<host> answers 200 with the route as JSON, 404 when no
// TenantRoute claims the host, 400 for an invalid host.
func LookupHandler(src Layer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/routes" {
			http.NotFound(w, r)
			return
		}
		host, err := normalizeHost([]byte(r.URL.Query().Get("host")), nil)
		if err != nil {
			http.Error(w, `{"error":"invalid host"}`, http.StatusBadRequest)
			return
		}
		route, err := src.Lookup(r.Context(), string(host))
		w.Header().Set("Content-Type", "application/json")
		switch {
		case errors.Is(err, ErrNotFound):
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"no route for this host"}` + "\n"))
		case err != nil:
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		default:
			_ = json.NewEncoder(w).Encode(route)
		}
	})
}

// HTTPSource is the source of truth of a standalone proxy: the manager's lookup
// endpoint.
type HTTPSource struct {
	BaseURL string
	Client  *http.Client
}

// Name implements Layer.
func (HTTPSource) Name() string { return "source" }

// Lookup implements Layer.
func (s HTTPSource) Lookup(ctx context.Context, host string) (Route, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.BaseURL+"/v1/routes?host="+url.QueryEscape(host), nil)
	if err != nil {
		return Route{}, err
	}
	c := s.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return Route{}, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var r Route
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return Route{}, fmt.Errorf("decoding the lookup answer: %w", err)
		}
		return r, nil
	case http.StatusNotFound:
		return Route{}, ErrNotFound
	}
	return Route{}, fmt.Errorf("lookup endpoint answered %s", resp.Status)
}

// KeyPrefix namespaces the proxy's keys in the shared KV.
const KeyPrefix = "tenantroute:route:"

// RedisKV is the shared KV layer (the Workers KV of the original design) and its
// writer. Entries never expire on their own: the operator writes and deletes them.
type RedisKV struct {
	Client redis.UniversalClient
}

// Name implements Layer.
func (RedisKV) Name() string { return "redis" }

// Lookup implements Layer; a missing key is a miss (ErrNotFound), not an answer.
func (k RedisKV) Lookup(ctx context.Context, host string) (Route, error) {
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
func (k RedisKV) Put(ctx context.Context, routes map[string]Route) error {
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
func (k RedisKV) Delete(ctx context.Context, hosts ...string) error {
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
