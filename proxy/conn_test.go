package proxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// deadlineCounter counts the read deadlines set on a connection.
type deadlineCounter struct {
	net.Conn
	reads atomic.Int64
}

func (c *deadlineCounter) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// A busy connection moves its idle deadline once per slack, not once per read, and a
// peer that stops is still cut: no earlier than the idle timeout, no later than the
// timeout and its slack.
func TestIdleDeadlineMovesPerConnectionNotPerRead(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	counted := &deadlineCounter{Conn: server}
	const idle = 400 * time.Millisecond
	c := newIdleConn(counted, idle, idle, nil)
	defer c.Close()

	go func() {
		for range 1000 {
			if _, err := client.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	b := make([]byte, 1)
	for range 1000 {
		if _, err := c.Read(b); err != nil {
			t.Fatal(err)
		}
	}
	if n := counted.reads.Load(); n != 1 {
		t.Errorf("1000 reads in a burst set the read deadline %d times, want 1", n)
	}

	// The peer stops: the read is cut within [idle, idle + idle/16] of its last byte,
	// whenever within the slack it came.
	time.Sleep(idle / 32)
	start := time.Now()
	_, err := c.Read(b)
	waited := time.Since(start) + idle/32
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled read ended with %v, want a deadline", err)
	}
	if waited < idle || waited > idle+idle/16+100*time.Millisecond {
		t.Errorf("a stalled read was cut after %v, want between %v and %v", waited, idle, idle+idle/16)
	}

	// An explicit deadline holds as set, and lifting it brings the idle one back.
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start = time.Now()
	if _, err := c.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > idle/2 {
		t.Errorf("an explicit deadline: %v after %v", err, time.Since(start))
	}
	_ = c.SetReadDeadline(time.Time{})
	start = time.Now()
	if _, err := c.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < idle {
		t.Errorf("after the explicit deadline was lifted: %v after %v, want the idle timeout", err, time.Since(start))
	}
}

// failingAccepts fails its first accepts with errs, in order.
type failingAccepts struct {
	net.Listener
	mu   sync.Mutex
	errs []error
}

func (l *failingAccepts) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// Out of descriptors, accepts fail until the connections being served give theirs
// back; and Linux's accept passes on the network error of the connection it took
// (accept(2): EPROTO, ENETUNREACH...). The proxy keeps its listener and serves again;
// fasthttp alone takes such an error for the listener's end, and the proxy would stop.
func TestAnAcceptOutOfDescriptorsIsTriedAgain(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	failed := func(errno syscall.Errno) error {
		return &net.OpError{Op: "accept", Net: "tcp", Addr: ln.Addr(), Err: os.NewSyscallError("accept4", errno)}
	}
	flaky := &failingAccepts{Listener: ln, errs: []error{failed(syscall.EPROTO), failed(syscall.EMFILE), failed(syscall.EMFILE), failed(syscall.ENETUNREACH),
		failed(syscall.EPERM), failed(syscall.ENOSPC)}}
	b := okBackend(t)
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{b.URL}}}}), Options{})
	exhausted0, network0 := testutil.ToFloat64(acceptExhausted), testutil.ToFloat64(acceptNetwork)
	srv := p.newServer()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(p.Listener(flaky)) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	select {
	case err := <-served:
		t.Fatalf("the server stopped on a failed accept: %v", err)
	default:
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after accepts that failed (EPROTO, EMFILE twice, ENETUNREACH, EPERM, ENOSPC): %v %v, want 200", resp, err)
	}
	// An operator sees them: a proxy at its descriptor limit is otherwise only a log line.
	if e, n := testutil.ToFloat64(acceptExhausted)-exhausted0, testutil.ToFloat64(acceptNetwork)-network0; e != 3 || n != 3 {
		t.Errorf("accept errors counted: %v exhausted and %v network, want 3 and 3", e, n)
	}
}

// An IPv6 host is given a /64 and can send from any address in it: for the limits of
// one address, the /64 is the address. IPv4 addresses count one by one, and so do
// IPv6 addresses that each carry an IPv4 client (NAT64), or all of them when the
// prefix is 128.
func TestOneIPv6HostIsOneAddress(t *testing.T) {
	opts := Options{MaxConns: 100, MaxConnsPerIP: 1}
	opts.defaults()
	l := &connLimits{opts: &opts, perIP: map[netip.Addr]int{}}
	for _, c := range []struct {
		ip    string
		admit bool
	}{
		{"2001:db8:1:2::1", true},
		{"2001:db8:1:2:ffff::7", false}, // the same /64
		{"2001:db8:1:3::1", true},       // the next /64
		{"192.0.2.1", true},
		{"192.0.2.2", true},
		{"64:ff9b::192.0.2.1", true}, // NAT64: an IPv4 client each
		{"64:ff9b::192.0.2.2", true},
	} {
		if got := l.admit(netip.MustParseAddr(c.ip)) == nil; got != c.admit {
			t.Errorf("%s admitted: %t, want %t", c.ip, got, c.admit)
		}
	}
	l.release(netip.MustParseAddr("2001:db8:1:2::1"))
	if l.admit(netip.MustParseAddr("2001:db8:1:2:ffff::7")) != nil {
		t.Error("the /64's connection was given back, but another address of it is still refused")
	}
	perAddress := Options{IPv6ClientPrefix: 128}
	perAddress.defaults()
	keyOf := func(o *Options, addr string) netip.Addr { k, _ := o.clientKey(netip.MustParseAddr(addr)); return k }
	if keyOf(&perAddress, "2001:db8:1:2::2") == keyOf(&perAddress, "2001:db8:1:2::3") {
		t.Error("with a prefix of 128, two addresses of one /64 count as one")
	}
	b, one, other := newBufferBudget(16*20000, 20000), keyOf(&opts, "2001:db8::1"), keyOf(&opts, "2001:db8::2")
	if !b.take(20000, one) {
		t.Fatal("a body of the share's size was not held")
	}
	defer b.give(20000, one) // the gauge is the package's
	if b.take(20000, other) {
		b.give(20000, other)
		t.Error("two addresses of one /64 held two shares of the request buffer budget")
	}
}
