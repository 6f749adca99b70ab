package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
	"go.uber.org/zap"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// TLSOptions configure the proxy's HTTPS listener. A certificate is chosen by the
// client's SNI: first from the mounted TLS Secrets, then, for a hostname that has a
// route, from ACME on demand.
type TLSOptions struct {
	// Listen is the HTTPS listener's address, e.g. ":8443".
	Listen string
	// CertDir holds mounted kubernetes.io/tls Secrets: tls.crt and tls.key in the
	// directory itself or in any directory directly inside it (one per Secret). It is
	// read again every ReloadInterval, so a renewed Secret (cert-manager) is served
	// without a restart.
	CertDir        string
	ReloadInterval time.Duration
	// HandshakeTimeout bounds a TLS handshake, the wait for a certificate ordered on
	// demand included (an ACME validation takes seconds; a failed order is not
	// retried within the handshake).
	HandshakeTimeout time.Duration
	// ACME obtains certificates on demand when its CA is set.
	ACME ACMEOptions
	// RedirectPort: plain-HTTP requests for a hostname the proxy holds a certificate
	// for are redirected to HTTPS on this port (443 is left out of the URL); ACME
	// challenges never are. 0 turns the redirect off.
	RedirectPort int
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

// Defaults of TLSOptions.
const (
	DefaultCertReloadInterval = 10 * time.Second
	DefaultHandshakeTimeout   = 30 * time.Second
	DefaultFailureBackoff     = 5 * time.Minute
	maxFailureBackoff         = time.Hour
)

// tlsFront is the proxy's certificate selection.
type tlsFront struct {
	opts   TLSOptions
	static *staticCerts
	magic  *certmagic.Config // nil without ACME
	issuer *certmagic.ACMEIssuer
	cache  *certmagic.Cache // nil without ACME
	chain  *Chain
	served *servedCerts

	mu       sync.Mutex
	failures map[string]orderFailure // this replica's memory of the shared backoff
}

// EnableTLS prepares the proxy's HTTPS listener; Server serves it.
func (p *Proxy) EnableTLS(opts TLSOptions) error {
	if opts.ReloadInterval <= 0 {
		opts.ReloadInterval = DefaultCertReloadInterval
	}
	if opts.ACME.FailureBackoff <= 0 {
		opts.ACME.FailureBackoff = DefaultFailureBackoff
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.CertDir == "" && opts.ACME.CA == "" {
		return errors.New("HTTPS needs certificates: a directory of TLS Secrets, an ACME CA, or both")
	}
	f := &tlsFront{opts: opts, chain: p.chain, served: newServedCerts(opts.Book), failures: map[string]orderFailure{}}
	if opts.CertDir != "" {
		s, err := loadStaticCerts(opts.CertDir)
		if s == nil {
			return err
		}
		if err != nil {
			// A bad pair leaves its hostnames to ACME (or without a certificate) and is
			// retried when its files change; the others are served.
			opts.Logger.Error("some mounted certificates do not load", zap.Error(err))
		}
		f.static = s
	}
	if opts.ACME.CA != "" {
		if opts.ACME.Storage == nil {
			return errors.New("ACME needs a storage for its account and certificates (Redis, shared by the replicas, or a directory)")
		}
		f.setupACME()
	}
	p.tls = f
	return nil
}

// config is the TLS listener's configuration: TLS 1.2 and up, forward-secret AEAD
// suites only for 1.2 (1.3's are all modern), HTTP/1.1, and the ACME TLS-ALPN
// protocol so that validation handshakes reach the ACME library.
func (f *tlsFront) config() *tls.Config {
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
		NextProtos:     f.protocols(),
		GetCertificate: f.getCertificate,
	}
}

// protocols are the ALPN protocols offered: HTTP/1.1, and ACME's TLS-ALPN-01 when
// that challenge is answered here.
func (f *tlsFront) protocols() []string {
	if f.magic == nil || f.opts.ACME.DisableTLSALPNChallenge {
		return []string{"http/1.1"}
	}
	return []string{"http/1.1", acmez.ACMETLS1Protocol}
}

// Reasons a handshake gets no certificate.
var (
	errNoSNI         = errors.New("the client named no server (SNI)")
	errNoCertificate = errors.New("no certificate for this hostname")
)

// getCertificate chooses a handshake's certificate. A hostname with no mounted
// certificate gets one from ACME only if it has a route (decide): a client sending
// random names costs a route lookup (negatively cached), never an ACME order.
func (f *tlsFront) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if f.magic != nil && len(hello.SupportedProtos) == 1 && hello.SupportedProtos[0] == acmez.ACMETLS1Protocol {
		// A CA validating a TLS-ALPN-01 challenge offers that protocol alone (RFC 8737);
		// a client offering it beside others is an ordinary handshake, which must not
		// skip the mounted certificates into an order.
		return f.magic.GetCertificate(hello)
	}
	name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
	if name == "" {
		observeHandshake("no_sni")
		return nil, errNoSNI
	}
	if f.static != nil {
		if c := f.static.match(name); c != nil {
			observeHandshake("secret")
			// A wildcard answers any name under it: only a routed one is recorded, or
			// random names would each cost a record.
			if !f.served.noted(name, c) {
				if known, _ := f.routed(hello.Context(), name, true); known {
					f.served.note(name, c, "secret")
				}
			}
			return c, nil
		}
	}
	if f.magic == nil {
		observeHandshake("no_certificate")
		return nil, errNoCertificate
	}
	c, err := f.magic.GetCertificate(hello)
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
	if !f.served.noted(name, c) {
		f.served.note(name, c, "acme")
	}
	return c, nil
}

// canServe reports whether a handshake for host finds a certificate now: a mounted
// one, or one in the ACME cache. A hostname whose certificate is not obtained yet (or
// cannot be) is not redirected: a browser caches a 308, and would keep going to an
// HTTPS that fails.
func (f *tlsFront) canServe(host string) bool {
	if f.static != nil && f.static.match(host) != nil {
		return true
	}
	return f.cache != nil && len(f.cache.AllMatchingCertificates(host)) > 0
}

// redirectTarget is where a plain request for host (normalised: a DNS name, no port)
// goes over HTTPS.
func (f *tlsFront) redirectTarget(buf []byte, host, requestURI []byte) []byte {
	buf = append(buf, "https://"...)
	buf = append(buf, host...)
	if f.opts.RedirectPort != 443 {
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(f.opts.RedirectPort), 10)
	}
	return append(buf, requestURI...)
}

func (f *tlsFront) String() string {
	return fmt.Sprintf("tls(certdir=%q acme=%q)", f.opts.CertDir, f.opts.ACME.CA)
}
