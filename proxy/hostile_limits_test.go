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
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
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

// A slow header that turns, late, into one the loop hands to fasthttp's server (a
// bare LF ending a line) still ends at the deadline its first byte started: the hand-
// over gives it no fresh ClientHeaderTimeout, which a client would take again and
// again to hold its connection for twice as long.
func TestAHeaderHandedOverLateKeepsItsDeadline(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{ClientHeaderTimeout: time.Second}, rec.URL)
	conn := tp.dial(t)
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n")
	time.Sleep(800 * time.Millisecond)
	io.WriteString(conn, "X-Late: a bare LF\n")
	_, _ = io.Copy(io.Discard, conn)
	if took := time.Since(start); took > 1500*time.Millisecond {
		t.Errorf("a header of 1 s deadline, handed over at 800 ms, held its connection for %s", took.Round(time.Millisecond))
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

// Clients that trickle small bodies hold no backend connection while they do: a
// body of a declared length up to RequestBufferBytes is read whole before a backend
// is asked, as nginx does, so a few hundred slow uploads cannot take a backend's
// whole pool from everyone else's requests. (fasthttp reads the first 8 KiB of a
// body before the proxy sees the request; these are larger.) Streamed, the first
// upload below took the pool's only connection and the requests behind it failed.
func TestSlowSmallUploadsHoldNoBackendConnection(t *testing.T) {
	url, _, _ := postBackend(t, time.Minute)
	tp := rawProxy(t, Options{MaxConnsPerBackend: 1}, url)
	slow := make([]net.Conn, 3)
	readers := make([]*bufio.Reader, 3)
	for i := range slow {
		slow[i], readers[i] = sendHalf(t, tp)
	}
	waitFor(t, 5*time.Second, "three uploads held", func() bool { return testutil.ToFloat64(requestBuffered) == 60000 })
	if failed := spacedPosts(t, tp, 3, 0); failed > 0 {
		t.Errorf("%d of 3 requests failed behind three slow uploads", failed)
	}
	for i, c := range slow {
		fmt.Fprint(c, strings.Repeat("b", 10000))
		if resp, got := readResponse(t, readers[i], "POST"); resp.StatusCode != 200 || got != "20000" {
			t.Errorf("slow upload %d: %d %q, want 200 \"20000\"", i, resp.StatusCode, got)
		}
	}
	// A client that waits to be told to send its body is told, then its body is read
	// whole.
	c := tp.dial(t)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 20000\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("with Expect: 100-continue the proxy said %q (%v) before the body", line, err)
	}
	if !readHeader(br) {
		t.Fatal("the 100 Continue did not end")
	}
	fmt.Fprint(c, strings.Repeat("c", 10000)) // fasthttp reads 8 KiB before the proxy sees the request
	waitFor(t, 5*time.Second, "the upload held", func() bool { return testutil.ToFloat64(requestBuffered) == 20000 })
	fmt.Fprint(c, strings.Repeat("c", 10000))
	if resp, got := readResponse(t, br, "POST"); resp.StatusCode != 200 || got != "20000" {
		t.Errorf("an upload after 100 Continue: %d %q, want 200 \"20000\"", resp.StatusCode, got)
	}
	if got := testutil.ToFloat64(requestBuffered); got != 0 {
		t.Errorf("%v bytes of request bodies still held after their requests", got)
	}
}

// Bodies are held within RequestBufferMemoryBytes in all; past it they stream as they
// come, and arrive whole.
func TestRequestBufferBudget(t *testing.T) {
	url, _, _ := postBackend(t, time.Minute)
	tp := rawProxy(t, Options{RequestBufferMemoryBytes: 30000}, url)
	full := testutil.ToFloat64(requestBufferFull)
	first, firstBR := sendHalf(t, tp)
	waitFor(t, 5*time.Second, "the first upload held", func() bool { return testutil.ToFloat64(requestBuffered) == 20000 })
	second, secondBR := sendHalf(t, tp) // 40000 in all would pass the budget: it streams
	waitFor(t, 5*time.Second, "the second upload streamed", func() bool { return testutil.ToFloat64(requestBufferFull) > full })
	conns, readers := []net.Conn{first, second}, []*bufio.Reader{firstBR, secondBR}
	if got := testutil.ToFloat64(requestBuffered); got != 20000 {
		t.Errorf("%v bytes of request bodies held, want 20000 (one body; the budget is 30000)", got)
	}
	if got := testutil.ToFloat64(requestBufferFull) - full; got != 1 {
		t.Errorf("%v bodies streamed for want of budget, want 1", got)
	}
	for i, c := range conns {
		fmt.Fprint(c, strings.Repeat("b", 10000))
		if resp, got := readResponse(t, readers[i], "POST"); resp.StatusCode != 200 || got != "20000" {
			t.Errorf("upload %d: %d %q, want 200 \"20000\"", i, resp.StatusCode, got)
		}
	}
	waitFor(t, 5*time.Second, "the budget given back", func() bool { return testutil.ToFloat64(requestBuffered) == 0 })
}

// One client address holds at most a share of the budget (1/16 of it, one body at
// least): its next body streams while another address's is still held whole. A
// trusted proxy, which speaks for many clients, has no share of its own.
func TestRequestBufferShareOfOneAddress(t *testing.T) {
	url, _, _ := postBackend(t, time.Minute)
	for _, tc := range []struct {
		name     string
		trusted  []netip.Prefix
		held     float64 // bytes held once all three uploads are in
		streamed float64
	}{
		{"one address", nil, 40000, 1},
		{"a trusted proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, 60000, 0},
	} {
		// A share of 20000: one body.
		tp := rawProxy(t, Options{RequestBufferBytes: 20000, RequestBufferMemoryBytes: 16 * 20000, TrustedProxies: tc.trusted}, url)
		full := testutil.ToFloat64(requestBufferFull)
		first, firstBR := sendHalfFrom(t, tp, "127.0.0.1")
		waitFor(t, 5*time.Second, tc.name+": the first upload held", func() bool { return testutil.ToFloat64(requestBuffered) == 20000 })
		second, secondBR := sendHalfFrom(t, tp, "127.0.0.1")
		other, otherBR := sendHalfFrom(t, tp, "127.0.0.2")
		var held, streamed float64
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if held, streamed = testutil.ToFloat64(requestBuffered), testutil.ToFloat64(requestBufferFull)-full; held == tc.held && streamed == tc.streamed {
				break
			}
		}
		if held != tc.held || streamed != tc.streamed {
			t.Errorf("%s, two uploads from it and one from another: %v bytes held and %v bodies streamed, want %v and %v",
				tc.name, held, streamed, tc.held, tc.streamed)
		}
		conns, readers := []net.Conn{first, second, other}, []*bufio.Reader{firstBR, secondBR, otherBR}
		for i, c := range conns {
			fmt.Fprint(c, strings.Repeat("b", 10000))
			if resp, got := readResponse(t, readers[i], "POST"); resp.StatusCode != 200 || got != "20000" {
				t.Errorf("%s: upload %d: %d %q, want 200 \"20000\"", tc.name, i, resp.StatusCode, got)
			}
		}
		waitFor(t, 5*time.Second, tc.name+": the budget given back", func() bool { return testutil.ToFloat64(requestBuffered) == 0 })
	}
}

// A client that stalls before its body is in gets a 408, one that goes away nothing;
// both give their share of the budget back, and the backend sees neither.
func TestUnfinishedBufferedBodiesReachNoBackend(t *testing.T) {
	url, _, conns := postBackend(t, time.Minute)
	tp := rawProxy(t, Options{ClientReadTimeout: 500 * time.Millisecond}, url)
	stalled, stalledBR := sendHalf(t, tp)
	gone, _ := sendHalf(t, tp)
	waitFor(t, 5*time.Second, "both uploads taken in", func() bool { return testutil.ToFloat64(requestBuffered) == 40000 })
	_ = gone.Close()
	if resp, _ := readResponse(t, stalledBR, "POST"); resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a stalled upload: %d, want 408", resp.StatusCode)
	}
	_ = stalled.Close()
	waitFor(t, 5*time.Second, "the budget given back", func() bool { return testutil.ToFloat64(requestBuffered) == 0 })
	if n := conns.Load(); n != 0 {
		t.Errorf("the backend was connected to %d times for bodies that never came whole", n)
	}
}

// A streamed body whose client stops sending (closes its side) before the declared
// length is the client's failure: a 400, not a 502 for the 5xx alert to page on.
// fasthttp ends such a body as if it were complete.
func TestStreamedBodyCutShortIsTheClientsFailure(t *testing.T) {
	url, _, _ := postBackend(t, time.Minute)
	tp := rawProxy(t, Options{}, url)
	c := tp.dial(t)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 200000\r\n\r\n"+strings.Repeat("a", 100000))
	_ = c.(*net.TCPConn).CloseWrite()
	if resp, got := readResponse(t, bufio.NewReader(c), "POST"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body cut short by its client: %d %q, want 400", resp.StatusCode, got)
	}
}

// sendHalf starts an upload of 20000 bytes and sends the first half.
func sendHalf(t *testing.T, tp *testProxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	return sendHalfFrom(t, tp, "127.0.0.1")
}

// sendHalfFrom is sendHalf from the local address from.
func sendHalfFrom(t *testing.T, tp *testProxy, from string) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", strings.TrimPrefix(tp.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 20000\r\n\r\n"+strings.Repeat("a", 10000))
	return c, bufio.NewReader(c)
}

// A body is read whole only once a backend is there to take it: with every backend
// of the region cooling down, a client uploading slowly is told 503 at once.
func TestNoBackendAnswersBeforeTheBodyIsRead(t *testing.T) {
	tp := rawProxy(t, Options{}, okBackend(t).URL)
	conn, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: down.example.com\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a region whose backend cannot be reached: %d, want 503", resp.StatusCode)
	}
	_ = conn.Close()
	conn, br = exchange(t, tp, "POST / HTTP/1.1\r\nHost: down.example.com\r\nContent-Length: 20000\r\n\r\n"+strings.Repeat("a", 10000))
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("an upload to a region cooling down: %d, want 503", resp.StatusCode)
	}
	if got := testutil.ToFloat64(requestBuffered); got != 0 {
		t.Errorf("%v bytes of request bodies held for a region with no backend", got)
	}
}

// A backend whose pool is taken (--upstream-max-conns connections busy for the dial
// timeout) is passed over for another of the region, and with none left the region
// has no backend available: 503 with Retry-After, not a 502 saying a backend failed.
func TestAFullPoolIsNoBackendAvailable(t *testing.T) {
	release := make(chan struct{})
	defer close(release) // before the proxies' cleanups, which wait for the held requests
	busy := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		if _, err := readReq(br); err == nil {
			<-release
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbusy")
		}
	})
	free := okBackend(t)
	// A share above the pool: the pool's own wait is under test, not the tenant's share.
	opts := Options{MaxConnsPerBackend: 1, MaxConnsPerTenant: 2, DialTimeout: 500 * time.Millisecond}
	tp := rawProxy(t, opts, busy.URL, free.URL)
	// A request that busy holds takes its only connection (round-robin: the first or
	// the second).
	for range 2 {
		fmt.Fprint(tp.dial(t), "GET /hold HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	}
	waitFor(t, 5*time.Second, "busy holding a request", func() bool { return busy.conns.Load() == 1 })
	for i := range 4 { // round-robin: at least two of them pick busy first
		conn, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
		if resp, got := readResponse(t, br, "GET"); resp.StatusCode != 200 || got != "ok" {
			t.Errorf("request %d with one backend's pool taken: %d %q, want the other's 200", i, resp.StatusCode, got)
		}
		_ = conn.Close()
	}
	if n := strings.Count(busy.Raw(), "GET "); n != 1 || !strings.Contains(busy.Raw(), "GET /hold ") {
		t.Errorf("busy saw %d requests, want the one it holds:\n%s", n, busy.Raw())
	}
	alone := rawProxy(t, opts, busy.URL)
	held := alone.dial(t)
	fmt.Fprint(held, "GET /hold HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	waitFor(t, 5*time.Second, "busy's second connection", func() bool { return busy.conns.Load() == 2 })
	conn, br := exchange(t, alone, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	defer conn.Close()
	if resp, got := readResponse(t, br, "GET"); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		got != "no backend of region eu is available\n" {
		t.Errorf("the region's only backend with its pool taken: %d %q (Retry-After %q), want 503 \"no backend of region eu is available\" with Retry-After",
			resp.StatusCode, got, resp.Header.Get("Retry-After"))
	}
}

// A request pipelined behind a body read whole is a request of its own: the body
// takes its declared length and not a byte more, and the next request reaches the
// backend as sent.
func TestPipelinedRequestAfterABodyReadWhole(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	body := strings.Repeat("p", 20000)
	conn, br := exchange(t, tp, "POST /first HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 20000\r\n\r\n"+body+
		"GET /second HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	defer conn.Close()
	for _, method := range []string{"POST", "GET"} {
		if resp, got := readResponse(t, br, method); resp.StatusCode != 200 || got != "ok" {
			t.Fatalf("%s: %d %q", method, resp.StatusCode, got)
		}
	}
	seen := rec.requests()
	if len(seen) != 2 || seen[0].Path != "/first" || string(seen[0].Body) != body || seen[1].Path != "/second" || seen[1].BodyLen != 0 {
		t.Fatalf("the backend saw %d requests, want POST /first with its 20000 bytes then GET /second: %+v", len(seen), paths(seen))
	}
}

func paths(seen []seenRequest) []string {
	var out []string
	for _, r := range seen {
		out = append(out, fmt.Sprintf("%s %s (%d bytes)", r.Method, r.Path, r.BodyLen))
	}
	return out
}

// A connection is handed over (an HTTP/1.0 client's stream, a WebSocket) only once
// fasthttp has sent the answers it held back for the requests pipelined before. A
// client that pipelined and went away makes that send fail, and the connection then
// closes without the handler that would have given back what the backend's side
// holds: for a stream, the pool's connection (a pool of one here, which would stay
// taken); for a tunnel, a connection of its own to the backend.
func TestAHandOverThatNeverComesGivesTheBackendsSideBack(t *testing.T) {
	got, answer, backendClosed := make(chan string, 2), make(chan struct{}), make(chan string, 2)
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		for {
			r, err := readReq(br)
			if err != nil {
				return
			}
			switch r.URL.Path {
			case "/stream", "/ws":
				got <- r.URL.Path
				<-answer
				if r.URL.Path == "/ws" {
					fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
						"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
					_, _ = io.Copy(io.Discard, br) // until the proxy closes its end
					backendClosed <- r.URL.Path
					return
				}
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
			default:
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			}
		}
	})
	// The wait for the pool's one connection outlasts the stream's end on a busy machine.
	// (A share above the pool: a request of the same tenant waits for it.)
	tp := rawProxy(t, Options{MaxConnsPerBackend: 1, MaxConnsPerTenant: 2, DialTimeout: 2 * time.Second}, b.URL)
	goAway := func(pipelined string) {
		t.Helper()
		conn := tp.dial(t)
		if _, err := io.WriteString(conn, pipelined); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("the backend never saw the second request")
		}
		_ = conn.(*net.TCPConn).SetLinger(0) // a reset: the held-back answer cannot be sent
		_ = conn.Close()
		abandoned := tp.p.handed.abandoned.Load()
		answer <- struct{}{}
		// The path under test, not the handler's (which releases too): fasthttp's send
		// of the held-back answer failed and it closed the connection.
		waitFor(t, 5*time.Second, "the failed hand-over released by the connection's close", func() bool {
			return tp.p.handed.abandoned.Load() == abandoned+1
		})
	}
	// A collection would close the WebSocket's leaked backend connection by its
	// finalizer, and pass the test for the wrong reason.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	goAway("GET /first HTTP/1.0\r\nHost: acme.example.com\r\nConnection: keep-alive\r\n\r\n" +
		"GET /stream HTTP/1.0\r\nHost: acme.example.com\r\nConnection: keep-alive\r\n\r\n")
	for i := range 2 {
		conn, br := exchange(t, tp, "GET /after HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
		if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("request %d after an HTTP/1.0 stream's client went away: %d %q, want 200 (the pool's one connection given back)",
				i, resp.StatusCode, body)
		}
		_ = conn.Close()
	}

	// The first request is HTTP/1.0 so that both reach fasthttp's server on either
	// engine: the loop engine answers a plain HTTP/1.1 GET itself, at once, and no
	// answer would be held back.
	goAway("GET /first HTTP/1.0\r\nHost: acme.example.com\r\nConnection: keep-alive\r\n\r\n" +
		"GET /ws HTTP/1.1\r\nHost: acme.example.com\r\n" + wsHandshake + "\r\n")
	select {
	case <-backendClosed:
	case <-time.After(3 * time.Second):
		t.Error("a WebSocket whose client went away before its 101 was sent: the backend's connection stayed open")
	}
}

// The backends of a region are shared by all its tenants, and so is each one's pool:
// without a share per tenant, one tenant's slow requests (an attack on its site, or a
// customer's own slow endpoint) take every connection, and every other tenant of the
// region gets 503s after the pool wait. A tenant holds half of a backend's pooled
// connections at most by default (two of a pool of four here); its requests past that
// are refused at once, and its share comes back as its requests and streams end.
func TestOneTenantCannotTakeTheWholePool(t *testing.T) {
	release, finish := make(chan struct{}), make(chan struct{})
	var releaseOnce, finishOnce sync.Once
	defer func() { // before the proxy's cleanup, which waits for the held requests
		releaseOnce.Do(func() { close(release) })
		finishOnce.Do(func() { close(finish) })
	}()
	var held atomic.Int32
	b := serveRequests(t, func(c net.Conn, r *http.Request) {
		switch r.URL.Path {
		case "/hold":
			held.Add(1)
			<-release
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nheld")
		case "/stream":
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
			<-finish
			fmt.Fprint(c, "4\r\nlast\r\n0\r\n\r\n")
		default:
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tp := startProxy(t, map[string]Route{
		"noisy.example.com": {Tenant: "noisy", Region: "eu", Backends: []string{b.URL}},
		"quiet.example.com": {Tenant: "quiet", Region: "eu", Backends: []string{b.URL}},
	}, Options{MaxConnsPerBackend: 4, DialTimeout: 500 * time.Millisecond})
	get := func(host, path string) (*http.Response, string) {
		t.Helper()
		conn, br := exchange(t, tp, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		defer conn.Close()
		return readResponse(t, br, "GET")
	}
	const refusal = "this site has as many requests in progress as it may; try again shortly\n"

	refusedBefore, timedBefore := testutil.ToFloat64(tenantShareFull), upstreamSamples(t, "eu")
	// Four slow requests of one tenant, enough to fill the pool.
	conns := make([]net.Conn, 4)
	for i := range conns {
		conns[i] = tp.dial(t)
		fmt.Fprint(conns[i], "GET /hold HTTP/1.1\r\nHost: noisy.example.com\r\n\r\n")
	}
	waitFor(t, 5*time.Second, "slow requests at the backend", func() bool { return held.Load() >= 2 })
	if resp, got := get("quiet.example.com", "/"); resp.StatusCode != 200 || got != "ok" {
		t.Errorf("another tenant of the region while one holds slow requests: %d %q, want 200 \"ok\"", resp.StatusCode, got)
	}
	refused := 0
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET"})
		if err != nil {
			continue // held at the backend
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || string(body) != refusal {
			t.Errorf("slow request %d: %d %q (Retry-After %q), want held, or 503 %q with Retry-After",
				i, resp.StatusCode, body, resp.Header.Get("Retry-After"), refusal)
		}
		refused++
	}
	if n := held.Load(); n != 2 || refused != 2 {
		t.Errorf("the backend holds %d of the tenant's requests and %d were refused, want 2 and 2 (its share of a pool of 4)", n, refused)
	}
	if n := testutil.ToFloat64(tenantShareFull) - refusedBefore; n != 2 {
		t.Errorf("tenantroute_proxy_tenant_share_full_total rose by %v, want 2", n)
	}
	// The refused requests asked no backend: only the other tenant's answer is timed.
	if n := upstreamSamples(t, "eu") - timedBefore; n != 1 {
		t.Errorf("the region's upstream latency counted %d requests, want 1 (the refused ones asked no backend)", n)
	}

	// The share comes back when the held requests are answered.
	releaseOnce.Do(func() { close(release) })
	waitFor(t, 5*time.Second, "the held requests' share given back", func() bool {
		resp, _ := get("noisy.example.com", "/")
		return resp.StatusCode == 200
	})

	// A streamed answer holds its share until its last byte.
	bodies := make([]io.ReadCloser, 2)
	for i := range bodies {
		conn, br := exchange(t, tp, "GET /stream HTTP/1.1\r\nHost: noisy.example.com\r\n\r\n")
		defer conn.Close()
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatal(err)
		}
		first := make([]byte, 5)
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first" {
			t.Fatalf("stream %d's first chunk: %q %v", i, first, err)
		}
		bodies[i] = resp.Body
	}
	if resp, got := get("noisy.example.com", "/"); resp.StatusCode != http.StatusServiceUnavailable || got != refusal {
		t.Errorf("the tenant's request while two streams hold its share: %d %q, want 503 %q", resp.StatusCode, got, refusal)
	}
	if resp, got := get("quiet.example.com", "/"); resp.StatusCode != 200 || got != "ok" {
		t.Errorf("another tenant's request meanwhile: %d %q, want 200", resp.StatusCode, got)
	}
	finishOnce.Do(func() { close(finish) })
	for i, body := range bodies {
		if rest, err := io.ReadAll(body); err != nil || string(rest) != "last" {
			t.Errorf("stream %d's end: %q %v", i, rest, err)
		}
	}
	waitFor(t, 5*time.Second, "the streams' share given back", func() bool {
		resp, _ := get("noisy.example.com", "/")
		return resp.StatusCode == 200
	})
}

// The share's 503 says the site has too many requests in progress only when every
// backend of the region refused for the share: with another backend down, the region
// has no backend available, and the log and metric do not blame the tenant.
func TestAShareRefusalDoesNotHideABackendDown(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	b := serveRequests(t, func(c net.Conn, _ *http.Request) {
		<-release
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tp := startProxy(t, map[string]Route{
		"noisy.example.com": {Tenant: "noisy", Region: "eu", Backends: []string{b.URL, "http://127.0.0.1:1"}},
	}, Options{MaxConnsPerBackend: 2}) // a share of one
	fmt.Fprint(tp.dial(t), "GET /hold HTTP/1.1\r\nHost: noisy.example.com\r\n\r\n")
	waitFor(t, 5*time.Second, "the tenant's share taken", func() bool { return b.conns.Load() == 1 })
	before := testutil.ToFloat64(tenantShareFull)
	for i := range 2 {
		conn, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: noisy.example.com\r\n\r\n")
		resp, got := readResponse(t, br, "GET")
		_ = conn.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || got != "no backend of region eu is available\n" {
			t.Errorf("request %d, one backend down and the other at the tenant's share: %d %q, want 503 \"no backend of region eu is available\"",
				i, resp.StatusCode, got)
		}
	}
	if n := testutil.ToFloat64(tenantShareFull) - before; n != 0 {
		t.Errorf("tenantroute_proxy_tenant_share_full_total rose by %v with a backend down, want 0", n)
	}
}

// upstreamSamples is how many requests the region's upstream latency has counted.
func upstreamSamples(t *testing.T, region string) uint64 {
	t.Helper()
	var m dto.Metric
	if err := upstreamSeconds.WithLabelValues(region).(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// A client that reads a large answer slowly holds its backend back rather than making
// the proxy hold the answer: the backend writes little more than the sockets between
// them buffer, however large the body, chunked or of declared length, and the whole
// body arrives intact once the client reads.
func TestASlowReaderHoldsTheBackendBack(t *testing.T) {
	const size = 64 << 20
	var written atomic.Int64
	chunk := []byte(strings.Repeat("z", 32<<10))
	url, _ := countingBackend(t, time.Minute, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/length" {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		for n := 0; n < size; n += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			written.Add(int64(len(chunk)))
		}
	})
	tp := rawProxy(t, Options{}, url)
	for _, path := range []string{"/chunked", "/length"} {
		written.Store(0)
		conn := tp.dial(t)
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: acme.example.com\r\n\r\n", path)
		time.Sleep(time.Second) // the client reads nothing meanwhile
		if n := written.Load(); n > 16<<20 {
			t.Errorf("%s: the backend wrote %d MiB to a client that read nothing, want the sockets' buffers at most", path, n>>20)
		}
		resp, got := readResponse(t, bufio.NewReaderSize(conn, 1<<20), "GET")
		if resp.StatusCode != 200 || len(got) != size || strings.Trim(got, "z") != "" {
			t.Errorf("%s: %d with %d bytes, want 200 with %d", path, resp.StatusCode, len(got), size)
		}
		_ = conn.Close()
	}
}

// A client whose header, or body, does not come in time is told so before the close
// (408, as fasthttp's server words it), on either engine; a client still uploading
// reads it too: the close lingers over what it sends, where a plain close would
// reset the connection and could destroy the answer before it was read.
func TestATimedOutClientIsToldSo(t *testing.T) {
	tp := rawProxy(t, Options{ClientHeaderTimeout: 300 * time.Millisecond, ClientReadTimeout: 300 * time.Millisecond}, okBackend(t).URL)
	for _, tc := range []struct{ name, sent, body string }{
		{"nothing sent", "", requestTimeout},
		{"half a header", "GET / HTTP/1.1\r\nHost: acme.exa", requestTimeout},
		{"half a body", "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 100\r\n\r\n0123456789", requestTimeout},
		{"half a large body", "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 100000\r\n\r\n0123456789", requestTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := tp.dial(t)
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(conn, tc.sent)
			time.Sleep(600 * time.Millisecond)
			// Still sending, past the deadline.
			io.WriteString(conn, strings.Repeat("z", 10))
			resp, got := readResponse(t, bufio.NewReader(conn), "GET")
			if resp.StatusCode != http.StatusRequestTimeout || got != tc.body || !resp.Close || resp.Header.Get("Server") != "tenantroute" {
				t.Errorf("%d %q (close %v, Server %q), want a 408 %q closing the connection", resp.StatusCode, got, resp.Close, resp.Header.Get("Server"), tc.body)
			}
		})
	}
}

// A small body, one a server reads with its header, comes within the header's
// deadline on either engine (fasthttp's server reads the first 8 KiB of a body under
// the header's timeout): were each byte to restart ClientReadTimeout, a body of a few
// bytes trickled one a minute would hold a connection for hours.
func TestASmallBodyComesWithinTheHeadersDeadline(t *testing.T) {
	tp := rawProxy(t, Options{ClientHeaderTimeout: 300 * time.Millisecond, ClientReadTimeout: 2 * time.Second}, okBackend(t).URL)
	for _, keptAlive := range []bool{false, true} {
		t.Run(fmt.Sprintf("kept alive %v", keptAlive), func(t *testing.T) {
			conn := tp.dial(t)
			br := bufio.NewReader(conn)
			if keptAlive {
				// The next request's header comes whole in one read, after the
				// connection waited as an idle one.
				io.WriteString(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
				if resp, got := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK || got != "ok" {
					t.Fatalf("the first request: %d %q, want 200 \"ok\"", resp.StatusCode, got)
				}
				time.Sleep(100 * time.Millisecond)
			}
			io.WriteString(conn, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 10\r\n\r\n")
			start := time.Now()
			go func() {
				for range 10 {
					time.Sleep(150 * time.Millisecond)
					if _, err := io.WriteString(conn, "z"); err != nil {
						return
					}
				}
			}()
			resp, got := readResponse(t, br, "POST")
			if resp.StatusCode != http.StatusRequestTimeout || got != requestTimeout {
				t.Errorf("a 10-byte body sent a byte every 150 ms: %d %q after %v, want a 408 once the header's 300 ms passed",
					resp.StatusCode, got, time.Since(start).Round(time.Millisecond))
			}
		})
	}
}

// A backend whose pool is full serves the requests waiting for it on the connections
// it has: a connection given back goes to a waiting request, not closed for a new one
// to be dialed (that churn would leave a TIME_WAIT per request and could run out of
// ports), and every request is answered.
func TestAFullPoolReusesItsConnections(t *testing.T) {
	b := serveRequests(t, func(c net.Conn, _ *http.Request) {
		time.Sleep(2 * time.Millisecond)
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	tp := rawProxy(t, Options{MaxConnsPerBackend: 2, MaxConnsPerTenant: 16, DialTimeout: 5 * time.Second}, b.URL)
	const clients, each = 16, 20
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := tp.dial(t)
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
			br := bufio.NewReader(conn)
			for range each {
				if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n"); err != nil {
					failed.Add(1)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					failed.Add(1)
					return
				}
				got, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || string(got) != "ok" {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed", n, clients*each)
	}
	if n := b.conns.Load(); n > clients*each/10 {
		t.Errorf("%d requests opened %d connections to a backend of 2", clients*each, n)
	}
}

// A log that takes no lines (a node's log agent behind, its pipe full) delays no
// request: on the loop engine a line written on the loop's thread would stall every
// connection the loop serves, on fasthttp's the connection that logged.
func TestAStalledLogDelaysNoRequest(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	saved := backendLog
	backendLog = logr.New(stalledSink{entered: entered, release: release})
	t.Cleanup(func() { backendLog = saved }) // once the proxy stopped
	backendErrors.last.Store(0)
	up, _ := backend(t, "up")
	broken := serveRequests(t, func(c net.Conn, _ *http.Request) { _ = c.Close() })
	tp := startProxy(t, map[string]Route{
		"down.example.com": {Tenant: "down", Region: "eu", Backends: []string{broken.URL}},
		"up.example.com":   {Tenant: "up", Region: "eu", Backends: []string{up.URL}},
	}, Options{})
	// Before the proxy stops: a request stalled by its log line would hold the stop.
	t.Cleanup(func() { close(release) })
	conn, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: down.example.com\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("a request to a backend that closes: %d, want 502", resp.StatusCode)
	}
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's failure was never logged")
	}
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: up.example.com\r\n\r\n")
	if resp, got := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK || got != "up" {
		t.Fatalf("the next request with the log stalled: %d %q, want 200 \"up\"", resp.StatusCode, got)
	}
}

// stalledSink is a log whose write of a backend's failure blocks until release is
// closed; it drops other lines.
type stalledSink struct{ entered, release chan struct{} }

func (stalledSink) Init(logr.RuntimeInfo)                 {}
func (stalledSink) Enabled(int) bool                      { return true }
func (s stalledSink) Info(_ int, msg string, _ ...any)    { s.stall(msg) }
func (s stalledSink) Error(_ error, msg string, _ ...any) { s.stall(msg) }
func (s stalledSink) WithValues(...any) logr.LogSink      { return s }
func (s stalledSink) WithName(string) logr.LogSink        { return s }
func (s stalledSink) stall(msg string) {
	if msg != "backend request failed" {
		return
	}
	select {
	case s.entered <- struct{}{}:
	default:
	}
	<-s.release
}
