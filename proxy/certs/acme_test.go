package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// acmeManager is a Manager with ACME on, whose CA is never reached by these tests.
func acmeManager(t *testing.T, router Router, storage certmagic.Storage, logger *zap.Logger) *Manager {
	t.Helper()
	m, err := New(Options{Logger: logger, ACME: ACMEOptions{CA: "https://ca.invalid/directory", Storage: storage, FailureBackoff: time.Minute}}, router)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFailedRenewalsAndTimedOutOrdersAreHeldBack: the library renews an on-demand
// certificate from the handshakes that find it due, one attempt after another for as
// long as they fail; a renewal is held back by the same backoff as a first order, and
// needs a route too. An order cut by its deadline counts as a failure.
func TestFailedRenewalsAndTimedOutOrdersAreHeldBack(t *testing.T) {
	m := acmeManager(t, routedNames{"shop.test": true, "slow.test": true}, &certmagic.FileStorage{Path: t.TempDir()}, nil)
	ctx := context.Background()
	renewal := func(name string) map[string]any { return map[string]any{"identifier": name, "renewal": true} }
	held := func(what string, err error) {
		t.Helper()
		var final certmagic.ErrNoRetry
		if err == nil || !errors.As(err, &final) {
			t.Errorf("%s: %v, want a final refusal", what, err)
		}
	}

	if err := m.onEvent(ctx, "cert_obtaining", renewal("shop.test")); err != nil {
		t.Fatalf("a first renewal of a routed hostname: %v", err)
	}
	validation := errors.New("urn:ietf:params:acme:error:connection: the DNS of shop.test no longer points here")
	if err := m.onEvent(ctx, "cert_failed", map[string]any{"identifier": "shop.test", "renewal": true, "error": validation}); err != nil {
		t.Fatal(err)
	}
	held("the next renewal after a failed one", m.onEvent(ctx, "cert_obtaining", renewal("shop.test")))
	held("an order after a failed renewal", m.onEvent(ctx, "cert_obtaining", map[string]any{"identifier": "shop.test"}))
	held("the renewal of a hostname no longer routed", m.onEvent(ctx, "cert_obtaining", renewal("gone.test")))

	cut := fmt.Errorf("[slow.test] Obtain: %w", context.DeadlineExceeded)
	if err := m.onEvent(ctx, "cert_failed", map[string]any{"identifier": "slow.test", "error": cut}); err != nil {
		t.Fatal(err)
	}
	held("an order after one cut by the handshake's deadline", m.onEvent(ctx, "cert_obtaining", map[string]any{"identifier": "slow.test"}))

	// A proxy stopping cancels what it was ordering: that says nothing of the CA.
	stopped := fmt.Errorf("[shop.test] Obtain: %w", context.Canceled)
	m2 := acmeManager(t, routedNames{"shop.test": true}, &certmagic.FileStorage{Path: t.TempDir()}, nil)
	_ = m2.onEvent(ctx, "cert_failed", map[string]any{"identifier": "shop.test", "error": stopped})
	if err := m2.onEvent(ctx, "cert_obtaining", map[string]any{"identifier": "shop.test"}); err != nil {
		t.Errorf("an order after one cancelled by a shutdown: %v, want it allowed", err)
	}
}

// readCounter counts the storage reads.
type readCounter struct {
	certmagic.Storage
	reads atomic.Int64
}

func (s *readCounter) Load(ctx context.Context, key string) ([]byte, error) {
	s.reads.Add(1)
	return s.Storage.Load(ctx, key)
}

func (s *readCounter) Exists(ctx context.Context, key string) bool {
	s.reads.Add(1)
	return s.Storage.Exists(ctx, key)
}

// TestAChallengeHandshakeForAnUnroutedNameCostsNothing: a client offering only the
// TLS-ALPN-01 protocol with an SNI of its choosing reaches no storage and writes no
// error line (the library logs each such SNI whole, at error level).
func TestAChallengeHandshakeForAnUnroutedNameCostsNothing(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	storage := &readCounter{Storage: &certmagic.FileStorage{Path: t.TempDir()}}
	m := acmeManager(t, routedNames{"shop.test": true}, storage, zap.New(core))
	conn, peer := net.Pipe()
	defer conn.Close()
	defer peer.Close()
	for _, name := range []string{strings.Repeat("a", 60000), "random-4711.attacker.test"} {
		if c, err := m.GetCertificate(&tls.ClientHelloInfo{ServerName: name, SupportedProtos: []string{acmez.ACMETLS1Protocol}, Conn: conn}); err == nil {
			t.Fatalf("a challenge certificate for %.40q: %v", name, c)
		}
	}
	if n := storage.reads.Load(); n != 0 {
		t.Errorf("%d storage reads for challenge handshakes of unrouted names, want 0", n)
	}
	if errs := logs.FilterLevelExact(zapcore.ErrorLevel).All(); len(errs) != 0 {
		t.Errorf("%d error lines for challenge handshakes of unrouted names, want 0: %q", len(errs), errs[0].Message)
	}
}

// selfSigned returns a certificate for name valid until notAfter.
func selfSigned(t *testing.T, name string, notAfter time.Time) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), DNSNames: []string{name},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// TestAnExpiredCertificateIsNotRedirectedTo: plain HTTP is sent to HTTPS (a 308,
// which browsers keep) only for a hostname with a certificate that still works; an
// expired one stays in the library's cache while its renewals fail.
func TestAnExpiredCertificateIsNotRedirectedTo(t *testing.T) {
	m := acmeManager(t, routedNames{}, &certmagic.FileStorage{Path: t.TempDir()}, nil)
	ctx := context.Background()
	for name, notAfter := range map[string]time.Time{"old.test": time.Now().Add(-time.Hour), "live.test": time.Now().Add(time.Hour)} {
		if _, err := m.magic.CacheUnmanagedTLSCertificate(ctx, selfSigned(t, name, notAfter), nil); err != nil {
			t.Fatal(err)
		}
	}
	if m.CanServe("old.test") {
		t.Error("a hostname whose only certificate expired is redirected to HTTPS")
	}
	if !m.CanServe("live.test") {
		t.Error("a hostname with a valid certificate is not redirected to HTTPS")
	}
}

// TestACertificateIsNotServedForAHostnameThatLostItsRoute: the library answers from
// its cache without asking whether the hostname may still have a certificate.
func TestACertificateIsNotServedForAHostnameThatLostItsRoute(t *testing.T) {
	router := routedNames{"shop.test": true}
	m := acmeManager(t, router, &certmagic.FileStorage{Path: t.TempDir()}, nil)
	if _, err := m.magic.CacheUnmanagedTLSCertificate(context.Background(), selfSigned(t, "shop.test", time.Now().Add(time.Hour)), nil); err != nil {
		t.Fatal(err)
	}
	conn, peer := net.Pipe()
	defer conn.Close()
	defer peer.Close()
	hello := &tls.ClientHelloInfo{ServerName: "shop.test", Conn: conn}
	if _, err := m.GetCertificate(hello); err != nil {
		t.Fatalf("a routed hostname with a certificate: %v", err)
	}
	delete(router, "shop.test")
	if c, err := m.GetCertificate(hello); err == nil {
		t.Fatalf("a hostname without a route is still served its certificate: %v", c.Leaf.DNSNames)
	}
}
