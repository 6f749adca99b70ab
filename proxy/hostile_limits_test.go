package proxy

// Limits and trust settings of the hardened proxy, each tried as a client or backend
// that runs into it would.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// A pooled connection the backend closed while idle is noticed before reuse, however
// long the pool would keep it: POSTs, which are never replayed, all succeed.
func TestBackendCloseNoticedBeforeReuse(t *testing.T) {
	url, posts, conns := postBackend(t, 300*time.Millisecond)
	tp := rawProxy(t, Options{UpstreamIdleConnTimeout: time.Minute}, url)
	if failed := spacedPosts(t, tp, 4, 600*time.Millisecond); failed > 0 {
		t.Errorf("%d of 4 POSTs failed", failed)
	}
	if posts.Load() != 4 || conns.Load() != 4 {
		t.Errorf("the backend processed %d POSTs on %d connections, want 4 on 4", posts.Load(), conns.Load())
	}
}

// Streamed (chunked) responses return their connection to the pool once read to the
// end; HEAD, 204 and 304 answers carry no body and keep the connection usable.
func TestStreamedResponsesKeepConnectionsReusable(t *testing.T) {
	url, conns := countingBackend(t, time.Minute, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/204":
			w.WriteHeader(http.StatusNoContent)
			return
		case "/304":
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Trailer", "X-Sum")
		for i := range 3 {
			fmt.Fprintf(w, "part %d %s\n", i, strings.Repeat("y", 40<<10))
			w.(http.Flusher).Flush()
		}
		w.Header().Set("X-Sum", "done")
	})
	tp := rawProxy(t, Options{}, url)
	for _, c := range []struct {
		method, path string
		status, size int
	}{{"GET", "/", 200, 3 * (40<<10 + 8)}, {"HEAD", "/", 200, 0}, {"GET", "/204", 204, 0}, {"GET", "/304", 304, 0}, {"GET", "/", 200, 3 * (40<<10 + 8)}} {
		req, _ := http.NewRequest(c.method, tp.url+c.path, nil)
		req.Host = "acme.example.com"
		resp, err := tp.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := body(t, resp); resp.StatusCode != c.status || len(got) != c.size {
			t.Errorf("%s %s: %d with %d bytes, want %d with %d", c.method, c.path, resp.StatusCode, len(got), c.status, c.size)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("five sequential requests used %d backend connections, want 1", n)
	}
}

// A client that sends its header a byte at a time is cut at ClientHeaderTimeout.
func TestSlowHeaderClientIsCut(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{ClientHeaderTimeout: 500 * time.Millisecond}, rec.URL)
	conn := tp.dial(t)
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, conn)
	}()
	for _, b := range []byte("GET / HTTP/1.1\r\nHost: acme.example.com\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") {
		if _, err := conn.Write([]byte{b}); err != nil {
			break
		}
		select {
		case <-closed:
		case <-time.After(50 * time.Millisecond):
			continue
		}
		break
	}
	<-closed
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("a slow header held the connection for %s", took.Round(time.Millisecond))
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("the backend saw %d requests", n)
	}
}

// A body is bounded between reads, not as a whole: a steady slow upload passes, a
// client that stalls mid-body is cut.
func TestRequestBodiesAreBoundedBetweenReads(t *testing.T) {
	url, _ := countingBackend(t, time.Minute, func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
		fmt.Fprintf(w, "%d", n)
	})
	tp := rawProxy(t, Options{ClientReadTimeout: 500 * time.Millisecond, ClientHeaderTimeout: 500 * time.Millisecond}, url)
	conn := tp.dial(t)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(conn, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 8 { // 1.6 s in all, 200 ms apart
		fmt.Fprintf(conn, "%x\r\n%s\r\n", 1000, strings.Repeat("z", 1000))
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Fprint(conn, "0\r\n\r\n")
	br := bufio.NewReader(conn)
	if resp, got := readResponse(t, br, "POST"); resp.StatusCode != 200 || got != "8000" {
		t.Errorf("a steady slow upload: %d %q", resp.StatusCode, got)
	}
	conn = tp.dial(t)
	fmt.Fprint(conn, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("z", 10000))
	start := time.Now()
	_, _ = io.Copy(io.Discard, conn)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a stalled upload held the connection for %s", took.Round(time.Millisecond))
	}
}

// Connections are capped per client address and in total; trusted proxies, which
// carry many users over few addresses, are exempt from the per-address cap.
func TestConnectionCaps(t *testing.T) {
	rec := newRecorder(t, nil)
	try := func(tp *testProxy) string {
		conn := tp.dial(t)
		fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err.Error()
		}
		resp.Body.Close()
		return resp.Status
	}
	hold := func(tp *testProxy, n int) {
		for range n {
			if got := try(tp); got != "200 OK" {
				t.Fatalf("a connection within the caps: %s", got)
			}
		}
	}
	perIP := rawProxy(t, Options{MaxConnsPerIP: 2}, rec.URL)
	hold(perIP, 2)
	if got := try(perIP); !strings.HasPrefix(got, "429") {
		t.Errorf("a third connection from one address: %s, want 429", got)
	}
	total := rawProxy(t, Options{MaxConns: 2, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, rec.URL)
	hold(total, 2)
	if got := try(total); !strings.HasPrefix(got, "503") {
		t.Errorf("a third connection in all: %s, want 503", got)
	}
	trusted := rawProxy(t, Options{MaxConnsPerIP: 2, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, rec.URL)
	hold(trusted, 5)
}

// A WebSocket tunnel in which nobody speaks is closed after TunnelIdleTimeout; one
// in which only the backend speaks stays open.
func TestTunnelIdleLimit(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		if req.URL.Path == "/push" {
			for range 8 { // 1.6 s of pushes, 200 ms apart
				time.Sleep(200 * time.Millisecond)
				if _, err := c.Write([]byte("tick")); err != nil {
					return
				}
			}
		}
		time.Sleep(10 * time.Second)
	})
	tp := rawProxy(t, Options{TunnelIdleTimeout: 500 * time.Millisecond}, b.URL)
	for path, want := range map[string]int{"/quiet": 0, "/push": 8 * 4} {
		conn := tp.dial(t)
		_ = conn.SetDeadline(time.Now().Add(8 * time.Second))
		fmt.Fprint(conn, "GET "+path+" HTTP/1.1\r\nHost: acme.example.com\r\n"+wsHandshake+"\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s: %v %v", path, resp, err)
		}
		start := time.Now()
		got, _ := io.ReadAll(br)
		took := time.Since(start)
		if len(got) != want {
			t.Errorf("%s: %d bytes through the tunnel, want %d", path, len(got), want)
		}
		if took > 3*time.Second {
			t.Errorf("%s: the idle tunnel stayed open %s", path, took.Round(time.Millisecond))
		}
	}
}

// From a trusted proxy, forwarding headers in their standard spelling are kept and
// extended; the tenant header and underscore spellings never pass.
func TestTrustedProxiesExtendForwardingHeaders(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, rec.URL)
	_, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\nX-Forwarded-For: 203.0.113.7\r\n"+
		"X-Forwarded-Proto: https\r\nForwarded: for=203.0.113.7;proto=https\r\nTrue-Client-IP: 203.0.113.7\r\n"+
		"X_Forwarded_For: 6.6.6.6\r\nX-Tenant-ID: victim\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	seen := rec.requests()
	checkTenant(t, seen)
	h := seen[0].Header
	for name, want := range map[string]string{
		"X-Forwarded-For":   "203.0.113.7, 127.0.0.1",
		"X-Forwarded-Proto": "https",
		"Forwarded":         `for=203.0.113.7;proto=https, for=127.0.0.1;host="acme.example.com";proto=http`,
		"True-Client-Ip":    "203.0.113.7",
	} {
		if got := strings.Join(h.Values(name), ","); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	for _, name := range seen[0].RawNames {
		if strings.Contains(name, "_") {
			t.Errorf("%s passed from a trusted proxy", name)
		}
	}
}

// Request limits: a declared body over MaxRequestBodyBytes is refused before any of
// it is read; a header over MaxRequestHeaderBytes is refused with 431.
func TestRequestLimits(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{MaxRequestBodyBytes: 1000, MaxRequestHeaderBytes: 4096, MaxResponseHeaderBytes: 8192}, rec.URL)
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 2000\r\n\r\n" + strings.Repeat("b", 2000),
		// Asking first, the client learns before it sends anything.
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 2000\r\nExpect: 100-continue\r\n\r\n",
	} {
		conn, br := exchange(t, tp, req)
		if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("a 2000-byte body over a 1000-byte limit (%.60q): %d", req, resp.StatusCode)
		}
		if !closedWithin(conn, br, 2*time.Second) {
			t.Error("the connection stayed open after a refused body")
		}
	}
	_, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\nX-Big: "+strings.Repeat("b", 5000)+"\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 5000-byte header over a 4096-byte limit: %d", resp.StatusCode)
	}
	if n := len(rec.requests()); n != 0 {
		t.Errorf("the backend saw %d requests", n)
	}
}
