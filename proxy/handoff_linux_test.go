package proxy

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"
)

// A client whose request the loop hands to fasthttp's server when the process has no
// descriptor to spare (the hand-over takes one, its own in Go's poller) is answered,
// 503 with Retry-After, not dropped.
func TestAHandOverWithoutADescriptorIsAnswered(t *testing.T) {
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{okBackend(t).URL}}}}), Options{})
	_, addr := startLoops(t, p)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, got := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK || got != "ok" {
		t.Fatalf("the first request: %d %q, want 200 \"ok\"", resp.StatusCode, got)
	}
	// Every descriptor from the lowest free one up is refused from now on.
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	free, err := unix.Dup(0)
	if err != nil {
		t.Fatal(err)
	}
	_ = unix.Close(free)
	limit := saved
	limit.Cur = uint64(free)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &limit); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &saved)
		}
	}
	defer restore()
	fmt.Fprint(conn, "GET / HTTP/1.0\r\nHost: acme.example.com\r\n\r\n") // the loop hands HTTP/1.0 over
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	restore()
	if err != nil {
		t.Fatalf("a request handed over without a descriptor to spare: %v, want a 503", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a request handed over without a descriptor to spare: %d (Retry-After %q), want 503 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

// A request the loop sent to a backend that failed, and then hands to the fasthttp
// engine for the next backend (one the loop does not dial: a name of two addresses),
// has its route lookup counted once, as every request has, not once by each engine.
func TestAHandedOverLookupIsCountedOnce(t *testing.T) {
	// A backend whose accept queue is full: its listener drops the loop's SYN, so the
	// loop's connection is opened (counting the lookup) and times out dialing.
	lfd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Close(lfd) })
	if err := unix.Bind(lfd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(lfd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(lfd)
	if err != nil {
		t.Fatal(err)
	}
	full := fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
	for range 2 { // a backlog of 0 queues one; the second makes sure
		c, err := net.DialTimeout("tcp", full, 200*time.Millisecond)
		if err != nil {
			break
		}
		t.Cleanup(func() { c.Close() })
	}
	ok := okBackend(t).URL
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(ok, "http://"))
	named := "http://backend.eu.svc.cluster.local:" + port
	// The route's first request starts at its second backend: the full one.
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com":  {Tenant: "acme", Region: "eu", Backends: []string{named, "http://" + full}},
		"other.example.com": {Tenant: "other", Region: "eu", Backends: []string{ok}}}}),
		Options{DialTimeout: 300 * time.Millisecond})
	p.dialer.Resolver = tableResolver{"backend.eu.svc.cluster.local": {"127.0.0.1", "127.0.0.2"}, "127.0.0.1": {"127.0.0.1"}}
	_, addr := startLoops(t, p)

	counted := func() float64 { // the memory layer's hits and misses (outcomes share them)
		return testutil.ToFloat64(memoryLookups[OutcomeHit]) + testutil.ToFloat64(memoryLookups[OutcomeResolved])
	}
	before := counted()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n")
	if resp, got := readResponse(t, bufio.NewReader(conn), "GET"); resp.StatusCode != http.StatusOK || got != "ok" {
		t.Fatalf("the request: %d %q, want 200 \"ok\" from the named backend", resp.StatusCode, got)
	}
	if u, err := p.upstream("http://" + full); err != nil || u.downUntil.Load() == 0 {
		t.Fatal("the full backend was not tried first: the case is not reached")
	}
	// The loop adds its counts to the metric at its next sweep (every 25 ms).
	time.Sleep(200 * time.Millisecond)
	if got := counted() - before; got != 1 {
		t.Errorf("one request's route lookups counted %v times, want 1", got)
	}

	// A request the loop serves, then one it hands over before any lookup (HTTP/1.0)
	// on the same connection: each counted once, by the engine that served it.
	conn, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	before = counted()
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n",
		"GET / HTTP/1.0\r\nHost: other.example.com\r\n\r\n",
	} {
		fmt.Fprint(conn, req)
		if resp, got := readResponse(t, br, "GET"); resp.StatusCode != http.StatusOK || got != "ok" {
			t.Fatalf("%q: %d %q, want 200 \"ok\"", req, resp.StatusCode, got)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if got := counted() - before; got != 2 {
		t.Errorf("two requests on one connection, the second handed over: lookups counted %v times, want 2", got)
	}
}
