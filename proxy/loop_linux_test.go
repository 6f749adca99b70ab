package proxy

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startLoops serves p on the loop engine itself, without ServeUntil's drain, so that a
// test can look into its loops; it returns the engine and its address.
func startLoops(t *testing.T, p *Proxy) (*loopEngine, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := p.newServer()
	handoff := newHandoffListener(p, srv, ln.Addr())
	e, err := startLoopEngine(p, srv, ln, handoff)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(handoff) }()
	t.Cleanup(func() { e.stopAccepting(); e.cut(); e.exited.Wait(); _ = srv.Shutdown() })
	return e, ln.Addr().String()
}

// onLoops runs f on each loop's thread, between two rounds, and waits for it.
func onLoops(e *loopEngine, f func(l *loop)) {
	for _, l := range e.loops {
		done := make(chan struct{})
		if l.post(func() { f(l); close(done) }) {
			<-done
		}
	}
}

// A client that pipelines while its answer is out, then resets its connection, is
// closed at the reset. Its reads are held to a header's worth meanwhile: were its
// failure read as data, the loop would read what it sent a byte a round (the reset is
// reported at every round), keeping each byte, up to its whole receive buffer.
func TestAPipeliningClientThatResetsIsReadNoMore(t *testing.T) {
	release := make(chan struct{})
	backend := serveRequests(t, func(c net.Conn, _ *http.Request) {
		<-release // the first request's answer stays out
	})
	t.Cleanup(func() { close(release) })
	const headerBytes = 4 << 10
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{backend.URL}}}}),
		Options{Engine: EngineLoop, MaxRequestHeaderBytes: headerBytes})
	e, addr := startLoops(t, p)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	waitFor(t, 5*time.Second, "the request at the backend", func() bool { return backend.conns.Load() == 1 })
	// Pipelined: more than the loop reads while the answer is out, less than the
	// kernel's buffers take, so that the write returns.
	if _, err := io.WriteString(conn, strings.Repeat("GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n", 64<<10/42)); err != nil {
		t.Fatal(err)
	}
	held := func() (held bool) {
		onLoops(e, func(l *loop) {
			for _, c := range l.conns {
				held = held || c.client && c.events&unix.EPOLLIN == 0
			}
		})
		return held
	}
	waitFor(t, 5*time.Second, "the client's reads held", held)
	_ = conn.(*net.TCPConn).SetLinger(0)
	conn.Close() // a reset, with what the loop did not read still in its buffer

	most := sampleUntilClosed(t, e, func(c *lconn) int { return len(c.in) })
	if most > headerBytes+1 {
		t.Errorf("the client that reset was read on: %d bytes held, want a header's worth (%d) at most", most, headerBytes+1)
	}
}

// A stream's backend that resets while its client is slower (its reads held) ends the
// stream at the reset: were its failure read as data, the loop would read the rest of
// its receive buffer into the client's unsent answer, a read a round.
func TestAStreamsBackendThatResetsIsReadNoMore(t *testing.T) {
	backend := serveRequests(t, func(c net.Conn, _ *http.Request) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
		chunk := make([]byte, 64<<10)
		for {
			// Until the proxy holds its reads and every buffer between is full.
			_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
			if _, err := c.Write(chunk); err != nil {
				break
			}
		}
		_ = c.(teeConn).Conn.(*net.TCPConn).SetLinger(0)
		c.Close() // with a reset
	})
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{backend.URL}}}}), Options{Engine: EngineLoop})
	e, addr := startLoops(t, p)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10) // a slow client: it reads nothing
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	waitFor(t, 5*time.Second, "the stream's backend reads held", func() (held bool) {
		onLoops(e, func(l *loop) {
			for _, c := range l.conns {
				held = held || !c.client && c.events&unix.EPOLLIN == 0
			}
		})
		return held
	})
	// One read of the backend, with its answer's header, is what a paused stream holds.
	most := sampleUntilClosed(t, e, func(c *lconn) int { return len(c.out) })
	if limit := 64<<10 + 1<<10; most > limit {
		t.Errorf("the stream whose backend reset was read on: %d bytes held for its client, want one read (%d) at most", most, limit)
	}
}

// sampleUntilClosed measures the loops' client connections between rounds until none
// is left, and returns the largest measure.
func sampleUntilClosed(t *testing.T, e *loopEngine, measure func(c *lconn) int) int {
	t.Helper()
	most, open := 0, true
	for deadline := time.Now().Add(5 * time.Second); open && time.Now().Before(deadline); {
		open = false
		onLoops(e, func(l *loop) {
			for _, c := range l.conns {
				if c.client {
					open, most = true, max(most, measure(c))
				}
			}
		})
	}
	if open {
		t.Fatal("the connection is still served 5 s after the reset")
	}
	return most
}
