package proxy

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// backend is a region's backend that says who it is and what it was sent.
func backend(t *testing.T, name string) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/stream":
			for i := range 3 {
				fmt.Fprintf(w, "chunk %d\n", i)
				w.(http.Flusher).Flush()
				time.Sleep(200 * time.Millisecond)
			}
			return
		case "/upload":
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d bytes", n)
			return
		case "/ws":
			conn, rw, _ := w.(http.Hijacker).Hijack()
			defer conn.Close()
			fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nX-Backend: %s\r\n\r\n", name)
			rw.Flush()
			buf := make([]byte, 4)
			if _, err := io.ReadFull(rw, buf); err == nil {
				_, _ = conn.Write(buf)
			}
			return
		}
		w.Header().Set("Connection", "X-Internal")
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Seen-Tenant", strings.Join(r.Header.Values("X-Tenant-ID"), ","))
		w.Header().Set("X-Seen-For", strings.Join(r.Header.Values("X-Forwarded-For"), ","))
		w.Header().Set("X-Seen-Host", r.Header.Get("X-Forwarded-Host")+"|"+r.Host)
		w.Header().Set("X-Seen-Proto", r.Header.Get("X-Forwarded-Proto"))
		w.Header().Set("X-Seen-Forwarded", strings.Join(r.Header.Values("Forwarded"), ","))
		w.Header().Set("X-Seen-Hop", r.Header.Get("X-Hop")+"|"+r.Header.Get("Keep-Alive"))
		fmt.Fprint(w, name)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// testEngine is the engine the tests serve the proxy with: TENANTROUTE_PROXY_ENGINE
// (loop or fasthttp), or the binary's default; make test runs the suite with each.
var testEngine = cmp.Or(os.Getenv("TENANTROUTE_PROXY_ENGINE"), DefaultEngine)

type testProxy struct {
	p      *Proxy
	url    string
	src    *fakeLayer
	client *http.Client
}

func startProxy(t testing.TB, routes map[string]Route, opts Options) *testProxy {
	src := &fakeLayer{name: "source", routes: routes}
	tp := serveProxy(t, New(NewChain(ChainOptions{}, src), opts))
	tp.src = src
	return tp
}

// serveProxy serves p on a local port until the test ends.
func serveProxy(t testing.TB, p *Proxy) *testProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if testEngine == EngineLoop {
		p.opts.Engine = EngineLoop
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = p.ServeUntil(ctx, ln, nil) }()
		t.Cleanup(func() { p.StopNow(); cancel(); <-done })
	} else {
		srv := p.newServer()
		go func() { _ = srv.Serve(p.Listener(ln)) }()
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return &testProxy{p: p, url: "http://" + ln.Addr().String(), client: &http.Client{Timeout: 10 * time.Second}}
}

func (tp *testProxy) get(t *testing.T, host, path string, header http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, tp.url+path, nil)
	req.Host = host
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := tp.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// dial opens a raw connection to the proxy, for requests net/http would not send.
func (tp *testProxy) dial(t *testing.T) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(tp.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	return conn
}

func body(t *testing.T, resp *http.Response) string {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestForwardsToTheTenantsRegion(t *testing.T) {
	euA, _ := backend(t, "eu-west-a")
	us, _ := backend(t, "us-east-a")
	tp := startProxy(t, map[string]Route{
		"acme.auth.example.com":   {Tenant: "acme", Region: "eu-west", Backends: []string{euA.URL}},
		"globex.auth.example.com": {Tenant: "globex", Region: "us-east", Backends: []string{us.URL}},
	}, Options{})

	resp := tp.get(t, "ACME.auth.example.com.:80", "/", http.Header{
		"X-Forwarded-For": {"6.6.6.6"}, "Forwarded": {"for=6.6.6.6"},
		"Connection": {"X-Hop"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"},
	})
	if got := body(t, resp); resp.StatusCode != 200 || got != "eu-west-a" {
		t.Fatalf("acme: %d %q", resp.StatusCode, got)
	}
	checks := map[string]string{
		"X-Seen-Tenant":    "acme",
		"X-Seen-For":       "127.0.0.1",
		"X-Seen-Host":      "acme.auth.example.com.:80|acme.auth.example.com.:80", // net/http lowercases the Host it sends
		"X-Seen-Proto":     "http",
		"X-Seen-Forwarded": `for=127.0.0.1;host="acme.auth.example.com.:80";proto=http`,
		"X-Seen-Hop":       "|",
		"X-Internal":       "",
	}
	for h, want := range checks {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if got := body(t, tp.get(t, "globex.auth.example.com", "/", nil)); got != "us-east-a" {
		t.Errorf("globex reached %q", got)
	}
}

func TestHostErrors(t *testing.T) {
	tp := startProxy(t, map[string]Route{}, Options{})
	if resp := tp.get(t, "bad_host.example.com", "/", nil); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("invalid host: %d", resp.StatusCode)
	}
	if resp := tp.get(t, "nobody.example.com", "/", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown host: %d", resp.StatusCode)
	}
	tp.src.set(errDown, 0)
	if resp := tp.get(t, "other.example.com", "/", nil); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("lookup impossible: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestRoundRobinRetryAndResidency(t *testing.T) {
	a, hitsA := backend(t, "a")
	b, hitsB := backend(t, "b")
	other, hitsOther := backend(t, "other-region")
	_ = other
	dead := "http://127.0.0.1:1"
	tp := startProxy(t, map[string]Route{
		"acme.example.com":  {Tenant: "acme", Region: "eu-west", Backends: []string{a.URL, b.URL}},
		"flaky.example.com": {Tenant: "flaky", Region: "eu-west", Backends: []string{dead, a.URL}},
		"down.example.com":  {Tenant: "down", Region: "ap-south", Backends: []string{dead}},
		"post.example.com":  {Tenant: "post", Region: "ap-south", Backends: []string{"http://127.0.0.1:2"}},
	}, Options{})
	for range 10 {
		if resp := tp.get(t, "acme.example.com", "/", nil); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if hitsA.Load() != 5 || hitsB.Load() != 5 {
		t.Errorf("round robin: %d and %d", hitsA.Load(), hitsB.Load())
	}
	// A dead backend: idempotent requests are retried on the other backend of the region.
	for range 6 {
		if resp := tp.get(t, "flaky.example.com", "/", nil); resp.StatusCode != 200 {
			t.Fatalf("GET with one dead backend: %d", resp.StatusCode)
		}
	}
	// A backend that cannot be connected to was sent nothing: even a POST goes on to
	// the next backend of the region; with none left it is a 503.
	for host, want := range map[string]int{"flaky.example.com": http.StatusOK, "post.example.com": http.StatusServiceUnavailable} {
		post, _ := http.NewRequest(http.MethodPost, tp.url+"/", strings.NewReader("x"))
		post.Host = host
		if resp, err := tp.client.Do(post); err != nil || resp.StatusCode != want {
			t.Errorf("POST to %s: %v %v, want %d", host, resp, err, want)
		} else {
			resp.Body.Close()
		}
	}
	// No backend of the region: 503 with Retry-After, never another region's backend.
	resp := tp.get(t, "down.example.com", "/", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("region down: %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if hitsOther.Load() != 0 {
		t.Error("a request crossed regions")
	}
}

func TestStreamingBodies(t *testing.T) {
	a, _ := backend(t, "a")
	tp := startProxy(t, map[string]Route{"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{a.URL}}}, Options{})
	start := time.Now()
	resp := tp.get(t, "acme.example.com", "/stream", nil)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "chunk 0\n" {
		t.Fatalf("first chunk %q %v", line, err)
	}
	if waited := time.Since(start); waited > 500*time.Millisecond { // buffered, it would take 600 ms
		t.Errorf("the first chunk came after %s: the response was buffered", waited)
	}
	// A 20 MB upload streams through.
	req, _ := http.NewRequest(http.MethodPost, tp.url+"/upload", io.LimitReader(zeros{}, 20<<20))
	req.Host = "acme.example.com"
	up, err := tp.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := body(t, up); got != fmt.Sprintf("%d bytes", 20<<20) {
		t.Errorf("upload: %q", got)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestWebSocketUpgradePassesThrough(t *testing.T) {
	a, _ := backend(t, "a")
	tp := startProxy(t, map[string]Route{"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{a.URL}}}, Options{})
	conn := tp.dial(t)
	fmt.Fprint(conn, "GET /ws HTTP/1.1\r\nHost: acme.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("X-Backend") != "a" {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 4)
	if _, err := io.ReadFull(r, echo); err != nil || string(echo) != "ping" {
		t.Errorf("echo %q %v", echo, err)
	}
}

// TestClientsCannotForgeProxyHeaders sends headers in the cases HTTP/2 front ends and
// other clients use: the backend must see only the proxy's own tenant and forwarding
// headers, and no hop-by-hop header.
func TestClientsCannotForgeProxyHeaders(t *testing.T) {
	a, _ := backend(t, "a")
	tp := startProxy(t, map[string]Route{"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{a.URL}}}, Options{})
	conn := tp.dial(t)
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nhost: acme.example.com\r\nx-tenant-id: victim\r\nX-TENANT-ID: victim2\r\n"+
		"x-forwarded-for: 6.6.6.6\r\nforwarded: for=6.6.6.6\r\nx-forwarded-host: evil.example.com\r\n"+
		"connection: x-hop\r\nx-hop: 1\r\nkeep-alive: timeout=5\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for h, want := range map[string]string{
		"X-Seen-Tenant":    "acme",
		"X-Seen-For":       "127.0.0.1",
		"X-Seen-Host":      "acme.example.com|acme.example.com",
		"X-Seen-Forwarded": `for=127.0.0.1;host="acme.example.com";proto=http`,
		"X-Seen-Hop":       "|",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
}
