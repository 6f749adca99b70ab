//go:build linux

package main

import (
	"net/netip"
	"strings"
	"testing"
)

// The work does what the proxy does to a request: the tenant set, the client's
// forwarding headers and hop-by-hop headers gone, its own set; an unknown host refused.
func TestWorkRewritesAsTheProxyDoes(t *testing.T) {
	for name, w := range works() {
		t.Run(name, func(t *testing.T) { testRewrite(t, w) })
	}
}

// works are the two ways the floor does the proxy's work.
func works() map[string]proxyWork {
	hosts := map[string]string{"bench.example.com": "bench"}
	return map[string]proxyWork{"fasthttp": newWork(hosts), "inplace": newInplace(hosts)}
}

func testRewrite(t *testing.T, w proxyWork) {
	peer := netip.MustParseAddr("192.0.2.7")
	out, ok := w.request([]byte("GET /x HTTP/1.1\r\nHost: bench.example.com\r\nX_Tenant_Id: evil\r\nX-Forwarded-For: 6.6.6.6\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\r\n"), peer)
	if !ok {
		t.Fatal("refused a routed host")
	}
	got := string(out)
	for _, want := range []string{"GET /x HTTP/1.1\r\n", "X-Tenant-Id: bench\r\n", "X-Forwarded-For: 192.0.2.7\r\n",
		"Forwarded: for=192.0.2.7;host=\"bench.example.com\";proto=http\r\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the backend's request lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"evil", "6.6.6.6", "X-Hop", "Connection"} {
		if strings.Contains(got, gone) {
			t.Errorf("the backend's request still has %q:\n%s", gone, got)
		}
	}
	if _, ok := w.request([]byte("GET / HTTP/1.1\r\nHost: other.example.com\r\n\r\n"), peer); ok {
		t.Error("an unknown host was forwarded")
	}
	resp, ok := w.response([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=5\r\n\r\n"), []byte("ok"))
	if !ok || strings.Contains(string(resp), "Keep-Alive") || !strings.HasSuffix(string(resp), "\r\n\r\nok") {
		t.Errorf("the client's answer:\n%s", resp)
	}
}

func BenchmarkWork(b *testing.B) {
	req := []byte("GET / HTTP/1.1\r\nHost: bench.example.com\r\n\r\n")
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 512\r\n\r\n")
	body := make([]byte, 512)
	peer := netip.MustParseAddr("127.0.0.1")
	for name, w := range works() {
		b.Run(name+"/request", func(b *testing.B) {
			for b.Loop() {
				w.request(req, peer)
			}
		})
		b.Run(name+"/response", func(b *testing.B) {
			for b.Loop() {
				w.response(resp, body)
			}
		})
	}
}

// The line-by-line work refuses what it cannot read as one header a line: a request
// with two Hosts, a folded line, a space before a colon.
func TestInplaceRefusesWhatItCannotRead(t *testing.T) {
	w := newInplace(map[string]string{"bench.example.com": "bench", "other.example.com": "other"})
	peer := netip.MustParseAddr("192.0.2.7")
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: bench.example.com\r\nHost: other.example.com\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: bench.example.com\r\nX-A: 1\r\n folded\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : bench.example.com\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
	} {
		if out, ok := w.request([]byte(req), peer); ok {
			t.Errorf("forwarded %q as:\n%s", req, out)
		}
	}
}
