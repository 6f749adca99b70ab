package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// frame is a WebSocket frame: its header (2, 4 or 10 bytes, with a 4-byte mask key
// when masked) and payload.
func frame(opcode byte, payload []byte, masked bool) []byte {
	b := []byte{0x80 | opcode}
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n < 1<<16:
		b = append(b, m|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if masked {
		b = append(b, 1, 2, 3, 4)
	}
	return append(b, payload...)
}

// The tracker finds every frame's end however the stream is cut into reads: frames
// of every length encoding, masked or not, empty ones included.
func TestFrameBoundariesWhereverTheReadsEnd(t *testing.T) {
	var stream []byte
	var ends []int
	for i, n := range []int{0, 1, 125, 126, 200, 65535, 65536, 70000, 3} {
		stream = append(stream, frame(0x2, bytes.Repeat([]byte{byte(i)}, n), i%2 == 0)...)
		ends = append(ends, len(stream))
	}
	stream = append(stream, frame(0x8, []byte{0x03, 0xe8}, false)...)
	ends = append(ends, len(stream))
	for seed := range uint64(50) {
		r := rand.New(rand.NewPCG(seed, 1))
		var f frameBoundaries
		var found []int
		for off := 0; off < len(stream); {
			chunk := stream[off:min(off+1+r.IntN(9000), len(stream))]
			for len(chunk) > 0 {
				k, _ := f.step(chunk)
				chunk, off = chunk[k:], off+k
				if f.atBoundary() {
					found = append(found, off)
				}
			}
		}
		if !equalInts(found, ends) {
			t.Fatalf("seed %d: boundaries at %v, want %v", seed, found, ends)
		}
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Draining puts the close frame between two frames, never inside one, and passes
// nothing after it; a peer's own close frame is noticed and not followed by another.
func TestGoAwayClosesBetweenFrames(t *testing.T) {
	first, second := frame(0x1, bytes.Repeat([]byte("a"), 300), false), frame(0x1, []byte("b"), false)
	for _, masked := range []bool{false, true} {
		client, peer := net.Pipe()
		got := make(chan []byte, 1)
		go func() {
			var all []byte
			buf := make([]byte, 4096)
			for {
				n, err := peer.Read(buf)
				all = append(all, buf[:n]...)
				if err != nil {
					got <- all
					return
				}
			}
		}()
		d := &direction{dst: client, masked: masked}
		if _, err := d.forward(first[:100]); err != nil { // the middle of a frame
			t.Fatal(err)
		}
		d.goAway()
		if _, err := d.forward(append(append([]byte{}, first[100:]...), second...)); err != nil {
			t.Fatal(err)
		}
		if more, _ := d.forward(second); more {
			t.Error("a direction that sent its close frame forwards more")
		}
		client.Close()
		out := <-got
		if !bytes.HasPrefix(out, first) {
			t.Fatalf("masked %t: the first frame did not pass whole", masked)
		}
		closing := out[len(first):]
		want := 4
		if masked {
			want = 8
		}
		if len(closing) != want || closing[0] != 0x88 || (closing[1]&0x80 != 0) != masked {
			t.Fatalf("masked %t: after the frame %x, want a close frame and nothing else", masked, closing)
		}
		code := []byte{closing[len(closing)-2], closing[len(closing)-1]}
		if masked {
			code[0] ^= closing[2]
			code[1] ^= closing[3]
		}
		if binary.BigEndian.Uint16(code) != 1001 {
			t.Fatalf("masked %t: close status %d, want 1001", masked, binary.BigEndian.Uint16(code))
		}
	}

	// The peer closes first: its close frame passes, and draining adds none.
	client, peer := net.Pipe()
	go func() { _, _ = peer.Read(make([]byte, 64)) }()
	d := &direction{dst: client}
	if more, err := d.forward(frame(0x8, []byte{0x03, 0xe8}, false)); more || err != nil {
		t.Fatalf("after the peer's close frame: more %t, %v", more, err)
	}
	d.goAway()
	client.Close()
}

// A stream that is not made of frames (a hostile client declaring a 2^63-byte frame)
// never gets a close frame put into it, and passes as it comes.
func TestGoAwayOnAStreamOfNoFrames(t *testing.T) {
	client, peer := net.Pipe()
	defer client.Close()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	d := &direction{dst: client}
	huge := append([]byte{0x82, 0x7f}, bytes.Repeat([]byte{0x7f, 0xff}, 4)...)
	if _, err := d.forward(huge); err != nil {
		t.Fatal(err)
	}
	d.goAway()
	for range 100 {
		if more, err := d.forward(make([]byte, 32<<10)); !more || err != nil {
			t.Fatalf("the stream stopped passing: %t %v", more, err)
		}
	}
	if d.closed {
		t.Fatal("a close frame was put inside a frame")
	}
}

// A client inside a frame that never ends (a slow, endless upload of one frame) keeps
// its tunnel from ever reaching a boundary for the close frame: the shutdown timeout
// closes both ends, and the drain returns.
func TestDrainClosesTunnelsStuckInAFrameAtTheTimeout(t *testing.T) {
	client, clientPeer := net.Pipe()
	backend, backendPeer := net.Pipe()
	defer clientPeer.Close()
	defer backendPeer.Close()
	var h handedOver
	tun := newTunnel(client, backend)
	ended := make(chan struct{})
	h.mu.Lock()
	h.beginLocked() // as hijack does
	h.mu.Unlock()
	go func() {
		defer close(ended)
		defer h.end()
		defer h.take(client, tun)()
		buf := make([]byte, 1024)
		for {
			n, err := client.Read(buf)
			if err != nil {
				return
			}
			if more, err := tun.up.forward(buf[:n]); !more || err != nil {
				return
			}
		}
	}()
	go func() { _, _ = io.Copy(io.Discard, backendPeer) }()
	// A binary frame announcing 2^62 bytes, then a trickle of its payload.
	if _, err := clientPeer.Write(append([]byte{0x82, 0xff, 0x40, 0, 0, 0, 0, 0, 0, 0}, 0, 0, 0, 0)); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
				if _, err := clientPeer.Write([]byte("payload")); err != nil {
					return
				}
			}
		}
	}()
	h.goAway()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	h.wait(ctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the drain took %v with a tunnel stuck in a frame", took)
	}
	select {
	case <-ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the stuck tunnel was not closed at the timeout")
	}
	if _, err := backendPeer.Write([]byte("x")); err == nil {
		t.Error("the backend end is still open")
	}
}

// While the proxy drains, every answer on a kept-alive connection says Connection:
// close, the backend's answers too (the backend's own Connection header, read and
// stripped as hop-by-hop, took the proxy's away): a client behind a load balancer
// otherwise keeps its connection to the draining replica until it is cut, and a
// request sent then is lost.
func TestEveryAnswerWhileDrainingClosesTheConnection(t *testing.T) {
	rec := newRecorder(t, func(_ int, _ *seenRequest, w *bufio.Writer) bool {
		io.WriteString(w, "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	src := &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{rec.URL}},
		"down.example.com": {Tenant: "down", Region: "ap", Backends: []string{"http://127.0.0.1:1"}},
	}}
	p := New(NewChain(ChainOptions{}, src), Options{ShutdownDelay: 3 * time.Second})
	addr, cancel, _ := serveUntilCancel(t, p)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	br, host := bufio.NewReader(conn), "acme.example.com"
	ask := func(path string) *http.Response {
		t.Helper()
		if _, err := io.WriteString(conn, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	if resp := ask("/before"); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before the drain: status %d, close %t", resp.StatusCode, resp.Close)
	}
	cancel()
	for !p.Draining() {
		time.Sleep(time.Millisecond)
	}
	if resp := ask("/draining"); resp.StatusCode != 200 || !resp.Close {
		t.Errorf("a proxied answer while draining: status %d, Connection: close %t; want 200 with Connection: close", resp.StatusCode, resp.Close)
	}
	// An error answer after a failed exchange too (the response is reset for it).
	conn2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	_ = conn2.SetDeadline(time.Now().Add(5 * time.Second))
	conn, br, host = conn2, bufio.NewReader(conn2), "down.example.com"
	if resp := ask("/backend-gone"); resp.StatusCode < 500 || !resp.Close {
		t.Errorf("an error answer while draining: status %d, Connection: close %t; want a 5xx with Connection: close", resp.StatusCode, resp.Close)
	}
}

// An HTTP/1.0 client's stream that never ends (server-sent events with a heartbeat) is
// cut at the shutdown timeout, and the drain returns: fasthttp's own Close of a
// connection it handed over does nothing while the stream runs.
func TestDrainCutsAnEndlessHTTP10StreamAtTheTimeout(t *testing.T) {
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		if _, err := readReq(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		for {
			if _, err := io.WriteString(c, "6\r\n:beat\n\r\n"); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	src := &fakeLayer{name: "source", routes: map[string]Route{"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{b.URL}}}}
	p := New(NewChain(ChainOptions{}, src), Options{ShutdownTimeout: 300 * time.Millisecond})
	addr, cancel, served := serveUntilCancel(t, p)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /events HTTP/1.0\r\nHost: acme.example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if head, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(head, "HTTP/1.1 200") {
		t.Fatalf("the stream's answer: %q %v", head, err)
	}
	streaming := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, br); streaming <- err }() // a client that keeps reading
	cancel()
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the drain did not return 5 s after its 300 ms timeout: the stream still runs")
	}
	select {
	case <-streaming:
	case <-time.After(2 * time.Second):
		t.Error("the client's stream was not cut")
	}
}

// serveUntilCancel serves p on a local port until cancel, which starts its drain;
// served is closed when the drain is over (waited for when the test ends).
func serveUntilCancel(t *testing.T, p *Proxy) (addr string, cancel func(), served <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.opts.Engine = testEngine
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.ServeUntil(ctx, ln, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String(), cancel, done
}

// StopNow, for a proxy whose routes stopped following their changes (the embedded
// proxy of a manager that lost its lease), skips the drain's delay: no new client is
// accepted, and a download in flight still ends whole.
func TestStopNowSkipsTheDelayNotWhatIsInFlight(t *testing.T) {
	release := make(chan struct{})
	b := newRawBackend(t, func(c net.Conn, br *bufio.Reader, _ int64) {
		if _, err := readReq(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
			return
		}
		for {
			select {
			case <-release:
				_, _ = io.WriteString(c, "4\r\nend\n\r\n0\r\n\r\n")
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := io.WriteString(c, "5\r\nline\n\r\n"); err != nil {
				return
			}
		}
	})
	src := &fakeLayer{name: "source", routes: map[string]Route{"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{b.URL}}}}
	p := New(NewChain(ChainOptions{}, src), Options{ShutdownDelay: time.Minute})
	addr, cancel, served := serveUntilCancel(t, p)

	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/download", nil)
	req.Host = "acme.example.com"
	resp, err := (&http.Transport{}).RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the download: %v %v", resp, err)
	}
	defer resp.Body.Close()
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); err != nil || line != "line\n" {
		t.Fatalf("the download's first line: %q %v", line, err)
	}
	type result struct {
		rest []byte
		err  error
	}
	read := make(chan result, 1)
	go func() { rest, err := io.ReadAll(body); read <- result{rest, err} }()

	cancel()
	p.StopNow()
	refused := false
	for deadline := time.Now().Add(2 * time.Second); !refused && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			refused = true
		} else {
			c.Close()
		}
	}
	if !refused {
		t.Fatal("still accepting 2 s after StopNow, with a minute of delay: the delay was not skipped")
	}
	select {
	case got := <-read:
		t.Fatalf("the download ended with the listener: %q, %v", got.rest, got.err)
	case <-served:
		t.Fatal("the drain ended with a download in flight")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case got := <-read:
		if got.err != nil || !strings.HasSuffix(string(got.rest), "line\nend\n") {
			t.Errorf("the download ended %q, %v; want its last line and no error", got.rest[max(0, len(got.rest)-20):], got.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the download did not end 5 s after the backend ended it")
	}
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("the drain did not end once nothing was in flight")
	}
}

// A drain's close frame that reaches a tunnel after its handler returned writes
// nothing: fasthttp puts the client connection's wrapper back in its pool then, and
// the frame would go to a nil connection (a drain test panicked so) or to the
// connection the wrapper holds next.
func TestAnEndedTunnelIsWrittenNoMore(t *testing.T) {
	client, backend := &writeCounter{}, &writeCounter{}
	var h handedOver
	tn := newTunnel(client, backend)
	release := h.take(client, tn)
	release() // the handler returns, as the drain's goAway goroutine is about to run
	tn.goAway()
	if client.writes != 0 || backend.writes != 0 {
		t.Errorf("an ended tunnel was written to: %d writes to the client, %d to the backend, want none", client.writes, backend.writes)
	}
}

// writeCounter is a connection that counts the writes to it.
type writeCounter struct {
	net.Conn
	writes int
}

func (w *writeCounter) Write(b []byte) (int, error) { w.writes++; return len(b), nil }
