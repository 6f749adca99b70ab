package proxy_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// TestKnownRoutesSurviveTheAPIServer: the embedded proxy reads routes from the
// manager's informer cache; with the API server stopped, known routes keep working,
// the first lookup of each included.
func TestKnownRoutesSurviveTheAPIServer(t *testing.T) {
	// The manager's open watches keep kube-apiserver from a graceful stop; it is killed
	// after this timeout, which is what this test wants anyway.
	env, cfg, err := testenv.Start(func(e *envtest.Environment) { e.ControlPlaneStopTimeout = 2 * time.Second })
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = env.Stop()
		}
	}()
	k8s, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "eu-west serves %s", r.Header.Get("X-Tenant-ID"))
	}))
	defer backend.Close()
	ctx := context.Background()
	for _, obj := range []client.Object{
		&v1.Region{ObjectMeta: metav1.ObjectMeta{Name: "eu-west"}, Spec: v1.RegionSpec{Backends: []v1.Backend{{URL: backend.URL}}}},
		&v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: "default"}, Spec: v1.TenantRouteSpec{
			TenantID: "acme", Region: "eu-west", Hostnames: []string{"acme.auth.example.com"}, Edges: []string{"cf"}}},
	} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	// The grant the operator would record: the proxy routes granted hostnames only.
	acme := &v1.TenantRoute{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "default", Name: "acme"}, acme); err != nil {
		t.Fatal(err)
	}
	acme.Status.TenantID = &v1.ClaimStatus{State: v1.ClaimGranted, Since: metav1.Now()}
	acme.Status.Hostnames = []v1.HostnameClaim{{Hostname: "acme.auth.example.com",
		ClaimStatus: v1.ClaimStatus{State: v1.ClaimGranted, Since: metav1.Now()}}}
	if err := k8s.Status().Update(ctx, acme); err != nil {
		t.Fatal(err)
	}

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: testenv.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	source, err := routes.NewSource(ctx, mgr.GetCache())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	// Routes live in memory for 100 ms only: after that, every lookup goes to the
	// informer cache, the source of truth.
	chain := proxy.NewChain(proxy.ChainOptions{TTL: 100 * time.Millisecond}, source)
	if err := mgr.Add(&proxy.Server{Proxy: proxy.New(chain, proxy.Options{}), Listen: addr}); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = mgr.Start(mctx) }()

	get := func() (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Host = "acme.auth.example.com"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b := make([]byte, 64)
		n, _ := resp.Body.Read(b)
		return resp.StatusCode, string(b[:n])
	}
	// The proxy listens once the manager's caches have synced. No lookup is made
	// before the API server stops: a replica that does not lead (whose controllers
	// watch nothing) must have everything a lookup reads by then.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the proxy never listened")
		}
		time.Sleep(50 * time.Millisecond)
	}

	_ = env.Stop()
	stopped = true
	if err := k8s.List(ctx, &v1.TenantRouteList{}); err == nil {
		t.Fatal("the API server still answers")
	}
	for i := range 50 {
		if code, body := get(); code != http.StatusOK || body != "eu-west serves acme" {
			t.Fatalf("request %d with the API server stopped: %d %q", i, code, body)
		}
		time.Sleep(20 * time.Millisecond) // past the in-memory TTL several times over
	}
}
