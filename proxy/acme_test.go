package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/proxy/certs"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// tlsTestProxy is a proxy serving plain HTTP and HTTPS on local ports.
type tlsTestProxy struct {
	p             *Proxy
	src           *fakeLayer
	plain, secure string
	book          *routes.MemoryCertBook
}

// listenPair binds a plain and a TLS port for a proxy (Pebble must know them before
// the proxy starts).
func listenPair(t *testing.T) (net.Listener, net.Listener) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln, tln
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

// httpsTest is what a test sets of the proxy's HTTPS: the certificates' options and
// the listener's.
type httpsTest struct {
	certs.Options
	RedirectPort     int
	HandshakeTimeout time.Duration
}

// enableHTTPS turns HTTPS on for p on tln, with certificates as o says.
func enableHTTPS(t *testing.T, p *Proxy, tln net.Listener, o httpsTest) {
	t.Helper()
	m, err := certs.New(o.Options, p.chain)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.EnableTLS(TLSOptions{Listen: tln.Addr().String(), Certificates: m, RedirectPort: o.RedirectPort, HandshakeTimeout: o.HandshakeTimeout}); err != nil {
		t.Fatal(err)
	}
}

func startTLSProxy(t *testing.T, rts map[string]Route, ln, tln net.Listener, opts httpsTest) *tlsTestProxy {
	t.Helper()
	src := &fakeLayer{name: "source", routes: rts}
	p := New(NewChain(ChainOptions{}, src), Options{})
	book := &routes.MemoryCertBook{}
	if opts.Book == nil {
		opts.Book = book
	}
	enableHTTPS(t, p, tln, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.ServeUntil(ctx, ln, tln) }()
	t.Cleanup(func() { cancel(); <-done })
	return &tlsTestProxy{p: p, src: src, plain: ln.Addr().String(), secure: tln.Addr().String(), book: book}
}

// handshake connects to addr with SNI name and returns the certificate served, or
// the handshake's error.
func handshake(addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 30 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"http/1.1"}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// httpsClient sends every request to addr, whatever the URL's host.
func httpsClient(addr string, roots *x509.CertPool) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
	}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func redisStorage(t *testing.T, r *testenv.Redis) *certs.RedisStorage {
	s, err := certs.NewRedisStorage(routes.KV{Client: redis.NewClient(&redis.Options{Addr: r.Addr()}), Key: []byte(strings.Repeat("k", 32))})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestACMECertificateOnFirstHandshakeOnlyForRoutedHostnames: a hostname with a route
// (a verified custom domain) gets a certificate from a real ACME server on its first
// handshake; names without a route get no certificate and cause no order, however
// many a client sends.
func TestACMECertificateOnFirstHandshakeOnlyForRoutedHostnames(t *testing.T) {
	ln, tln := listenPair(t)
	pebble := testenv.StartPebble(t, testenv.PebbleOptions{HTTPPort: port(ln), TLSPort: port(tln)})
	storage := redisStorage(t, testenv.StartRedis(t))
	be, _ := backend(t, "eu-west-a")
	tp := startTLSProxy(t, map[string]Route{
		"login.acme.test": {Tenant: "acme", Region: "eu-west", Backends: []string{be.URL}},
		"new.acme.test":   {Tenant: "acme", Region: "eu-west", Backends: []string{be.URL}},
	}, ln, tln, httpsTest{Options: certs.Options{ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: storage}}, RedirectPort: port(tln)})

	client := httpsClient(tp.secure, pebble.IssuerRoots)
	resp, err := client.Get("https://login.acme.test/hello")
	if err != nil {
		t.Fatalf("first HTTPS request to a routed hostname: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "eu-west-a") {
		t.Fatalf("HTTPS request: %d %q", resp.StatusCode, b)
	}
	if got := resp.TLS.PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != "login.acme.test" {
		t.Fatalf("certificate names %v", got)
	}
	if resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("TLS version %x", resp.TLS.Version)
	}
	if n := pebble.Orders(); n != 1 {
		t.Fatalf("%d orders for one hostname, want 1", n)
	}

	// Random names: no certificate, no order.
	for i := range 30 {
		if _, err := handshake(tp.secure, fmt.Sprintf("x%d.attacker.test", i), pebble.IssuerRoots); err == nil {
			t.Fatal("a hostname without a route got a certificate")
		}
	}
	if _, err := handshake(tp.secure, "", pebble.IssuerRoots); err == nil {
		t.Fatal("a handshake without SNI got a certificate")
	}
	time.Sleep(500 * time.Millisecond) // an order placed in the background would show by now
	if n := pebble.Orders(); n != 1 {
		t.Fatalf("%d orders after handshakes for names without a route, want still 1", n)
	}

	// A TLS 1.1 client is refused.
	if _, err := tls.Dial("tcp", tp.secure, &tls.Config{ServerName: "login.acme.test", RootCAs: pebble.IssuerRoots, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("TLS 1.1 was accepted")
	}

	// Plain HTTP: redirected to HTTPS, path and query kept.
	plain := &http.Client{Timeout: 5 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, "http://"+tp.plain+"/a/b?c=d", nil)
	req.Host = "login.acme.test"
	resp, err = plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := fmt.Sprintf("https://login.acme.test:%d/a/b?c=d", port(tln))
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("plain request: %d Location %q, want 308 %q", resp.StatusCode, resp.Header.Get("Location"), want)
	}
	// A routed hostname without a certificate yet is served over plain HTTP, not sent
	// (with a redirect browsers cache) to an HTTPS that may not work.
	req.Host = "new.acme.test"
	if resp, err = plain.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("plain request for a hostname without a certificate: %d, want it forwarded", resp.StatusCode)
	}

	// What the operator reports: the certificate served, from its issuer.
	if n := pebble.Orders(); n != 1 {
		t.Fatalf("%d orders after plain requests, want still 1", n)
	}
	recs, _ := tp.book.CertRecords(context.Background(), []string{"login.acme.test", "x0.attacker.test"})
	rec, ok := recs["login.acme.test"]
	if !ok || rec.Source != "acme" || rec.Error != "" || rec.Issuer == "" || time.Until(rec.NotAfter) < 24*time.Hour {
		t.Fatalf("certificate record %+v (found %v)", rec, ok)
	}
	if _, ok := recs["x0.attacker.test"]; ok {
		t.Fatal("a record for a hostname without a route")
	}
}

// TestTwoReplicasShareOneCertificate: two proxies sharing Redis, the first handshake
// for a hostname reaching both at once: one order, both serve the same certificate.
func TestTwoReplicasShareOneCertificate(t *testing.T) {
	ln1, tln1 := listenPair(t)
	ln2, tln2 := listenPair(t)
	// Pebble validates on one port pair; either replica answers for both (the
	// challenge is in the shared storage).
	pebble := testenv.StartPebble(t, testenv.PebbleOptions{HTTPPort: port(ln1), TLSPort: port(tln1)})
	r := testenv.StartRedis(t)
	rts := map[string]Route{"shop.tenant.test": {Tenant: "t", Region: "eu", Backends: []string{"http://127.0.0.1:1"}}}
	var replicas []*tlsTestProxy
	for _, pair := range [][2]net.Listener{{ln1, tln1}, {ln2, tln2}} {
		storage := redisStorage(t, r)
		replicas = append(replicas, startTLSProxy(t, rts, pair[0], pair[1],
			httpsTest{Options: certs.Options{ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: storage}}}))
	}
	var wg sync.WaitGroup
	serials := make([]string, 2*len(replicas))
	errs := make([]error, len(serials))
	for i := range serials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := handshake(replicas[i%2].secure, "shop.tenant.test", pebble.IssuerRoots)
			if err == nil {
				serials[i] = c.SerialNumber.String()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("handshake %d (replica %d): %v", i, i%2, err)
		}
		if serials[i] != serials[0] {
			t.Fatalf("replicas serve different certificates: %v", serials)
		}
	}
	if n := pebble.Orders(); n != 1 {
		t.Fatalf("%d orders for one hostname on two replicas, want 1", n)
	}

	// A third replica starts while every route lookup fails: it still serves the
	// certificate the others stored, and orders nothing.
	ln3, tln3 := listenPair(t)
	storage := redisStorage(t, r)
	third := startTLSProxy(t, rts, ln3, tln3, httpsTest{Options: certs.Options{ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: storage}}})
	third.src.mu.Lock()
	third.src.fail = errors.New("lookup source down")
	third.src.mu.Unlock()
	c, err := handshake(third.secure, "shop.tenant.test", pebble.IssuerRoots)
	if err != nil {
		t.Fatalf("a replica whose lookups fail does not serve the stored certificate: %v", err)
	}
	if c.SerialNumber.String() != serials[0] || pebble.Orders() != 1 {
		t.Fatalf("third replica: serial %s (want %s), %d orders", c.SerialNumber, serials[0], pebble.Orders())
	}
	if _, err := handshake(third.secure, "other.tenant.test", pebble.IssuerRoots); err == nil || pebble.OrderRequests() != 1 {
		t.Fatalf("while lookups fail, a name without a stored certificate: %v, %d order requests", err, pebble.OrderRequests())
	}
}

// TestACMEProtocolBesideOthersIsAnOrdinaryHandshake: a client offering acme-tls/1
// beside http/1.1 gets the mounted wildcard like any client; only a handshake offering
// acme-tls/1 alone (a CA validating) reaches the ACME library's challenge path, so no
// order is placed for names the wildcard already covers.
func TestACMEProtocolBesideOthersIsAnOrdinaryHandshake(t *testing.T) {
	ln, tln := listenPair(t)
	pebble := testenv.StartPebble(t, testenv.PebbleOptions{HTTPPort: port(ln), TLSPort: port(tln)})
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 10, "*.auth.example.com")
	tp := startTLSProxy(t, map[string]Route{"shop.auth.example.com": {Tenant: "s", Region: "eu", Backends: []string{"http://127.0.0.1:1"}}},
		ln, tln, httpsTest{Options: certs.Options{CertDir: dir, ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: memStorage(t)}}})
	c, err := tls.Dial("tcp", tp.secure, &tls.Config{ServerName: "shop.auth.example.com", RootCAs: ca.Pool, NextProtos: []string{"http/1.1", "acme-tls/1"}})
	if err != nil {
		t.Fatal(err)
	}
	serial := c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	c.Close()
	time.Sleep(300 * time.Millisecond)
	if serial != 10 || pebble.OrderRequests() != 0 {
		t.Fatalf("serial %d (want the wildcard's 10), %d order requests (want 0)", serial, pebble.OrderRequests())
	}
}

// renewRuns numbers the runs of TestCertificateNearExpiryIsRenewedWithoutAFailedHandshake.
var renewRuns atomic.Int32

// TestCertificateNearExpiryIsRenewedWithoutAFailedHandshake: short-lived certificates
// from Pebble are renewed while clients keep connecting; no handshake fails and a
// new certificate is served before the old one expires.
func TestCertificateNearExpiryIsRenewedWithoutAFailedHandshake(t *testing.T) {
	// A name of its own at each run: the ACME library renews in the background for
	// up to 5 minutes past the test, and holds a process-wide wait on the name
	// meanwhile, so a second run (-count) under the same name would wait on the
	// first's renewal against a CA that is gone.
	name := fmt.Sprintf("app%d.renew.test", renewRuns.Add(1))
	ln, tln := listenPair(t)
	pebble := testenv.StartPebble(t, testenv.PebbleOptions{HTTPPort: port(ln), TLSPort: port(tln), Validity: 20 * time.Second})
	storage := redisStorage(t, testenv.StartRedis(t))
	tp := startTLSProxy(t, map[string]Route{name: {Tenant: "r", Region: "eu", Backends: []string{"http://127.0.0.1:1"}}},
		ln, tln, httpsTest{Options: certs.Options{ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: storage, RenewalWindowRatio: 0.5}}})

	first, err := handshake(tp.secure, name, pebble.IssuerRoots)
	if err != nil {
		t.Fatal(err)
	}
	var renewed *x509.Certificate
	handshakes := 0
	for deadline := first.NotAfter; time.Now().Before(deadline); handshakes++ {
		c, err := handshake(tp.secure, name, pebble.IssuerRoots)
		if err != nil {
			t.Fatalf("handshake %d, %s before the first certificate expires: %v", handshakes, time.Until(first.NotAfter).Round(time.Millisecond), err)
		}
		if c.SerialNumber.Cmp(first.SerialNumber) != 0 {
			renewed = c
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if renewed == nil {
		t.Fatalf("no new certificate served in %d handshakes before the first expired", handshakes)
	}
	// (Pebble's renewal window (ARI) opens at once for a certificate this short, so the
	// renewal may come within the second of the first issuance.)
	if renewed.NotAfter.Before(first.NotAfter) {
		t.Fatalf("renewed certificate expires %s, before the first's %s", renewed.NotAfter, first.NotAfter)
	}
	if n := pebble.Orders(); n != 2 {
		t.Fatalf("%d orders, want 2 (issue, renew)", n)
	}
}

// TestFailedIssuanceIsRecordedAndHeldBack: a routed hostname the CA refuses (its
// policy blocks the domain) gets no certificate; its handshake ends within the
// handshake timeout (the library would otherwise retry inside it for minutes), the
// failure is recorded for the TenantRoute's status, and handshakes that follow place
// no new order until the backoff has passed.
func TestFailedIssuanceIsRecordedAndHeldBack(t *testing.T) {
	ln, tln := listenPair(t)
	pebble := testenv.StartPebble(t, testenv.PebbleOptions{HTTPPort: port(ln), TLSPort: port(tln), Blocked: []string{"tenant.test"}})
	storage := redisStorage(t, testenv.StartRedis(t))
	tp := startTLSProxy(t, map[string]Route{"broken.tenant.test": {Tenant: "b", Region: "eu", Backends: []string{"http://127.0.0.1:1"}}},
		ln, tln, httpsTest{Options: certs.Options{ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: storage, FailureBackoff: time.Minute}}, HandshakeTimeout: 3 * time.Second})
	start := time.Now()
	if _, err := handshake(tp.secure, "broken.tenant.test", pebble.IssuerRoots); err == nil {
		t.Fatal("a certificate although the CA refuses the name")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the failed handshake took %s; the handshake timeout is 3s", took)
	}
	recs, _ := tp.book.CertRecords(context.Background(), []string{"broken.tenant.test"})
	if rec := recs["broken.tenant.test"]; rec.Error == "" || rec.Renewal || !rec.NotAfter.IsZero() {
		t.Fatalf("record after a failed order: %+v", rec)
	}
	asked := pebble.OrderRequests()
	if asked == 0 {
		t.Fatal("Pebble saw no order request")
	}
	for range 10 {
		start := time.Now()
		if _, err := handshake(tp.secure, "broken.tenant.test", pebble.IssuerRoots); err == nil {
			t.Fatal("a certificate although the CA refuses the name")
		}
		if took := time.Since(start); took > time.Second {
			t.Fatalf("a handshake during the backoff took %s", took)
		}
	}
	if n := pebble.OrderRequests(); n != asked {
		t.Fatalf("%d order requests after 10 handshakes in the backoff, want still %d", n, asked)
	}
	// Another replica sharing the storage holds the hostname back too.
	ln2, tln2 := listenPair(t)
	other := startTLSProxy(t, map[string]Route{"broken.tenant.test": {Tenant: "b", Region: "eu", Backends: []string{"http://127.0.0.1:1"}}},
		ln2, tln2, httpsTest{Options: certs.Options{ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: storage, FailureBackoff: time.Minute}}, HandshakeTimeout: 3 * time.Second})
	if _, err := handshake(other.secure, "broken.tenant.test", pebble.IssuerRoots); err == nil {
		t.Fatal("a certificate although the CA refuses the name")
	}
	if n := pebble.OrderRequests(); n != asked {
		t.Fatalf("another replica placed an order in the backoff: %d order requests, want %d", n, asked)
	}
}

func memStorage(t *testing.T) *certmagic.FileStorage {
	return &certmagic.FileStorage{Path: t.TempDir()}
}

// TestEachChallengeTypeAloneObtainsACertificate: HTTP-01 answered on the plain
// listener and TLS-ALPN-01 answered on the TLS listener each get a certificate alone
// (which one the library picks when both are on is its choice).
func TestEachChallengeTypeAloneObtainsACertificate(t *testing.T) {
	for _, only := range []string{"http-01", "tls-alpn-01"} {
		t.Run(only, func(t *testing.T) {
			ln, tln := listenPair(t)
			pebble := testenv.StartPebble(t, testenv.PebbleOptions{HTTPPort: port(ln), TLSPort: port(tln)})
			tp := startTLSProxy(t, map[string]Route{"one.challenge.test": {Tenant: "c", Region: "eu", Backends: []string{"http://127.0.0.1:1"}}},
				ln, tln, httpsTest{Options: certs.Options{ACME: certs.ACMEOptions{CA: pebble.Directory, RootCAs: pebble.APIRoots, Storage: memStorage(t),
					DisableHTTPChallenge: only != "http-01", DisableTLSALPNChallenge: only != "tls-alpn-01"}}})
			if _, err := handshake(tp.secure, "one.challenge.test", pebble.IssuerRoots); err != nil {
				t.Fatalf("%s alone: %v", only, err)
			}
			if n := pebble.Orders(); n != 1 {
				t.Fatalf("%d orders, want 1", n)
			}
		})
	}
}
