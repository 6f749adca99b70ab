package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/proxy/certs"
)

func serialOf(t *testing.T, addr, name string, roots *x509.CertPool) int64 {
	t.Helper()
	c, err := handshake(addr, name, roots)
	if err != nil {
		t.Fatalf("handshake for %s: %v", name, err)
	}
	return c.SerialNumber.Int64()
}

// TestMountedSecretsBySNIAndReloadedWithoutRestart: certificates of mounted TLS
// Secrets are chosen by SNI (exact name before wildcard; a wildcard covers one label
// only), a renewed Secret is served without a restart, and a broken one leaves the
// last good certificate in service.
func TestMountedSecretsBySNIAndReloadedWithoutRestart(t *testing.T) {
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 10, "*.auth.example.com")
	ca.WriteSecret(t, filepath.Join(dir, "login"), 20, "login.auth.example.com")
	ln, tln := listenPair(t)
	tp := startTLSProxy(t, map[string]Route{}, ln, tln, httpsTest{Options: certs.Options{CertDir: dir, ReloadInterval: 50 * time.Millisecond}})

	if got := serialOf(t, tp.secure, "acme.auth.example.com", ca.Pool); got != 10 {
		t.Fatalf("acme.auth.example.com served serial %d, want the wildcard's 10", got)
	}
	if got := serialOf(t, tp.secure, "LOGIN.auth.example.com.", ca.Pool); got != 20 {
		t.Fatalf("login.auth.example.com served serial %d, want its own 20", got)
	}
	for _, name := range []string{"auth.example.com", "a.b.auth.example.com", "other.test"} {
		if _, err := handshake(tp.secure, name, ca.Pool); err == nil {
			t.Fatalf("%s got a certificate; no Secret covers it and ACME is off", name)
		}
	}

	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 11, "*.auth.example.com")
	waitFor(t, 5*time.Second, "the renewed Secret to be served", func() bool {
		return serialOf(t, tp.secure, "acme.auth.example.com", ca.Pool) == 11
	})

	// A Secret whose key does not match its certificate: the last good pair stays.
	if err := os.WriteFile(filepath.Join(dir, "wildcard", "tls.key"), []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if got := serialOf(t, tp.secure, "acme.auth.example.com", ca.Pool); got != 11 {
		t.Fatalf("after a broken Secret, serial %d is served, want the last good 11", got)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHostileTLSHandshakes: a client that opens TLS connections and stalls in the
// handshake is cut by the handshake timeout and holds no connection slot after; a
// client sending garbage instead of a ClientHello is closed at once; neither stops
// a real client.
func TestHostileTLSHandshakes(t *testing.T) {
	ca, tln := wildcardTLSProxy(t, Options{MaxConnsPerIP: 8, ClientHeaderTimeout: 5 * time.Second}, 500*time.Millisecond)

	// Stalled handshakes, as many as one address may hold: half a ClientHello, then
	// nothing.
	var stalled []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", tln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, c)
	}
	start := time.Now()
	for i, c := range stalled {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("stalled handshake %d was not closed by the proxy: %v", i, err)
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("stalled handshakes closed after %s; the handshake timeout is 500ms", took)
	}

	// Garbage instead of a ClientHello: closed (with an alert) without waiting.
	g, err := net.Dial("tcp", tln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, _ = g.Write([]byte("GET / HTTP/1.1\r\nHost: acme.auth.example.com\r\n\r\n"))
	_ = g.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := bufio.NewReader(g).ReadString(0); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("plain HTTP on the TLS port was not closed: %v", err)
	}

	// The slots are free again once the closed connections' lingering ends (a refused
	// TLS connection is closed without an HTTP answer it could not read). Before the
	// lingering close kept its deadline, the interrupted handshakes held theirs for
	// good. All eight are held at once, and the request below goes over one of them:
	// a connection closed here is released by the proxy only when it reads the close,
	// so a new one dialled right after could still find the address at its limit.
	var held []*tls.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	waitFor(t, 3*time.Second, "all eight connection slots", func() bool {
		for len(held) < 8 {
			d := &net.Dialer{Timeout: 5 * time.Second}
			c, err := tls.DialWithDialer(d, "tcp", tln.Addr().String(), &tls.Config{ServerName: "acme.auth.example.com", RootCAs: ca.Pool, NextProtos: []string{"http/1.1"}})
			if err != nil {
				return false
			}
			held = append(held, c)
		}
		return true
	})
	// A client claiming plain HTTP does not fool the backend either.
	req, _ := http.NewRequest(http.MethodGet, "https://acme.auth.example.com/", nil)
	req.Header.Set("X-Forwarded-Proto", "http")
	_ = held[0].SetDeadline(time.Now().Add(10 * time.Second))
	if err := req.Write(held[0]); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(held[0]), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("X-Seen-Proto"); got != "https" {
		t.Fatalf("backend saw X-Forwarded-Proto %q over TLS", got)
	}
}

// wildcardTLSProxy serves a proxy with opts over HTTPS, a mounted certificate for
// *.auth.example.com and a backend for acme.auth.example.com; it returns the CA and
// the HTTPS listener.
func wildcardTLSProxy(t *testing.T, opts Options, handshake time.Duration) (*testenv.CA, net.Listener) {
	t.Helper()
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 10, "*.auth.example.com")
	ln, tln := listenPair(t)
	be, _ := backend(t, "eu-west-a")
	src := &fakeLayer{name: "source", routes: map[string]Route{"acme.auth.example.com": {Tenant: "acme", Region: "eu", Backends: []string{be.URL}}}}
	p := New(NewChain(ChainOptions{}, src), opts)
	enableHTTPS(t, p, tln, httpsTest{Options: certs.Options{CertDir: dir}, HandshakeTimeout: handshake})
	serveTLS(t, p, ln, tln)
	return ca, tln
}

func serveTLS(t *testing.T, p *Proxy, ln, tln net.Listener) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.ServeUntil(ctx, ln, tln) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestPlainRequestsRedirectedUnlessTheCDNSpokeHTTPS: a plain request for a hostname
// with a certificate is redirected to HTTPS (path and query kept, the Host's port
// dropped); a trusted CDN saying its client used HTTPS is forwarded (no redirect
// loop behind Cloudflare's flexible mode); anyone else saying so is redirected; a
// hostname without a certificate is forwarded over plain HTTP.
func TestPlainRequestsRedirectedUnlessTheCDNSpokeHTTPS(t *testing.T) {
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 10, "*.auth.example.com")
	be, _ := backend(t, "eu-west-a")
	rts := map[string]Route{
		"acme.auth.example.com": {Tenant: "acme", Region: "eu", Backends: []string{be.URL}},
		"plain.other.test":      {Tenant: "plain", Region: "eu", Backends: []string{be.URL}},
	}
	for _, trusted := range []bool{false, true} {
		ln, tln := listenPair(t)
		opts := Options{}
		if trusted {
			opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		}
		p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: rts}), opts)
		enableHTTPS(t, p, tln, httpsTest{Options: certs.Options{CertDir: dir}, RedirectPort: 443})
		serveTLS(t, p, ln, tln)
		plain := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		get := func(host, path, proto string) *http.Response {
			req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+path, nil)
			req.Host = host
			if proto != "" {
				req.Header.Set("X-Forwarded-Proto", proto)
			}
			resp, err := plain.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		resp := get("acme.auth.example.com:8088", "/p?q=1", "")
		if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != "https://acme.auth.example.com/p?q=1" {
			t.Fatalf("trusted=%v: %d %q", trusted, resp.StatusCode, resp.Header.Get("Location"))
		}
		resp = get("acme.auth.example.com", "/", "https")
		if want := map[bool]int{false: http.StatusPermanentRedirect, true: http.StatusOK}[trusted]; resp.StatusCode != want {
			t.Fatalf("trusted=%v, X-Forwarded-Proto https: %d, want %d", trusted, resp.StatusCode, want)
		}
		if resp = get("plain.other.test", "/", ""); resp.StatusCode != http.StatusOK {
			t.Fatalf("hostname without a certificate: %d, want it forwarded", resp.StatusCode)
		}
	}
}

// TestRandomNamesUnderAWildcardAreNotRecorded: a wildcard answers any name under it;
// only routed hostnames get a certificate record (for the status), or each random
// name a client sends would cost a write to Redis and memory in the proxy.
func TestRandomNamesUnderAWildcardAreNotRecorded(t *testing.T) {
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 10, "*.auth.example.com")
	ln, tln := listenPair(t)
	tp := startTLSProxy(t, map[string]Route{"acme.auth.example.com": {Tenant: "acme", Region: "eu", Backends: []string{"http://127.0.0.1:1"}}},
		ln, tln, httpsTest{Options: certs.Options{CertDir: dir}})
	names := []string{"acme.auth.example.com"}
	for i := range 50 {
		names = append(names, fmt.Sprintf("r%d.auth.example.com", i))
	}
	for _, n := range names {
		if got := serialOf(t, tp.secure, n, ca.Pool); got != 10 {
			t.Fatalf("%s: serial %d", n, got)
		}
	}
	waitFor(t, 5*time.Second, "the routed hostname's record", func() bool {
		recs, _ := tp.book.CertRecords(context.Background(), names[:1])
		return recs[names[0]].Source == "secret"
	})
	recs, _ := tp.book.CertRecords(context.Background(), names)
	if len(recs) != 1 {
		t.Fatalf("%d records for 1 routed and 50 random names: %v", len(recs), recs)
	}
}

// TestPlainPathsStayByteForByteWithHTTPSOn: with HTTPS on, plain requests still pass
// their path to the backend exactly as sent (looking for an ACME challenge must not
// parse and normalise the request target first).
func TestPlainPathsStayByteForByteWithHTTPSOn(t *testing.T) {
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 10, "*.auth.example.com")
	rec := newRecorder(t, nil)
	ln, tln := listenPair(t)
	p := New(NewChain(ChainOptions{}, &fakeLayer{name: "source", routes: map[string]Route{
		"plain.other.test": {Tenant: "plain", Region: "eu", Backends: []string{rec.URL}}}}), Options{})
	enableHTTPS(t, p, tln, httpsTest{Options: certs.Options{CertDir: dir}, RedirectPort: 443})
	serveTLS(t, p, ln, tln)
	tp := &testProxy{url: "http://" + ln.Addr().String()}
	for _, target := range []string{"/a/../b//c%2Fd?x=1", "/.well-known/acme-challenge/../../admin"} {
		conn, br := exchange(t, tp, "GET "+target+" HTTP/1.1\r\nHost: plain.other.test\r\n\r\n")
		resp, _ := readResponse(t, br, http.MethodGet)
		conn.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d", target, resp.StatusCode)
		}
		seen := rec.take()
		if len(seen) != 1 || seen[0].Path != target {
			t.Fatalf("backend saw %+v, want the target %q byte for byte", seen, target)
		}
	}
}

// A TLS connection must bring its ClientHello within the client header timeout, as a
// plain one its request header: the handshake's longer timeout is for a certificate
// ordered on demand, and a client sending nothing would otherwise hold one of
// --max-conns (shared with plain HTTP) for all of it.
func TestAClientHelloComesWithinTheHeaderTimeout(t *testing.T) {
	_, tln := wildcardTLSProxy(t, Options{ClientHeaderTimeout: 300 * time.Millisecond}, 10*time.Second)
	for _, sent := range [][]byte{nil, {0x16, 0x03, 0x01, 0x02, 0x00, 0x01}} { // nothing; half a ClientHello
		c, err := net.Dial("tcp", tln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(sent); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
			t.Errorf("a connection that sent %d bytes of a ClientHello was still open after 5 s: %v", len(sent), err)
		} else if took := time.Since(start); took > 2*time.Second {
			t.Errorf("a connection that sent %d bytes of a ClientHello was closed after %s; the header timeout is 300ms", len(sent), took)
		}
	}
}

// Once the ClientHello is in, the handshake has the rest of its own timeout: a
// certificate that takes longer than the header timeout to come (an order on demand)
// is still waited for.
func TestACertificateMayTakeLongerThanTheClientHello(t *testing.T) {
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, dir, 10, "slow.example.com")
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	ln := newTLSListener(inner, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		time.Sleep(800 * time.Millisecond)
		return &cert, nil
	}}, 200*time.Millisecond, 5*time.Second)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("ok"))
	}()
	c, err := tls.Dial("tcp", inner.Addr().String(), &tls.Config{ServerName: "slow.example.com", RootCAs: ca.Pool})
	if err != nil {
		t.Fatalf("a handshake whose certificate took 800 ms, with 200 ms for the ClientHello and 5 s in all: %v", err)
	}
	defer c.Close()
	// The server's end finishes its handshake after the client's: cut short, it sends
	// nothing.
	if b, err := io.ReadAll(c); err != nil || string(b) != "ok" {
		t.Fatalf("a handshake whose certificate took 800 ms, with 200 ms for the ClientHello and 5 s in all: the server sent %q (%v), want \"ok\"", b, err)
	}
}
