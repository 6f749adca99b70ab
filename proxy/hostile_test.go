package proxy

// The hostile-client suite: each test speaks raw TCP as an attacker (or as a real
// backend with real habits) would, one test per class of attack or habit. They use
// only the proxy's defaults and the options every version of the proxy had, so each
// can be run against earlier code to show what it catches.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seenRequest is what a backend received, as net/http parsed it.
type seenRequest struct {
	Method, Path string
	Header       http.Header
	RawNames     []string // header names exactly as they arrived
	Body         []byte   // up to 1 MiB of it
	BodyLen      int64
	BodyErr      error
}

// recorder is a raw backend: it parses each request on each connection with
// net/http, records it with its header names as sent, and answers with respond.
type recorder struct {
	URL      string
	mu       sync.Mutex
	seen     []seenRequest
	inFlight atomic.Int64 // requests whose first byte arrived and that are not recorded yet
	respond  func(n int, r *seenRequest, w *bufio.Writer) (keepOpen bool)
}

// take returns the requests seen so far and forgets them.
func (rec *recorder) take() []seenRequest {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	seen := rec.seen
	rec.seen = nil
	return seen
}

func (rec *recorder) requests() []seenRequest {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seenRequest(nil), rec.seen...)
}

// newRecorder starts a recording backend; respond decides each answer (nil: 200 "ok").
func newRecorder(t testing.TB, respond func(n int, r *seenRequest, w *bufio.Writer) bool) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{URL: "http://" + ln.Addr().String(), respond: respond}
	if rec.respond == nil {
		rec.respond = func(_ int, r *seenRequest, w *bufio.Writer) bool {
			fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nX-Seen-Tenant: %s\r\nContent-Length: 2\r\n\r\nok", strings.Join(r.Header.Values("X-Tenant-Id"), ","))
			return true
		}
	}
	var conns sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			conns.Go(func() {
				rec.serve(c)
				mu.Lock()
				delete(open, c)
				mu.Unlock()
			})
		}
	}()
	return rec
}

func (rec *recorder) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br, bw := bufio.NewReader(c), bufio.NewWriter(c)
	for n := 0; ; n++ {
		if _, err := br.Peek(1); err != nil {
			return
		}
		rec.inFlight.Add(1)
		r, err := readRawRequest(br)
		if err != nil {
			rec.inFlight.Add(-1)
			return
		}
		rec.mu.Lock()
		rec.seen = append(rec.seen, *r)
		rec.mu.Unlock()
		rec.inFlight.Add(-1)
		keep := rec.respond(n, r, bw)
		if bw.Flush() != nil || !keep {
			return
		}
	}
}

// readRawRequest reads one request: its header names as sent, then its body by the
// framing net/http finds in the header.
func readRawRequest(br *bufio.Reader) (*seenRequest, error) {
	var head []byte
	var names []string
	for first := true; ; first = false {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		head = append(head, line...)
		trimmed := strings.TrimRight(line, "\r\n")
		if trimmed == "" {
			break
		}
		if i := strings.IndexByte(trimmed, ':'); i > 0 && !first {
			names = append(names, trimmed[:i])
		}
	}
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		return nil, err
	}
	r := &seenRequest{Method: req.Method, Path: req.URL.RequestURI(), Header: req.Header, RawNames: names}
	keep := func(src io.Reader) {
		var kept bytes.Buffer
		r.BodyLen, r.BodyErr = io.Copy(io.MultiWriter(&capped{&kept, 1 << 20}), src)
		r.Body = kept.Bytes()
	}
	switch {
	case len(req.TransferEncoding) > 0:
		keep(httputil.NewChunkedReader(br))
		for r.BodyErr == nil { // trailer section, up to its empty line
			line, err := br.ReadString('\n')
			if err != nil || strings.TrimRight(line, "\r\n") == "" {
				r.BodyErr = err
				break
			}
		}
	case req.ContentLength > 0:
		keep(io.LimitReader(br, req.ContentLength))
		if r.BodyErr == nil && r.BodyLen < req.ContentLength {
			r.BodyErr = io.ErrUnexpectedEOF
		}
	}
	if r.BodyErr != nil {
		return r, r.BodyErr
	}
	return r, nil
}

// capped keeps the first n bytes written to it and counts the rest as written.
type capped struct {
	b *bytes.Buffer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.n - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// rawProxy starts a proxy with one tenant, acme.example.com, served by backends.
func rawProxy(t testing.TB, opts Options, backends ...string) *testProxy {
	t.Helper()
	return startProxy(t, map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: backends},
		"down.example.com": {Tenant: "down", Region: "ap", Backends: []string{"http://127.0.0.1:1"}},
	}, opts)
}

// exchange writes raw bytes to a fresh connection and returns it with a reader.
func exchange(t *testing.T, tp *testProxy, raw string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn := tp.dial(t)
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// readResponse reads one whole response.
func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response body: %v", err)
	}
	return resp, string(b)
}

// closedWithin reports whether the proxy closes the connection within d.
func closedWithin(conn net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	return err == io.EOF || (err != nil && !isTimeout(err))
}

// checkTenant fails if any request a backend saw carries a tenant other than acme, or
// a header spelled like the tenant header other than the proxy's own.
func checkTenant(t testing.TB, seen []seenRequest) {
	t.Helper()
	for _, r := range seen {
		if got := r.Header.Values("X-Tenant-Id"); len(got) != 1 || got[0] != "acme" {
			t.Errorf("%s %s reached the backend with X-Tenant-ID %q", r.Method, r.Path, got)
		}
		for _, name := range r.RawNames {
			if foldHeaderName(name) == "x-tenant-id" && name != "X-Tenant-Id" && name != "X-Tenant-ID" {
				t.Errorf("%s %s reached the backend with the header %q", r.Method, r.Path, name)
			}
		}
	}
}

// foldHeaderName is how CGI-style servers see a header name: case and _ <-> - folded.
func foldHeaderName(name string) string {
	return strings.ReplaceAll(strings.ToLower(name), "_", "-")
}

const wsHandshake = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"

// A backend that refuses an upgrade with 200 and keeps its connection open must not
// turn the client's connection into a raw pipe: the next request the client writes
// must be read and rewritten by the proxy, not reach the backend as sent.
func TestHostileRefusedUpgradeKeepsFraming(t *testing.T) {
	rec := newRecorder(t, func(n int, r *seenRequest, w *bufio.Writer) bool {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Seen-Tenant: %s\r\n\r\nno", r.Header.Get("X-Tenant-Id"))
		return true
	})
	tp := rawProxy(t, Options{}, rec.URL)
	conn, br := exchange(t, tp, "GET /ws HTTP/1.1\r\nHost: acme.example.com\r\n"+wsHandshake+"\r\n")
	if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != "no" {
		t.Fatalf("refused upgrade: %d %q", resp.StatusCode, body)
	}
	fmt.Fprint(conn, "GET /next HTTP/1.1\r\nHost: acme.example.com\r\nX-Tenant-ID: victim\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err == nil {
		resp.Body.Close()
		if got := resp.Header.Get("X-Seen-Tenant"); got != "acme" {
			t.Errorf("the next request on the connection reached the backend as tenant %q", got)
		}
	}
	checkTenant(t, rec.requests())
}

// Only a GET carrying the WebSocket handshake is an upgrade; anything else is an
// ordinary request, with the hop-by-hop Upgrade header removed.
func TestHostileUpgradeNeedsTheWebSocketHandshake(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	for _, req := range []string{
		"POST /ws HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 0\r\n" + wsHandshake + "\r\n",
		"GET /ws HTTP/1.1\r\nHost: acme.example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: acme.example.com\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n",
	} {
		_, br := exchange(t, tp, req)
		if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
			t.Errorf("%q: %d", strings.SplitN(req, "\r\n", 2)[0], resp.StatusCode)
		}
	}
	for _, r := range rec.requests() {
		if r.Header.Get("Upgrade") != "" || r.Header.Get("Http2-Settings") != "" {
			t.Errorf("%s %s was forwarded as an upgrade: %v", r.Method, r.Path, r.Header)
		}
	}
	if n := len(rec.requests()); n != 3 {
		t.Errorf("the backend saw %d requests, want 3", n)
	}
}

// heapPeak samples the live heap until stop is called and returns the highest value.
func heapPeak() (stop func() uint64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return func() uint64 { close(done); <-finished; return peak.Load() }
}

func liveHeap() uint64 {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// One request with a huge chunked body, whatever the method, must neither be held in
// memory nor reach the backend whole: it is refused with 413 past the limit (64 MiB
// by default), and the connection is closed.
func TestHostileHugeChunkedBodyIsBounded(t *testing.T) {
	var received atomic.Int64
	rec := newRecorder(t, func(_ int, r *seenRequest, w *bufio.Writer) bool {
		received.Add(r.BodyLen)
		fmt.Fprint(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	tp := rawProxy(t, Options{}, rec.URL)
	for _, method := range []string{"GET", "POST"} {
		base := liveHeap()
		stop := heapPeak()
		conn := tp.dial(t)
		_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
		go func() {
			bw := bufio.NewWriterSize(conn, 64<<10)
			fmt.Fprintf(bw, "%s /upload HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n\r\n", method)
			chunk := bytes.Repeat([]byte("x"), 32<<10)
			for sent := 0; sent < 300<<20; sent += len(chunk) {
				fmt.Fprintf(bw, "%x\r\n%s\r\n", len(chunk), chunk)
			}
			fmt.Fprint(bw, "0\r\n\r\n")
			_ = bw.Flush()
		}()
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		peak := stop()
		if err != nil {
			t.Fatalf("%s: no answer: %v", method, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Errorf("%s with a 300 MB body: %d, want 413", method, resp.StatusCode)
		}
		if !closedWithin(conn, br, 5*time.Second) {
			t.Errorf("%s: the connection stayed open after a refused body", method)
		}
		if grew := int64(peak) - int64(base); grew > 32<<20 {
			t.Errorf("%s: the heap grew by %d MiB while the body streamed", method, grew>>20)
		}
	}
	if n := received.Load(); n > 0 {
		t.Errorf("the backend received a complete body of %d bytes", n)
	}
}

// An answer given before the request body was read (unknown host, bad host, no
// backend) closes the connection: the unread body must never be parsed as the next
// request, nor make the client wait for a drain.
func TestHostileEarlyAnswerWithUnreadBodyCloses(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	// The server reads up to 8 KiB of a body before the handler runs; past that, the
	// answer comes while the rest is unread.
	unread := strings.Repeat("x", 9000) + "GET /smuggled HTTP/1.1\r\nHost: acme.example.com\r\n\r\n"
	for _, host := range []string{"nobody.example.com", "bad_host", "down.example.com"} {
		conn, br := exchange(t, tp, "POST / HTTP/1.1\r\nHost: "+host+"\r\nContent-Length: 1048576\r\n\r\n"+unread)
		resp, _ := readResponse(t, br, "POST")
		if resp.StatusCode < 400 {
			t.Errorf("%s: %d", host, resp.StatusCode)
		}
		if !closedWithin(conn, br, 2*time.Second) {
			t.Errorf("%s: answered %d with the body unread, and kept the connection open", host, resp.StatusCode)
		}
	}
	for _, r := range rec.requests() {
		t.Errorf("the backend saw %s %s", r.Method, r.Path)
	}
}

// Connection may name any header, but never the framing ones: the body must arrive
// whole and the next request on the connection must be read where it starts.
func TestHostileConnectionCannotNameFramingHeaders(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	_, br := exchange(t, tp,
		"POST /a HTTP/1.1\r\nHost: acme.example.com\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello"+
			"POST /b HTTP/1.1\r\nHost: acme.example.com\r\nConnection: Transfer-Encoding, Host\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nworld\r\n0\r\n\r\n")
	for range 2 {
		if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != 200 {
			t.Errorf("status %d", resp.StatusCode)
		}
	}
	seen := rec.requests()
	if len(seen) != 2 || string(seen[0].Body) != "hello" || string(seen[1].Body) != "world" {
		for _, r := range seen {
			t.Logf("backend saw %s %s body %q", r.Method, r.Path, r.Body)
		}
		t.Fatalf("the bodies did not arrive as framed")
	}
	checkTenant(t, seen)
}

// A request with both Content-Length and Transfer-Encoding is read by its chunked
// framing, forwarded with one framing, and the connection is closed after the answer
// (RFC 9112 6.1): what the Content-Length would have framed differently is never read
// as another request.
func TestHostileContentLengthWithTransferEncodingCloses(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	conn, br := exchange(t, tp, "POST /a HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	resp, _ := readResponse(t, br, "POST")
	if resp.StatusCode == 200 {
		if seen := rec.requests(); len(seen) == 0 || string(seen[0].Body) != "hello" {
			t.Errorf("the body did not arrive by its chunked framing: %+v", seen)
		}
	}
	if !closedWithin(conn, br, 2*time.Second) {
		t.Error("the connection stayed open after a request with both Content-Length and Transfer-Encoding")
	}
	for _, r := range rec.requests() {
		if r.Path == "/smuggled" {
			t.Error("the request after it reached the backend")
		}
		if r.Header.Get("Content-Length") != "" && len(r.Header.Values("Transfer-Encoding")) > 0 {
			t.Error("forwarded with both framings")
		}
	}
}

// Backends close idle keep-alive connections on their own schedule (Node 5 s, gunicorn
// 2 s); requests spaced just past that must not fail, and a POST is never replayed.
func TestHostileShortKeepAliveBackend(t *testing.T) {
	url, posts, _ := postBackend(t, time.Second)
	tp := rawProxy(t, Options{}, url)
	if failed := spacedPosts(t, tp, 4, 1500*time.Millisecond); failed > 0 {
		t.Errorf("%d of 4 POSTs failed against a backend with a 1 s keep-alive", failed)
	}
	if posts.Load() != 4 {
		t.Errorf("the backend processed %d POSTs, want 4", posts.Load())
	}
}

// postBackend is a net/http backend with the given keep-alive that answers a POST
// with the size of its body, and counts POSTs and connections.
func postBackend(t *testing.T, idle time.Duration) (url string, posts, conns *atomic.Int64) {
	posts = new(atomic.Int64)
	url, conns = countingBackend(t, idle, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		posts.Add(1)
		fmt.Fprintf(w, "%d", n)
	})
	return url, posts, conns
}

// countingBackend is a net/http backend that counts the connections it accepted.
func countingBackend(t *testing.T, idle time.Duration, h http.HandlerFunc) (string, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := &http.Server{Handler: h, IdleTimeout: idle, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), &conns
}

// spacedPosts sends n POSTs gap apart and returns how many failed.
func spacedPosts(t *testing.T, tp *testProxy, n int, gap time.Duration) (failed int) {
	for i := range n {
		if i > 0 {
			time.Sleep(gap)
		}
		req, _ := http.NewRequest(http.MethodPost, tp.url+"/", strings.NewReader("payload"))
		req.Host = "acme.example.com"
		resp, err := tp.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := body(t, resp); resp.StatusCode != 200 || got != "7" {
			failed++
			t.Logf("POST %d: %d %q", i, resp.StatusCode, got)
		}
	}
	return failed
}

// A backend that takes a request and closes without answering: a POST is not
// replayed (502, processed once); a GET on a reused connection is retried on a
// fresh one, as Go's Transport does.
func TestHostileRequestsLostOnReusedConnections(t *testing.T) {
	rec := newRecorder(t, func(n int, r *seenRequest, w *bufio.Writer) bool {
		if n == 1 { // the second request of each connection: taken, never answered
			return false
		}
		fmt.Fprint(w, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	tp := rawProxy(t, Options{}, rec.URL)
	conn, br := exchange(t, tp, "GET /1 HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("first GET: %d", resp.StatusCode)
	}
	fmt.Fprint(conn, "GET /2 HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
		t.Errorf("a GET lost on a reused connection: %d, want a retry", resp.StatusCode)
	}
	fmt.Fprint(conn, "POST /3 HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 1\r\n\r\nx")
	if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a POST lost on a reused connection: %d, want 502", resp.StatusCode)
	}
	posts := 0
	for _, r := range rec.requests() {
		if r.Method == "POST" {
			posts++
		}
	}
	if posts != 1 {
		t.Errorf("the backend saw the POST %d times", posts)
	}
}

// Real apps send large headers (session cookies): they pass up to 64 KiB; beyond, the
// client gets 502, never 503 "no backend" for a backend that answered.
func TestHostileLargeResponseHeaders(t *testing.T) {
	rec := newRecorder(t, func(_ int, r *seenRequest, w *bufio.Writer) bool {
		size, _ := strconv.Atoi(strings.TrimPrefix(r.Path, "/"))
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nSet-Cookie: s=%s\r\nContent-Length: 2\r\n\r\nok", strings.Repeat("c", size))
		return true
	})
	tp := rawProxy(t, Options{}, rec.URL)
	for size, want := range map[int]int{6 << 10: 200, 60 << 10: 200, 100 << 10: http.StatusBadGateway} {
		_, br := exchange(t, tp, fmt.Sprintf("GET /%d HTTP/1.1\r\nHost: acme.example.com\r\n\r\n", size))
		resp, body := readResponse(t, br, "GET")
		if resp.StatusCode != want {
			t.Errorf("a %d KiB Set-Cookie: %d %q, want %d", size>>10, resp.StatusCode, body, want)
		}
		if want == 200 && len(resp.Header.Get("Set-Cookie")) != size+2 {
			t.Errorf("a %d KiB Set-Cookie arrived as %d bytes", size>>10, len(resp.Header.Get("Set-Cookie")))
		}
	}
}

// Headers the backend trusts cannot be forged in any spelling: CGI, WSGI and PHP read
// X_Tenant_ID and X-Tenant-ID as the same variable.
func TestHostileForgedHeaderSpellings(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	forged := []string{"X_Tenant_ID", "x_tenant_id", "X-Tenant_Id", "X_TENANT-ID", "X-Real-IP", "x_real_ip",
		"True-Client-IP", "True_Client_IP", "X_Forwarded_For", "X-Forwarded-Port", "X_Forwarded_Proto",
		"X-Forwarded-Prefix", "Forwarded", "X-Forwarded-Server", "CF-Connecting-IP", "Cf_Connecting_Ipv6",
		"Fastly-Client-IP", "X-Client-IP", "X_Cluster_Client_IP", "Client-IP", "CloudFront-Viewer-Address", "Fly-Client-IP",
		"X-Azure-ClientIP"}
	var req strings.Builder
	req.WriteString("GET / HTTP/1.1\r\nHost: acme.example.com\r\n")
	for _, name := range forged {
		req.WriteString(name + ": 6.6.6.6\r\n")
	}
	req.WriteString("\r\n")
	_, br := exchange(t, tp, req.String())
	if resp, _ := readResponse(t, br, "GET"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	seen := rec.requests()
	if len(seen) != 1 {
		t.Fatalf("the backend saw %d requests", len(seen))
	}
	checkTenant(t, seen)
	for name, values := range seen[0].Header {
		for _, v := range values {
			if strings.Contains(v, "6.6.6.6") {
				t.Errorf("the client's %s: %s reached the backend", name, v)
			}
		}
	}
}

// Hop-by-hop response headers go, whatever case the backend wrote them in.
func TestHostileResponseHopByHopInAnyCase(t *testing.T) {
	rec := newRecorder(t, func(_ int, _ *seenRequest, w *bufio.Writer) bool {
		fmt.Fprint(w, "HTTP/1.1 200 OK\r\nconnection: x-internal\r\nx-internal: secret\r\nkeep-alive: timeout=5\r\n"+
			"proxy-connection: keep-alive\r\nte: trailers\r\ntrailer: x-sum\r\nupgrade: h2c\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	tp := rawProxy(t, Options{}, rec.URL)
	_, br := exchange(t, tp, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	resp, body := readResponse(t, br, "GET")
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	for _, h := range []string{"X-Internal", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Upgrade"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("the backend's hop-by-hop %s: %s reached the client", h, v)
		}
	}
}

// Streams (SSE, long-poll, downloads) outlive any whole-message deadline: the limit is
// on the time between reads. A backend that stalls mid-stream is cut.
func TestHostileLongStreamsAndStalledBackends(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		events := 12
		if r.URL.Path == "/stall" {
			events = 1
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(250 * time.Millisecond)
		}
		if r.URL.Path == "/stall" {
			time.Sleep(5 * time.Second)
		}
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	// One second between reads: the 3 s stream must pass, the stall must be cut.
	tp := rawProxy(t, Options{UpstreamTimeout: time.Second}, "http://"+ln.Addr().String())
	resp := tp.get(t, "acme.example.com", "/events", nil)
	got, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || err != nil || strings.Count(string(got), "data:") != 12 {
		t.Errorf("a 3 s event stream: %d, %d events, %v", resp.StatusCode, strings.Count(string(got), "data:"), err)
	}
	start := time.Now()
	resp = tp.get(t, "acme.example.com", "/stall", nil)
	_, _ = io.ReadAll(resp.Body)
	if waited := time.Since(start); waited > 4*time.Second {
		t.Errorf("a stalled stream was held for %s", waited.Round(time.Millisecond))
	}
}

// Bodies pass byte for byte: a multipart body is not parsed and re-serialised.
func TestHostileBodiesPassByteExact(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	body := "preamble the parser would drop\r\n--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--b--\r\nepilogue"
	_, br := exchange(t, tp, fmt.Sprintf("POST /form HTTP/1.1\r\nHost: acme.example.com\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	if resp, _ := readResponse(t, br, "POST"); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if seen := rec.requests(); len(seen) != 1 || string(seen[0].Body) != body {
		t.Errorf("the backend got a different body: %+v", seen)
	}
}

// A flood of random hosts cannot evict a real route: negative answers live in their
// own bounded space, and the hot route is still served from memory.
func TestHostileRandomHostFloodKeepsRealRoutes(t *testing.T) {
	src := newSource()
	c := NewChain(ChainOptions{MaxEntries: 1000}, src)
	hot := []byte("acme.auth.example.com")
	if _, o := c.Lookup(context.Background(), hot); o != OutcomeResolved {
		t.Fatalf("first lookup: %v", o)
	}
	for i := range 100_000 {
		if _, o := c.Lookup(context.Background(), []byte(fmt.Sprintf("r%d.flood.example.com", i))); o != OutcomeNotFound {
			t.Fatalf("random host: %v", o)
		}
	}
	calls := src.calls.Load()
	if _, o := c.Lookup(context.Background(), hot); o != OutcomeHit {
		t.Errorf("after the flood the hot route was %v, want a memory hit", o)
	}
	if src.calls.Load() != calls {
		t.Error("the hot route was looked up again after the flood")
	}
}

// A target that starts with "//" is an origin-form path (RFC 9112 3.2.1): the route
// comes from Host, never from the path. fasthttp reads "//victim.../x?u=https://y" as
// a scheme-relative URL and took victim's host from it, so that a front edge that
// checks the Host header's tenant (an allowlist, a WAF) let the request reach another
// tenant. The proxy refuses such a target; one it can forward byte for byte goes to
// the Host header's tenant.
func TestHostileTargetCannotNameAnotherTenant(t *testing.T) {
	acme, victim := newRecorder(t, nil), newRecorder(t, nil)
	tp := startProxy(t, map[string]Route{
		"acme.example.com":   {Tenant: "acme", Region: "eu", Backends: []string{acme.URL}},
		"victim.example.com": {Tenant: "victim", Region: "eu", Backends: []string{victim.URL}},
	}, Options{})
	for _, target := range []string{
		"//victim.example.com/login?next=https://example.org/",
		"//victim.example.com/a://b",
		"//victim.example.com?u=http://x",
		"//victim.example.com/plain",
	} {
		_, br := exchange(t, tp, "GET "+target+" HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
		resp, _ := readResponse(t, br, "GET")
		if got := victim.take(); len(got) > 0 {
			t.Errorf("GET %s with Host acme.example.com reached the other tenant's backend: %+v", target, got[0].Header)
		}
		seen := acme.take()
		switch {
		case resp.StatusCode == http.StatusBadRequest && len(seen) == 0:
		case resp.StatusCode == http.StatusOK && len(seen) == 1 && seen[0].Path == target:
			checkTenant(t, seen)
		default:
			t.Errorf("GET %s with Host acme.example.com: status %d, acme's backend saw %d requests %v; want a 400, or the path as sent at acme's backend",
				target, resp.StatusCode, len(seen), seen)
		}
	}
}

// A route's region is its TenantRoute's spec.region, which a tenant writes: a name no
// Region has gives the route no backend (503), and must not give every proxy a
// latency histogram of its own either, or a tenant editing the name over and over
// grows every proxy's memory and scrape without end. Only a route with backends (an
// existing Region, which only an administrator creates) is measured.
func TestARegionNamedByATenantAddsNoSeries(t *testing.T) {
	tp := startProxy(t, map[string]Route{
		"made-up.example.com": {Tenant: "acme", Region: "made-up-region-4f1c"},
	}, Options{})
	resp := tp.get(t, "made-up.example.com", "/", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a route without backends: %d, want 503", resp.StatusCode)
	}
	if upstreamSeconds.DeleteLabelValues("made-up-region-4f1c") {
		t.Error("a region without backends has a tenantroute_proxy_upstream_duration_seconds series")
	}
}

// A client that closes its side once its requests are sent (a half-close, as `nc -N`
// and some HTTP/1.0 tools end what they send) still gets the answers to all it sent,
// however slow the backend, and then the connection closes.
func TestAHalfClosedClientIsAnswered(t *testing.T) {
	url, _ := countingBackend(t, time.Minute, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		fmt.Fprint(w, r.URL.Path)
	})
	tp := rawProxy(t, Options{}, url)
	conn, br := exchange(t, tp, "GET /1 HTTP/1.1\r\nHost: acme.example.com\r\n\r\nGET /2 HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	_ = conn.(*net.TCPConn).CloseWrite()
	for _, want := range []string{"/1", "/2"} {
		if resp, got := readResponse(t, br, "GET"); resp.StatusCode != 200 || got != want {
			t.Errorf("after a half-close: %d %q, want 200 %q", resp.StatusCode, got, want)
		}
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the answers: %v, want the connection closed", err)
	}
}

// A field spelled like a framing field with an underscore (Content_Length) frames
// nothing, for the proxy as for fasthttp and the backends: the bytes after the header
// are the client's next request, which gets the proxy's own headers like any other.
// Read as a length, they would reach the backend as a body it does not frame: a
// second request, smuggled past the tenant header.
func TestUnderscoredFramingFieldsFrameNothing(t *testing.T) {
	rec := newRecorder(t, nil)
	tp := rawProxy(t, Options{}, rec.URL)
	second := "GET /second HTTP/1.1\r\nHost: acme.example.com\r\nX-Tenant-Id: victim\r\n\r\n"
	_, br := exchange(t, tp, fmt.Sprintf("GET /first HTTP/1.1\r\nHost: acme.example.com\r\nContent_Length: %d\r\n\r\n%s", len(second), second))
	for range 2 {
		if resp, got := readResponse(t, br, "GET"); resp.StatusCode != 200 || got != "ok" || resp.Header.Get("X-Seen-Tenant") != "acme" {
			t.Errorf("%d %q, tenant %q: want 200 from the backend, for acme", resp.StatusCode, got, resp.Header.Get("X-Seen-Tenant"))
		}
	}
	seen := rec.requests()
	if len(seen) != 2 || seen[0].Path != "/first" || seen[1].Path != "/second" || seen[0].BodyLen != 0 {
		t.Errorf("the backend saw %d requests, want /first without a body and /second: %+v", len(seen), seen)
	}
	checkTenant(t, seen)
}

// A small body that comes in a read of its own, after the header (as clients send a
// POST's body in a segment of its own), is read and forwarded; so is one that comes a
// byte at a time.
func TestABodyAfterItsHeaderIsForwarded(t *testing.T) {
	url, _ := countingBackend(t, time.Minute, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s", b)
	})
	tp := rawProxy(t, Options{ClientHeaderTimeout: 5 * time.Second, ClientReadTimeout: 5 * time.Second}, url)
	for _, step := range []int{13, 1} {
		conn := tp.dial(t)
		fmt.Fprint(conn, "POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 13\r\n\r\n")
		body := `{"a":"hello"}`
		for i := 0; i < len(body); i += step {
			time.Sleep(20 * time.Millisecond)
			_, _ = io.WriteString(conn, body[i:min(i+step, len(body))])
		}
		if resp, got := readResponse(t, bufio.NewReader(conn), "POST"); resp.StatusCode != 200 || got != body {
			t.Errorf("a body %d bytes a write after its header: %d %q, want 200 %q", step, resp.StatusCode, got, body)
		}
	}
}
