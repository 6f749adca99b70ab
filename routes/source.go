package routes

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// grantedIndex names the index of TenantRoutes by the hostnames their status says
// they were granted.
const grantedIndex = "status.grantedHostnames"

// NewSource returns the source of truth reading c, a manager's cache; it indexes the
// cached TenantRoutes by granted hostname (grantedIndex), so call it once, before the
// cache starts.
func NewSource(ctx context.Context, c cache.Cache) (Source, error) {
	granted, err := NewHashedIndex(ctx, c, grantedIndex, Granted)
	if err != nil {
		return Source{}, err
	}
	// Regions are watched from the start too, so that they are synced before a proxy
	// serves. Otherwise a replica that does not lead (the controllers watch Regions
	// only on the leader) would start the watch at its first lookup, within the
	// lookup's budget, and fail every lookup while the API server is away.
	if _, err := c.GetInformer(ctx, &v1.Region{}, cache.BlockUntilSynced(false)); err != nil {
		return Source{}, fmt.Errorf("the Region informer: %w", err)
	}
	return Source{Reader: c, Granted: granted}, nil
}

// OnGrantChange calls changed, from c's TenantRoute informer, with every hostname whose
// grant a route gained or lost (Granted), so that a proxy drops what it cached of it: a
// hostname handed to another tenant would otherwise be served to the former one until
// its cached route expired, while DNS and the other proxies already say otherwise.
func OnGrantChange(ctx context.Context, c cache.Cache, changed func(host string)) error {
	inf, err := c.GetInformer(ctx, &v1.TenantRoute{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("the TenantRoute informer: %w", err)
	}
	diff := func(from, to any) {
		var before, after []string
		if tr, ok := from.(*v1.TenantRoute); ok {
			before = Granted(tr)
		}
		if tr, ok := to.(*v1.TenantRoute); ok {
			after = Granted(tr)
		}
		for _, h := range before {
			if !slices.Contains(after, h) {
				changed(h)
			}
		}
		for _, h := range after {
			if !slices.Contains(before, h) {
				changed(h)
			}
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { diff(nil, obj) },
		UpdateFunc: diff,
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			diff(obj, nil)
		},
	})
	if err != nil {
		return fmt.Errorf("watching the grants: %w", err)
	}
	return nil
}

// Source is the source of truth: the TenantRoute granted a host, and its Region's
// backends, read from a cache (the manager's informers), so that it keeps answering
// while the API server is away.
type Source struct {
	// Reader reads Regions.
	Reader client.Reader
	// Granted finds the TenantRoutes by granted hostname.
	Granted *Index
}

// Name names the source in the proxy's metrics.
func (Source) Name() string { return "source" }

// InMemory tells the proxy that the source answers from the informers' cache, without
// waiting on the network (proxy.InMemory).
func (Source) InMemory() bool { return true }

// Lookup returns the route of the TenantRoute granted host, or ErrNotFound. It reads
// the cache in place: a lookup copies no object.
func (s Source) Lookup(ctx context.Context, host string) (Route, error) {
	candidates, err := s.Granted.Routes(ctx, host)
	if err != nil {
		return Route{}, err
	}
	holder := Holder(candidates, host)
	if holder == nil {
		return Route{}, ErrNotFound
	}
	r := Route{Tenant: holder.Spec.TenantID, Region: holder.Spec.Region}
	region := &v1.Region{}
	switch err := s.Reader.Get(ctx, client.ObjectKey{Name: holder.Spec.Region}, region, client.UnsafeDisableDeepCopy); {
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

// Lookup is anything routes can be looked up in.
type Lookup interface {
	Lookup(ctx context.Context, host string) (Route, error)
}

// LookupHandler serves the read-only lookup endpoint standalone proxies use:
// GET /v1/routes?host=<host> with "Authorization: Bearer <token>" answers 200 with the
// route as JSON, 404 when no TenantRoute is granted the host, 400 for an invalid host,
// 401 without the token. Errors say nothing of the operator's internals. normalize
// canonicalises the host as the proxy does.
func LookupHandler(src Lookup, token []byte, normalize func(string) (string, bool)) http.Handler {
	want := sha256.Sum256(append([]byte("Bearer "), token...))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/routes" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		// Compared as digests in constant time: neither the token nor its length leaks.
		got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		if len(token) == 0 || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"a valid bearer token is required"}` + "\n"))
			return
		}
		host, ok := normalize(r.URL.Query().Get("host"))
		if !ok {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"invalid host"}` + "\n"))
			return
		}
		route, err := src.Lookup(r.Context(), host)
		switch {
		case errors.Is(err, ErrNotFound):
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"` + notFoundMessage + `"}` + "\n"))
		case err != nil:
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"error":"the route cannot be looked up right now"}` + "\n"))
		default:
			_ = json.NewEncoder(w).Encode(route)
		}
	})
}

// notFoundMessage is the lookup endpoint's answer for a host without a route; a
// proxy believes a 404 only with it.
const notFoundMessage = "no route for this host"

// HTTPSource is the source of truth of a standalone proxy: the manager's lookup
// endpoint.
type HTTPSource struct {
	BaseURL string
	Token   []byte // the lookup endpoint's bearer token
	Client  *http.Client
}

// Name names the source in the proxy's metrics.
func (HTTPSource) Name() string { return "source" }

// Lookup asks the lookup endpoint.
func (s HTTPSource) Lookup(ctx context.Context, host string) (Route, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.BaseURL+"/v1/routes?host="+url.QueryEscape(host), nil)
	if err != nil {
		return Route{}, err
	}
	req.Header.Set("Authorization", "Bearer "+string(s.Token))
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
		// Only the endpoint's own answer means "no route": a 404 from anything else on
		// the way (a wrong path in the URL, an ingress's default backend, a gateway's
		// JSON) taken as one would drop every route the proxy knows and answer 404 for
		// all.
		var answer struct {
			Error string `json:"error"`
		}
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" &&
			json.NewDecoder(io.LimitReader(resp.Body, 1<<10)).Decode(&answer) == nil && answer.Error == notFoundMessage {
			return Route{}, ErrNotFound
		}
	}
	return Route{}, fmt.Errorf("lookup endpoint answered %s", resp.Status)
}
