// Package certs chooses the certificate of each TLS handshake at the proxy: from
// mounted TLS Secrets, else from ACME on demand for a hostname that has a route. It
// answers ACME's HTTP-01 challenges for the proxy's plain listener, records which
// certificate each hostname is served with (for the TenantRoute status), and keeps
// the ACME account, certificates and keys in shared storage (RedisStorage).
//
// The proxy uses it through a small interface (proxy.Certificates) and keeps its
// listeners; this package never sees a request. Files: certs.go chooses a
// certificate, mounted.go reads the Secrets, acme.go orders on demand and answers
// challenges, records.go tells the operator what is served, storage.go is the shared
// storage, metrics.go the counters.
package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"go.uber.org/zap"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// Options configure the certificates. A certificate is chosen by the client's SNI:
// first from the mounted TLS Secrets, then, for a hostname that has a route, from
// ACME on demand.
type Options struct {
	// CertDir holds mounted kubernetes.io/tls Secrets: tls.crt and tls.key in the
	// directory itself or in any directory directly inside it (one per Secret). It is
	// read again every ReloadInterval, so a renewed Secret (cert-manager) is served
	// without a restart.
	CertDir        string
	ReloadInterval time.Duration
	// ACME obtains certificates on demand when its CA is set.
	ACME ACMEOptions
	// Book, if set, is told which certificate each hostname is served with and of every
	// failure to obtain or renew one; the operator reports it in status.
	Book routes.CertBook
	// Logger receives the ACME library's log.
	Logger *zap.Logger
}

// ACMEOptions configure on-demand certificates.
type ACMEOptions struct {
	// CA is the ACME directory URL; empty turns ACME off.
	CA    string
	Email string
	// RootCAs, if set, are the roots trusted for the CA's own API (a private CA).
	RootCAs *x509.CertPool
	// Storage holds the account, certificates, keys, locks and the order backoff:
	// RedisStorage shares them among the replicas, a certmagic.FileStorage keeps them
	// to one. Required with a CA.
	Storage certmagic.Storage
	// RenewalWindowRatio is the share of a certificate's lifetime left when it is
	// renewed (certmagic's default, 1/3, when 0).
	RenewalWindowRatio float64
	// FailureBackoff is how long after a failed order no other is placed for the same
	// hostname; it doubles with each further failure, up to an hour.
	FailureBackoff time.Duration
	// DisableHTTPChallenge and DisableTLSALPNChallenge leave one challenge out (for a
	// path to the proxy that carries only one of the ports).
	DisableHTTPChallenge    bool
	DisableTLSALPNChallenge bool
}

// Defaults of Options.
const (
	DefaultReloadInterval = 10 * time.Second
	DefaultFailureBackoff = 5 * time.Minute
	maxFailureBackoff     = time.Hour
)

// Router tells whether a hostname has a route: only those get a certificate from
// ACME. fresh demands an answer from a source or a fresh cache entry, not a stale one;
// err says the lookup itself failed. The proxy's lookup chain is one.
type Router interface {
	Routed(ctx context.Context, host string, fresh bool) (known bool, err error)
}

// Manager chooses certificates for the proxy's TLS listener and answers ACME's
// HTTP-01 challenges on its plain one.
type Manager struct {
	opts    Options
	mounted *mountedCerts
	magic   *certmagic.Config // nil without ACME
	issuer  *certmagic.ACMEIssuer
	cache   *certmagic.Cache // nil without ACME
	router  Router
	served  *servedCerts

	mu       sync.Mutex
	failures map[string]orderFailure // this replica's memory of the shared backoff
}

// New prepares the certificates; the proxy serves them once given the Manager
// (proxy.TLSOptions.Certificates).
func New(opts Options, router Router) (*Manager, error) {
	if opts.ReloadInterval <= 0 {
		opts.ReloadInterval = DefaultReloadInterval
	}
	if opts.ACME.FailureBackoff <= 0 {
		opts.ACME.FailureBackoff = DefaultFailureBackoff
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.CertDir == "" && opts.ACME.CA == "" {
		return nil, errors.New("HTTPS needs certificates: a directory of TLS Secrets, an ACME CA, or both")
	}
	m := &Manager{opts: opts, router: router, served: newServedCerts(opts.Book), failures: map[string]orderFailure{}}
	if opts.CertDir != "" {
		s, err := loadMountedCerts(opts.CertDir)
		if s == nil {
			return nil, err
		}
		if err != nil {
			// A bad pair leaves its hostnames to ACME (or without a certificate) and is
			// retried when its files change; the others are served.
			opts.Logger.Error("some mounted certificates do not load", zap.Error(err))
		}
		m.mounted = s
	}
	if opts.ACME.CA != "" {
		if opts.ACME.Storage == nil {
			return nil, errors.New("ACME needs a storage for its account and certificates (Redis, shared by the replicas, or a directory)")
		}
		m.setupACME()
	}
	return m, nil
}

// TLSConfig is the TLS listener's configuration: TLS 1.2 and up, forward-secret AEAD
// suites only for 1.2 (1.3's are all modern), HTTP/1.1, and the ACME TLS-ALPN
// protocol so that validation handshakes reach the ACME library.
func (m *Manager) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
		NextProtos:     m.protocols(),
		GetCertificate: m.GetCertificate,
	}
}

// protocols are the ALPN protocols offered: HTTP/1.1, and ACME's TLS-ALPN-01 when
// that challenge is answered here.
func (m *Manager) protocols() []string {
	if m.magic == nil || m.opts.ACME.DisableTLSALPNChallenge {
		return []string{"http/1.1"}
	}
	return []string{"http/1.1", acmez.ACMETLS1Protocol}
}

// Reasons a handshake gets no certificate.
var (
	errNoSNI         = errors.New("the client named no server (SNI)")
	errNoCertificate = errors.New("no certificate for this hostname")
)

// GetCertificate chooses a handshake's certificate. A hostname with no mounted
// certificate gets one from ACME only if it has a route (decide): a client sending
// random names costs a route lookup (negatively cached), never an ACME order.
func (m *Manager) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if m.magic != nil && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol {
		// A CA validating a TLS-ALPN-01 challenge offers that protocol alone (RFC 8737);
		// a client offering it beside others is an ordinary handshake, which must not
		// skip the mounted certificates into an order. A challenge is only ever solved
		// for a routed hostname: any other name would cost a storage read and an error
		// line in the library's log, with an SNI of the client's choosing, per handshake.
		// A failed lookup does not refuse: the challenge may be in the shared storage,
		// and a CA's failed validation counts against the hostname.
		if known, err := m.router.Routed(hello.Context(), hello.ServerName, false); !known && err == nil {
			observeHandshake("not_routed")
			return nil, errNotRouted
		}
		return m.magic.GetCertificate(hello)
	}
	name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
	if name == "" {
		observeHandshake("no_sni")
		return nil, errNoSNI
	}
	if m.mounted != nil {
		if c := m.mounted.match(name); c != nil {
			observeHandshake("secret")
			// A wildcard answers any name under it: only a routed one is recorded, or
			// random names would each cost a record.
			if !m.served.noted(name, c) {
				if known, _ := m.router.Routed(hello.Context(), name, true); known {
					m.served.note(name, c, "secret")
				}
			}
			return c, nil
		}
	}
	if m.magic == nil {
		observeHandshake("no_certificate")
		return nil, errNoCertificate
	}
	// The library answers from its cache without asking decide: a hostname that lost
	// its route (released, moved out of a verified domain) would be served its
	// certificate until the renewal window, weeks on. A failed lookup does not refuse.
	if known, err := m.router.Routed(hello.Context(), name, false); !known && err == nil {
		observeHandshake("not_routed")
		return nil, errNotRouted
	}
	c, err := m.magic.GetCertificate(hello)
	if err != nil {
		switch {
		case errors.Is(err, errNotRouted):
			observeHandshake("not_routed")
		case errors.Is(err, errOrderBackoff):
			observeHandshake("backoff")
		default:
			observeHandshake("acme_failed")
		}
		return nil, err
	}
	observeHandshake("acme")
	if !m.served.noted(name, c) {
		m.served.note(name, c, "acme")
	}
	return c, nil
}

// CanServe reports whether a handshake for host finds a certificate now: a mounted
// one, or one in the ACME cache. A hostname whose certificate is not obtained yet (or
// cannot be) is not redirected: a browser caches a 308, and would keep going to an
// HTTPS that fails.
func (m *Manager) CanServe(host string) bool {
	if m.mounted != nil && m.mounted.match(host) != nil {
		return true
	}
	if m.cache == nil {
		return false
	}
	// An expired certificate stays in the library's cache while its renewals fail.
	for _, c := range m.cache.AllMatchingCertificates(host) {
		if !c.Expired() {
			return true
		}
	}
	return false
}

func (m *Manager) String() string {
	return fmt.Sprintf("certs(certdir=%q acme=%q)", m.opts.CertDir, m.opts.ACME.CA)
}
