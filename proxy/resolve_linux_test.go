package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// tableResolver answers names from a table, as a cluster's DNS answers for a
// Service's name.
type tableResolver map[string][]string

func (r tableResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	ips, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var addrs []net.IPAddr
	for _, ip := range ips {
		addrs = append(addrs, net.IPAddr{IP: net.ParseIP(ip)})
	}
	return addrs, nil
}

// A backend named by DNS (a Service's name, as a Region lists its backends) is
// dialed at the address its name resolves to, and the connection is the serving
// engine's own, kept for the next requests: the loop engine resolves the name itself,
// off its thread, rather than handing each client connection to the fasthttp engine. A name of two addresses is served too (by fasthttp's dialer, which
// tries each in turn).
func TestABackendNamedByDNSIsServedOnItsOwnConnection(t *testing.T) {
	for _, tc := range []struct {
		name string
		ips  []string
	}{
		{"one address", []string{"127.0.0.1"}},
		{"two addresses", []string{"127.0.0.1", "127.0.0.2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := okBackend(t)
			_, port, _ := net.SplitHostPort(strings.TrimPrefix(b.URL, "http://"))
			backend := "http://backend.eu.svc.cluster.local:" + port
			p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
				"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{backend}},
			}}), Options{})
			p.dialer.Resolver = tableResolver{"backend.eu.svc.cluster.local": tc.ips}
			tp := serveProxy(t, p)
			u, err := p.upstream(backend)
			if err != nil {
				t.Fatal(err)
			}
			loopDials := testEngine == EngineLoop && len(tc.ips) == 1
			if loopDials {
				waitFor(t, 5*time.Second, "the name resolved for the loop", func() bool { return u.dialAddr(time.Now().UnixNano()).IsValid() })
			}
			conn := tp.dial(t)
			br := bufio.NewReader(conn)
			for i := range 5 {
				if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				if resp, got := readResponse(t, br, "GET"); resp.StatusCode != 200 || got != "ok" {
					t.Errorf("request %d: %d %q, want 200 \"ok\"", i, resp.StatusCode, got)
				}
			}
			if n := b.conns.Load(); n != 1 {
				t.Errorf("five requests of one client opened %d connections to the backend, want 1", n)
			}
			if loop, pool := u.loopConns.Load(), u.pool.ConnsCount(); loopDials && (loop != 1 || pool != 0) || !loopDials && (loop != 0 || pool != 1) {
				t.Errorf("the loop engine holds %d connections and the fasthttp engine %d, want 1 on the engine that serves (loop: %v)", loop, pool, loopDials)
			}
		})
	}
}
