package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// startLoops serves p on the loop engine itself, whatever the suite's engine (only
// the loop hands connections over), without ServeUntil's drain, so that a test can
// look into its loops; it returns the engine and its address.
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

// The loops leave the runtime a P of its own: were every P held by a loop blocked in
// epoll_wait, sysmon would take one back under load and wake a thread to find nothing
// to do. A second engine in the process runs as many loops and adds no P. (Where the
// suite runs with GOMAXPROCS set by hand or under a CPU limit, there is no spare P.)
func TestLoopsLeaveTheRuntimeAnIdleP(t *testing.T) {
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{}}), Options{})
	loopProcs.Lock()
	spare := 0
	if procs := runtime.GOMAXPROCS(0); procs == loopProcs.set ||
		spareP(procs, runtime.NumCPU(), os.Getenv("GOMAXPROCS") != "") && !cpuLimited(os.ReadFile) {
		spare = 1
	}
	loopProcs.Unlock()
	e, _ := startLoops(t, p)
	procs := runtime.GOMAXPROCS(0)
	if len(e.loops) != procs-spare || len(e.loops) < 1 {
		t.Fatalf("%d loops with GOMAXPROCS %d: want %d P more than loops", len(e.loops), procs, spare)
	}
	e2, _ := startLoops(t, p)
	if len(e2.loops) != len(e.loops) || runtime.GOMAXPROCS(0) != procs {
		t.Fatalf("a second engine: %d loops, GOMAXPROCS %d; want %d and %d", len(e2.loops), runtime.GOMAXPROCS(0), len(e.loops), procs)
	}
}

// GOMAXPROCS set by hand, or under a CPU limit, gets no spare P: it
// would let one thread more than the limit's cores run Go code, and the quota throttle
// the process.
func TestASpareLoopPOnlyWhereNothingBoundsGOMAXPROCS(t *testing.T) {
	for _, tc := range []struct {
		procs, cpus int
		explicit    bool
		want        bool
	}{
		{procs: 2, cpus: 2, want: true},
		{procs: 8, cpus: 8, want: true},
		{procs: 2, cpus: 8, want: false}, // the runtime's default under a 2-CPU limit
		{procs: 2, cpus: 2, explicit: true, want: false},
		{procs: 16, cpus: 8, explicit: true, want: false},
	} {
		if got := spareP(tc.procs, tc.cpus, tc.explicit); got != tc.want {
			t.Errorf("GOMAXPROCS %d on %d CPUs (set by hand: %v): spare P %v, want %v", tc.procs, tc.cpus, tc.explicit, got, tc.want)
		}
	}
	// A quota the runtime rounds up to the CPUs (1 CPU on a 2-CPU node: GOMAXPROCS 2)
	// is read from the cgroup.
	for _, tc := range []struct {
		files   map[string]string
		limited bool
	}{
		{files: map[string]string{"/sys/fs/cgroup/cpu.max": "100000 100000\n"}, limited: true},
		{files: map[string]string{"/sys/fs/cgroup/cpu.max": "max 100000\n"}, limited: false},
		{files: map[string]string{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000\n"}, limited: true},
		{files: map[string]string{"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1\n"}, limited: false},
		{files: map[string]string{}, limited: false},
	} {
		read := func(path string) ([]byte, error) {
			if v, ok := tc.files[path]; ok {
				return []byte(v), nil
			}
			return nil, os.ErrNotExist
		}
		if got := cpuLimited(read); got != tc.limited {
			t.Errorf("cgroup files %q: limited %v, want %v", tc.files, got, tc.limited)
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
		Options{MaxRequestHeaderBytes: headerBytes})
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

// A stream's backend that resets while its client is slower (its reads held) is read
// no further until the client took what was written: the body it sent before the reset
// may be whole, and reaches the client if so; if not, the client's connection is cut
// (its header said more would come). Were the reset read at once, at every round it is
// reported, the rest of the backend's receive buffer would pile up as the client's
// unsent answer; were the stream ended at the reset, a whole body would be cut.
func TestAStreamsBackendThatResetsIsReadAtTheClientsPace(t *testing.T) {
	t.Run("cut", func(t *testing.T) {
		reset := make(chan struct{})
		e, conn := streamThenReset(t, func(c net.Conn) {
			defer close(reset)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
			chunk := make([]byte, 64<<10)
			for {
				// Until the proxy holds its reads and every buffer between is full.
				_ = c.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
				if _, err := c.Write(chunk); err != nil {
					return
				}
			}
		})
		select { // the client reads nothing meanwhile
		case <-reset:
		case <-time.After(8 * time.Second):
			t.Fatal("the backend did not reset")
		}
		// Some rounds after the reset: one read of the backend, with the answer's
		// header, is what a paused stream holds.
		most := 0
		for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
			onLoops(e, func(l *loop) {
				for _, c := range l.conns {
					if c.client {
						most = max(most, len(c.out))
					}
				}
			})
		}
		if limit := 64<<10 + 1<<10; most > limit {
			t.Errorf("after its backend's reset, a stream held %d bytes for its client, want one read (%d) at most", most, limit)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, resp.Body); err == nil {
			t.Errorf("a body cut by the backend's reset came to an end after %d bytes, want it cut short", n)
		}
	})
	t.Run("whole", func(t *testing.T) {
		// The case needs the reset to come once all of the body reached the proxy's
		// receive buffer while the backend's reads are held, which the buffers'
		// tuning allows in most tries, not all: a few tries, one of them reaching it.
		for range 8 {
			if wholeBodyThenReset(t) {
				return
			}
		}
		t.Fatal("no try reset the backend with all of the body at the proxy and its reads held: the case is not reached")
	})
}

// wholeBodyThenReset: a backend sends a whole body of 8 MB and resets once all of it
// reached the proxy, while the proxy holds its reads (the client, reading 8 MB/s, is
// behind); the client must get all of it. It reports whether the reset came so.
func wholeBodyThenReset(t *testing.T) bool {
	const size = 8 << 20
	sent, resetNow := make(chan syscall.RawConn, 1), make(chan struct{})
	e, conn := streamThenReset(t, func(c net.Conn) {
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		_, _ = c.Write(make([]byte, size))
		raw, _ := c.(teeConn).Conn.(*net.TCPConn).SyscallConn()
		sent <- raw
		<-resetNow
	})
	read := make(chan error, 1)
	go func() { // 16 KiB every 2 ms
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			read <- err
			return
		}
		var n int64
		for err == nil {
			var m int64
			m, err = io.CopyN(io.Discard, resp.Body, 16<<10)
			n += m
			time.Sleep(2 * time.Millisecond)
		}
		if err != io.EOF || n != size {
			err = fmt.Errorf("%d bytes (%v), want %d", n, err, size)
		} else {
			err = nil
		}
		read <- err
	}()
	raw := <-sent
	reached := false
	for deadline := time.Now().Add(10 * time.Second); !reached && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		unsent := 1
		_ = raw.Control(func(fd uintptr) { unsent, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
		if unsent > 0 {
			continue
		}
		onLoops(e, func(l *loop) {
			for _, c := range l.conns {
				reached = reached || !c.client && c.events&unix.EPOLLIN == 0
			}
		})
		if !reached {
			break // the proxy has read all of it: the body passes whole whatever the reset
		}
	}
	close(resetNow)
	if err := <-read; err != nil {
		t.Errorf("a whole body sent before the backend's reset (its reads held %v): %v", reached, err)
	}
	return reached
}

// streamThenReset serves one request whose answer send writes, from a backend that
// then closes its connection with a reset; it returns the loops and the client's
// connection, its request sent.
func streamThenReset(t *testing.T, send func(c net.Conn)) (*loopEngine, net.Conn) {
	t.Helper()
	backend := serveRequests(t, func(c net.Conn, _ *http.Request) {
		send(c)
		_ = c.(teeConn).Conn.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{backend.URL}}}}), Options{})
	e, addr := startLoops(t, p)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	return e, conn
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
