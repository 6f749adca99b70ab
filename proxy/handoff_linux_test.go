package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A client whose request the loop hands to fasthttp's server when the process has no
// descriptor to spare (the hand-over takes one, its own in Go's poller) is answered,
// 503 with Retry-After, not dropped.
func TestAHandOverWithoutADescriptorIsAnswered(t *testing.T) {
	// On the loop engine whatever the suite's engine: only it hands connections over.
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{okBackend(t).URL}}}}), Options{Engine: EngineLoop})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.ServeUntil(ctx, ln, nil) }()
	t.Cleanup(func() { p.StopNow(); cancel(); <-done })
	conn, err := net.Dial("tcp", ln.Addr().String())
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
