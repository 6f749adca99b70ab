package routes

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// fixedLookup knows one host.
type fixedLookup struct{}

func (fixedLookup) Lookup(_ context.Context, host string) (Route, error) {
	if host == "shop.example.com" {
		return Route{Tenant: "shop", Region: "eu"}, nil
	}
	return Route{}, ErrNotFound
}

// Only the lookup endpoint's own answer says a host has no route. A 404 from anything
// else on the way (a wrong path in --lookup-url, an ingress's default backend) is an
// error: the proxy keeps serving what it knows instead of dropping every route.
func TestOnlyTheLookupEndpointSaysNotFound(t *testing.T) {
	token := []byte("t0ken")
	endpoint := httptest.NewServer(LookupHandler(fixedLookup{}, token, func(h string) (string, bool) { return h, h != "" }))
	defer endpoint.Close()
	ctx := context.Background()

	src := HTTPSource{BaseURL: endpoint.URL, Token: token}
	if r, err := src.Lookup(ctx, "shop.example.com"); err != nil || r.Tenant != "shop" {
		t.Fatalf("a routed host: %+v, %v", r, err)
	}
	if _, err := src.Lookup(ctx, "other.example.com"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a host without a route: %v, want ErrNotFound", err)
	}

	ingress := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<html>default backend - 404</html>"))
	}))
	defer ingress.Close()
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"message":"no Route matched with those values"}`))
	}))
	defer gateway.Close()
	for what, base := range map[string]string{
		"a base URL with a path the endpoint does not serve": endpoint.URL + "/api",
		"an ingress's default backend":                       ingress.URL,
		"a gateway's JSON":                                   gateway.URL,
	} {
		_, err := HTTPSource{BaseURL: base, Token: token}.Lookup(ctx, "shop.example.com")
		if err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want an error other than ErrNotFound", what, err)
		}
	}
}
