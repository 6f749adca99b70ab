package proxy

// Backends as they really behave, and as a hostile or buggy one could: each test here
// reproduces a finding of a review of the hardened proxy, and failed before its fix.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawBackend serves each connection with fn; it records all bytes received.
type rawBackend struct {
	URL   string
	mu    sync.Mutex
	raw   bytes.Buffer
	conns atomic.Int64
}

type teeConn struct {
	net.Conn
	b *rawBackend
}

func (c teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.b.mu.Lock()
	c.b.raw.Write(p[:n])
	c.b.mu.Unlock()
	return n, err
}

func (b *rawBackend) Raw() string { b.mu.Lock(); defer b.mu.Unlock(); return b.raw.String() }

func newRawBackend(t *testing.T, fn func(c net.Conn, br *bufio.Reader, connNo int64)) *rawBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveRaw(t, ln, "http://", fn)
}

// serveRaw serves each connection of ln with fn until the test ends.
func serveRaw(t *testing.T, ln net.Listener, scheme string, fn func(c net.Conn, br *bufio.Reader, connNo int64)) *rawBackend {
	b := &rawBackend{URL: scheme + ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := b.conns.Add(1)
			go func() {
				defer c.Close()
				tc := teeConn{c, b}
				fn(tc, bufio.NewReader(tc), n)
			}()
		}
	}()
	return b
}

// okBackend answers every request 200 "ok".
func okBackend(t *testing.T) *rawBackend {
	return serveRequests(t, func(c net.Conn, _ *http.Request) { fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") })
}

// serveRequests answers each request of every connection with fn, in turn.
func serveRequests(t *testing.T, fn func(c net.Conn, r *http.Request)) *rawBackend {
	return newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		for {
			r, err := readReq(br)
			if err != nil {
				return
			}
			fn(c, r)
		}
	})
}

// readReq reads one request (header + body) with net/http.
func readReq(br *bufio.Reader) (*http.Request, error) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, r.Body)
	return r, err
}

// readHeader reads a request's header, and tells whether it was all there.
func readHeader(br *bufio.Reader) bool {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false
		}
		if line == "\r\n" {
			return true
		}
	}
}

// Trailers of a chunked request are headers the proxy never saw: none reaches the
// backend, so X-Tenant-ID cannot come that way.
func TestBackendNeverSeesRequestTrailers(t *testing.T) {
	b := okBackend(t)
	tp := rawProxy(t, Options{}, b.URL)
	_, br := exchange(t, tp, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"3\r\nabc\r\n0\r\nX-Tenant-Id: evil\r\nX_Forwarded_For: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX_Real_IP: 6.6.6.6\r\n\r\n")
	if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if raw := b.Raw(); strings.Contains(raw, "evil") || strings.Contains(raw, "6.6.6.6") {
		t.Errorf("trailer fields reached the backend:\n%s", raw)
	}
}

// An HTTP/1.0 client cannot read chunked encoding: a streamed body reaches it
// unframed, delimited by the connection's close.
func TestHTTP10ClientGetsStreamedBodyUnchunked(t *testing.T) {
	big := strings.Repeat("x", 70000)
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		for {
			if _, err := readReq(br); err != nil {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(big), big)
		}
	})
	tp := rawProxy(t, Options{}, b.URL)
	conn, br := exchange(t, tp, "GET / HTTP/1.0\r\nHost: acme.example.com\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	all, err := io.ReadAll(br)
	head, body, _ := strings.Cut(string(all), "\r\n\r\n")
	if err != nil || strings.Contains(strings.ToLower(head), "transfer-encoding") || body != big {
		t.Errorf("HTTP/1.0 client got %v, header %q, a body of %d bytes (want %d unframed)", err, head, len(body), len(big))
	}
}

// A 101 to a request that asked for no upgrade is a broken backend: 502, and neither
// the client's connection nor the backend's turns into a tunnel.
func TestUnaskedSwitchingProtocolsIsABadGateway(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, n int64) {
		for {
			r, err := readReq(br)
			if err != nil {
				return
			}
			if r.URL.Path == "/switch" {
				fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nRAWBYTES")
				continue
			}
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tp := rawProxy(t, Options{}, b.URL)
	conn, br := exchange(t, tp, "GET /switch HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("an unasked 101: %d, want 502", resp.StatusCode)
	}
	fmt.Fprint(conn, "GET /next HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "ok" {
		t.Errorf("the next request: %d %q", resp.StatusCode, body)
	}
}

// A backend that loses a request on every reused connection gave an answer of sorts:
// 502, never 503 "no backend of the region". It loses the first request of every
// connection after the two it was warmed with too, so that the retry is lost whichever
// connection it takes: the other pooled one (one pool), or a fresh one (the loop
// engine's loops each keep their own).
func TestRequestLostTwiceIsABadGateway(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, n int64) {
		for i := 0; ; i++ {
			if _, err := readReq(br); err != nil {
				return
			}
			if i == 1 || n > 2 {
				return // lose the request: close without answering
			}
			time.Sleep(200 * time.Millisecond)
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tp := rawProxy(t, Options{}, b.URL)
	var wg sync.WaitGroup
	for range 2 { // two pooled connections
		wg.Go(func() {
			resp, err := tp.client.Do(mustReq("GET", tp.url+"/warm", "acme.example.com"))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	_, br := exchange(t, tp, "GET /x HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("lost on two reused connections: %d %q, want 502", resp.StatusCode, body)
	}
}

func mustReq(method, url, host string) *http.Request {
	r, _ := http.NewRequest(method, url, nil)
	r.Host = host
	return r
}

// A response that began and broke off is an answer begun: the request is not sent
// again, even a GET.
func TestPartialResponseIsNotReplayed(t *testing.T) {
	var count atomic.Int64
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, n int64) {
		for i := 0; ; i++ {
			r, err := readReq(br)
			if err != nil {
				return
			}
			if r.URL.Path == "/b" {
				count.Add(1)
			}
			if n == 1 && i == 1 {
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nX-Partial: 1\r\n")
				return
			}
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tp := rawProxy(t, Options{}, b.URL)
	conn, br := exchange(t, tp, "GET /a HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	readResponse(t, br, "GET")
	fmt.Fprint(conn, "GET /b HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	resp, _ := readResponse(t, br, "GET")
	if resp.StatusCode != http.StatusBadGateway || count.Load() != 1 {
		t.Errorf("a broken-off response: %d, /b reached the backend %d times; want 502 and once", resp.StatusCode, count.Load())
	}
}

// A backend may answer an upload before reading it (401, 413): the client gets that
// answer, not a 502, whatever the body's size.
func TestBackendAnswerBeforeTheBodyIsRelayed(t *testing.T) {
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, "login first")
	}))
	t.Cleanup(b.Close)
	tp := rawProxy(t, Options{}, b.URL)
	for _, size := range []int{100 << 10, 4 << 20} {
		req, _ := http.NewRequest("POST", tp.url+"/upload", bytes.NewReader(make([]byte, size)))
		req.Host = "acme.example.com"
		resp, err := tp.client.Do(req)
		if err != nil {
			t.Errorf("%d bytes: %v", size, err)
			continue
		}
		if got := body(t, resp); resp.StatusCode != http.StatusUnauthorized || got != "login first" {
			t.Errorf("%d bytes: %d %q, want the backend's 401", size, resp.StatusCode, got)
		}
	}
}

// A backend that answers before reading the body and closes resets the connection
// (Go's server does so past 256 KB of unread body): the reset fails the body's write
// and arrives with the answer, which is still the client's. Every try must get it.
func TestEarlyAnswerThenResetReachesTheClient(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		if !readHeader(br) {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 11\r\nConnection: close\r\n\r\nlogin first")
		_ = c.(teeConn).Conn.(*net.TCPConn).SetLinger(0) // close with a reset
	})
	tp := rawProxy(t, Options{}, b.URL)
	const tries = 200
	lost := 0
	for range tries {
		req, _ := http.NewRequest("POST", tp.url+"/upload", bytes.NewReader(make([]byte, 4<<20)))
		req.Host = "acme.example.com"
		resp, err := tp.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := body(t, resp); resp.StatusCode != http.StatusUnauthorized || got != "login first" {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d uploads lost the backend's early 401", lost, tries)
	}
}

// Header names that only look like the tenant header are refused or dropped; none
// carries a value to the backend.
func TestHeaderNameTricks(t *testing.T) {
	b := okBackend(t)
	tp := rawProxy(t, Options{}, b.URL)
	for _, line := range []string{
		"X-Tenant-ID : evil1",
		"X-Tenant-ID\t: evil2",
		"X-Tenant-ID: acme\r\n evil3",
		"X-Tenant-ID\x00: evil5",
		"x-tenant-id: evil6\r\nX-Tenant-ID: evil7",
	} {
		conn, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n"+line+"\r\n\r\n")
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if resp, err := http.ReadResponse(br, nil); err == nil {
			resp.Body.Close()
		}
	}
	for _, l := range strings.Split(b.Raw(), "\r\n") {
		if strings.Contains(l, "evil") {
			t.Errorf("the backend got %q", l)
		}
	}
}

// When the backend ends a WebSocket (close frame, then TCP close, RFC 6455 7.1.1), the
// client learns it at once, not at the tunnel's idle timeout.
func TestTunnelBackendCloseReachesClient(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		if _, err := readReq(br); err != nil {
			return
		}
		fmt.Fprint(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n")
		time.Sleep(100 * time.Millisecond)
		_, _ = c.Write([]byte{0x88, 0x00})
	})
	tp := rawProxy(t, Options{TunnelIdleTimeout: 30 * time.Second}, b.URL)
	conn, br := exchange(t, tp, "GET /ws HTTP/1.1\r\nHost: acme.example.com\r\n"+wsHandshake+"\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(12 * time.Second))
	frame := make([]byte, 2)
	_, _ = io.ReadFull(br, frame)
	_, err = br.ReadByte()
	if took := time.Since(start); err != io.EOF || took > 3*time.Second {
		t.Errorf("after the backend closed: %v after %s", err, took.Round(time.Millisecond))
	}
}

// A malformed chunked body is the client's fault: 400, connection closed, and the
// backend never takes a complete request from it.
func TestMalformedChunkedBodyIsTheClientsFault(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=\"a\r\nb\"\r\nhello\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\n0\n\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\x7f0\r\n\r\n",
	} {
		conn, br := exchange(t, tp, req)
		resp, _ := readResponse(t, br, "POST")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%q: %d, want 400", req, resp.StatusCode)
		}
		if !closedWithin(conn, br, 2*time.Second) {
			t.Errorf("%q: the connection stayed open", req)
		}
	}
	if seen := rec.requests(); len(seen) > 0 {
		t.Errorf("the backend took %d requests", len(seen))
	}
}

// A TLS backend that sends bytes after a bodiless response: crypto/tls may hold them
// in its own buffer, where no socket peek sees them; the connection must not be
// reused, or the next request reads them as its response.
func TestTLSBackendLeftoverBytesNeverReachAnotherRequest(t *testing.T) {
	hs := httptest.NewTLSServer(http.NotFoundHandler())
	cert := hs.TLS.Certificates
	hs.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: cert})
	if err != nil {
		t.Fatal(err)
	}
	serveRaw(t, ln, "https://", func(c net.Conn, br *bufio.Reader, _ int64) {
		for {
			r, err := readReq(br)
			if err != nil {
				return
			}
			if r.URL.Path == "/nocontent" {
				// two TLS records, written back to back
				fmt.Fprint(c, "HTTP/1.1 204 No Content\r\n\r\n")
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nX-Injected: yes\r\n\r\nPOISON")
				continue
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(r.URL.Path), r.URL.Path)
		}
	})
	backend := "https://" + ln.Addr().String()
	src := &fakeLayer{name: "source", routes: map[string]Route{"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{backend}}}}
	p := New(NewChain(ChainOptions{}, src), Options{})
	u, _ := p.upstream(backend)
	u.tls.InsecureSkipVerify = true
	pl, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := p.newServer()
	go srv.Serve(p.Listener(pl))
	t.Cleanup(func() { srv.Shutdown() })
	tp := &testProxy{url: "http://" + pl.Addr().String()}

	poisoned := 0
	for i := 0; i < 20; i++ {
		_, br := exchange(t, tp, "GET /nocontent HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
		readResponse(t, br, "GET")
		time.Sleep(20 * time.Millisecond)
		_, br = exchange(t, tp, "GET /victim HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
		resp, body := readResponse(t, br, "GET")
		if body != "/victim" {
			poisoned++
			if poisoned == 1 {
				t.Logf("victim got %d %q X-Injected=%q", resp.StatusCode, body, resp.Header.Get("X-Injected"))
			}
		}
	}
	if poisoned > 0 {
		t.Errorf("%d/20 victims got another exchange's bytes as their response", poisoned)
	}
}

// An upload answered as its last byte goes out is not an early answer: the backend
// and the client connections stay usable, and the next upload on them is relayed.
// The answer and the end of sending race; many small uploads make both orders occur.
func TestUploadAnsweredAsItEndsLeavesConnectionsUsable(t *testing.T) {
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(b.Close)
	tp := rawProxy(t, Options{}, b.URL)
	const uploads = 3000
	failed := 0
	for range uploads {
		req, _ := http.NewRequest("POST", tp.url+"/upload", bytes.NewReader(make([]byte, 512)))
		req.Host = "acme.example.com"
		resp, err := tp.client.Do(req)
		if err != nil {
			failed++
			continue
		}
		if got := body(t, resp); resp.StatusCode != http.StatusOK || got != "ok" {
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d uploads failed", failed, uploads)
	}
}

// A backend that fails while a client is still uploading (it crashed, or its
// connection was reset) failed the request: that is a 502, as for any other request,
// not a 400 that blames the client. The proxy stops reading the client's body to
// answer, and that stop must not be taken for the client's failure. A backend that
// gives up on a client that stopped sending (its own body timeout) is the client's
// failure still, so that stalled uploads do not count as backend errors.
func TestBackendFailingDuringAnUploadIsABadGateway(t *testing.T) {
	cases := []struct {
		name  string
		reset bool
		after time.Duration // how long the backend waits once it has read what was sent
		want  int
	}{
		{"backend reset", true, 0, http.StatusBadGateway},
		{"backend closed", false, 0, http.StatusBadGateway},
		{"backend gave up on a stalled client", false, 2 * stallGrace, http.StatusBadRequest},
	}
	for _, c := range cases {
		b := newRawBackend(t, func(conn net.Conn, br *bufio.Reader, _ int64) {
			if !readHeader(br) {
				return
			}
			// All that was sent (the proxy's sender then waits on the client), so that
			// a close is a FIN, not a reset for unread data.
			_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = io.Copy(io.Discard, br)
			time.Sleep(c.after)
			if c.reset {
				_ = conn.(teeConn).Conn.(*net.TCPConn).SetLinger(0)
			}
		})
		tp := rawProxy(t, Options{}, b.URL)
		// The client sends 64 KiB of a 1 MiB body and waits, as a slow upload does.
		conn, br := exchange(t, tp, "POST /upload HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 1048576\r\n\r\n"+
			strings.Repeat("x", 64<<10))
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, _ := readResponse(t, br, "POST")
		if resp.StatusCode != c.want {
			t.Errorf("%s during an upload: %d, want %d", c.name, resp.StatusCode, c.want)
		}
		if !resp.Close {
			t.Errorf("%s: the answer keeps a connection whose body was not read", c.name)
		}
		conn.Close()
	}
}

// A request that times out on a reused connection is not sent again: the backend may
// be working on it. Only a connection closed before any answer loses a request that a
// retry may repeat (as Go's Transport has it).
func TestATimeoutOnAReusedConnectionIsNotRetried(t *testing.T) {
	var slow atomic.Int32
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		for {
			r, err := readReq(br)
			if err != nil {
				return
			}
			if r.URL.Path == "/slow" {
				slow.Add(1)
				time.Sleep(2 * time.Second)
				return
			}
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tp := rawProxy(t, Options{UpstreamTimeout: 300 * time.Millisecond}, b.URL)
	conn, br := exchange(t, tp, "GET /warm HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("warming the connection: %d", resp.StatusCode)
	}
	fmt.Fprint(conn, "GET /slow HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != http.StatusGatewayTimeout {
		t.Errorf("a request its backend did not answer in time: %d, want 504", resp.StatusCode)
	}
	if n := slow.Load(); n != 1 {
		t.Errorf("the backend was sent the request %d times, want once", n)
	}
}

// A backend that sends its answer's header and then its body in a write of its own
// (a body of no line feed, as minified JSON) is answered at once, whole.
func TestABodyAfterItsAnswersHeaderIsForwarded(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		for {
			if _, err := readReq(br); err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n")
			time.Sleep(50 * time.Millisecond)
			fmt.Fprint(c, `{"a":"hello"}`)
		}
	})
	tp := rawProxy(t, Options{UpstreamTimeout: 5 * time.Second}, b.URL)
	_, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	start := time.Now()
	if resp, got := readResponse(t, br, "GET"); resp.StatusCode != 200 || got != `{"a":"hello"}` {
		t.Errorf("%d %q, want 200 with the body", resp.StatusCode, got)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("answered after %s", took.Round(time.Millisecond))
	}
}

// An answer after an interim one (which the loop engine hands to fasthttp's code) keeps
// the backend's fields as they are: no Content-Type it did not send.
func TestAnAnswerAfterAnInterimOneKeepsItsFields(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		for {
			if _, err := readReq(br); err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nX-Kind: final\r\nContent-Length: 5\r\n\r\nhello")
		}
	})
	tp := rawProxy(t, Options{}, b.URL)
	_, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	resp, got := readResponse(t, br, "GET")
	if resp.StatusCode != 200 || got != "hello" || resp.Header.Get("X-Kind") != "final" {
		t.Errorf("%d %q (X-Kind %q), want the final answer", resp.StatusCode, got, resp.Header.Get("X-Kind"))
	}
	if ct, ok := resp.Header["Content-Type"]; ok {
		t.Errorf("Content-Type %q, which the backend did not send", ct)
	}
}

// An HTTP/1.0 backend (a legacy app server, a CGI gateway) answers in its version:
// the client gets the answer in HTTP/1.1, its body as the backend delimited it. One
// that also sends Transfer-Encoding frames its body faultily (RFC 9112, section 6.1):
// the body is what came until the close, as one and the same answer on either engine.
func TestAnHTTP10BackendIsAnsweredInHTTP11(t *testing.T) {
	for _, tc := range []struct{ name, answer, want string }{
		{"until the close", "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello", "hello"},
		{"sized", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", "hello"},
		{"chunked, faultily", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
				if _, err := readReq(br); err == nil {
					io.WriteString(c, tc.answer)
				}
			})
			tp := rawProxy(t, Options{}, b.URL)
			conn, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
			_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
			resp, got := readResponse(t, br, "GET")
			if resp.StatusCode != 200 || resp.Proto != "HTTP/1.1" || got != tc.want {
				t.Errorf("%s %d %q, want HTTP/1.1 200 %q", resp.Proto, resp.StatusCode, got, tc.want)
			}
		})
	}
}

// A 204 has no body whatever its fields say: it reaches the client without framing
// fields (a cache or proxy in front would wait for chunks that never come), and the
// connection carries the next exchange.
func TestANoContentAnswerCarriesNoFraming(t *testing.T) {
	b := serveRequests(t, func(c net.Conn, r *http.Request) {
		if r.URL.Path == "/next" {
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
			return
		}
		fmt.Fprint(c, "HTTP/1.1 204 No Content\r\nX-Kind: empty\r\nTransfer-Encoding: chunked\r\n\r\n")
	})
	tp := rawProxy(t, Options{}, b.URL)
	conn, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the 204: %v (so far %q)", err, head.String())
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	if h := strings.ToLower(head.String()); !strings.HasPrefix(h, "http/1.1 204") || !strings.Contains(h, "x-kind: empty") ||
		strings.Contains(h, "transfer-encoding") || strings.Contains(h, "content-length") {
		t.Errorf("the 204 reached the client as %q, want it without framing fields", head.String())
	}
	if _, err := io.WriteString(conn, "GET /next HTTP/1.1\r\nHost: acme.example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, got := readResponse(t, br, "GET"); resp.StatusCode != 200 || got != "next" {
		t.Errorf("the next answer: %d %q", resp.StatusCode, got)
	}
}

// Every answer names the proxy as its server unless the backend named itself: the
// proxy's own (a 404), a backend's read whole, and one finished by the fasthttp
// engine's code after an interim answer, on either engine.
func TestEveryAnswerNamesItsServer(t *testing.T) {
	b := serveRequests(t, func(c net.Conn, r *http.Request) {
		switch r.URL.Path {
		case "/named":
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nServer: app/1.2\r\nContent-Length: 2\r\n\r\nok")
		case "/unnamed":
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nServer:\r\nContent-Length: 2\r\n\r\nok")
		case "/hints":
			fmt.Fprint(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		default:
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	tp := rawProxy(t, Options{}, b.URL)
	for _, tc := range []struct{ host, path, want string }{
		{"acme.example.com", "/", "tenantroute"},
		{"acme.example.com", "/named", "app/1.2"},
		{"acme.example.com", "/unnamed", "tenantroute"},
		{"acme.example.com", "/hints", "tenantroute"},
		{"nobody.example.com", "/", "tenantroute"},
	} {
		_, br := exchange(t, tp, "GET "+tc.path+" HTTP/1.1\r\nHost: "+tc.host+"\r\n\r\n")
		resp, _ := readResponse(t, br, "GET")
		if got := resp.Header.Values("Server"); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s%s: Server %q, want %q", tc.host, tc.path, got, tc.want)
		}
	}
}
