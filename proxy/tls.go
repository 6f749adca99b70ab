package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
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
	// RedirectPort: plain-HTTP requests for a hostname the proxy can serve over TLS
	// are redirected to HTTPS on this port (443 is left out of the URL); ACME
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
	// Storage holds the account, certificates, keys and locks, shared by every
	// replica (RedisStorage); nil keeps them in memory of this process only.
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
	chain  *Chain
	served *servedCerts

	mu       sync.Mutex
	failures map[string]orderFailure // hostnames whose last order failed
}

// orderFailure holds a hostname's next order back: each failure doubles the wait,
// from ACMEOptions.FailureBackoff up to an hour, so a hostname that cannot be
// validated (its DNS moved away) costs a few orders a day, not one per handshake.
// Let's Encrypt allows 5 failed validations per hostname per hour.
type orderFailure struct {
	count int
	until time.Time
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

func (f *tlsFront) setupACME() {
	o := f.opts.ACME
	var magic *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           f.opts.Logger,
	})
	magic = certmagic.New(cache, certmagic.Config{
		Storage:            o.Storage,
		RenewalWindowRatio: o.RenewalWindowRatio,
		OnDemand:           &certmagic.OnDemandConfig{DecisionFunc: f.decide},
		OnEvent:            f.onEvent,
		Logger:             f.opts.Logger,
	})
	f.issuer = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:                      o.CA,
		Email:                   o.Email,
		Agreed:                  true,
		TrustedRoots:            o.RootCAs,
		DisableHTTPChallenge:    o.DisableHTTPChallenge,
		DisableTLSALPNChallenge: o.DisableTLSALPNChallenge,
		Logger:                  f.opts.Logger,
	})
	magic.Issuers = []certmagic.Issuer{f.issuer}
	f.magic = magic
}

// listening tells the ACME library where the proxy answers challenges: on these
// addresses it finds the ports taken and leaves the answering to the proxy's own
// listeners (HTTP-01 on the plain one, TLS-ALPN-01 on the TLS one) instead of
// binding :80 and :443 itself.
func (f *tlsFront) listening(plain, secure net.Addr) {
	if f.issuer == nil {
		return
	}
	host, port, _ := net.SplitHostPort(plain.String())
	f.issuer.ListenHost = host
	f.issuer.AltHTTPPort, _ = strconv.Atoi(port)
	_, port, _ = net.SplitHostPort(secure.String())
	f.issuer.AltTLSALPNPort, _ = strconv.Atoi(port)
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
		NextProtos:     []string{"http/1.1", acmez.ACMETLS1Protocol},
		GetCertificate: f.getCertificate,
	}
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
	if f.magic != nil && slices.Contains(hello.SupportedProtos, acmez.ACMETLS1Protocol) {
		// A CA validating a TLS-ALPN-01 challenge.
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
			if !f.served.noted(name, c) && f.routed(hello.Context(), name) {
				f.served.note(name, c, "secret")
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
	f.served.note(name, c, "acme")
	return c, nil
}

var (
	errNotRouted    = errors.New("no route for this hostname: no certificate is obtained for it")
	errOrderBackoff = errors.New("no order now")
)

// routed reports whether a fresh lookup finds a route for name.
func (f *tlsFront) routed(ctx context.Context, name string) bool {
	var buf [256]byte
	host, err := routes.NormalizeHost([]byte(name), buf[:0])
	if err != nil {
		return false
	}
	route, outcome := f.chain.Lookup(ctx, host)
	return route != nil && (outcome == OutcomeHit || outcome == OutcomeResolved)
}

// decide is the on-demand gate: a certificate is ordered only for a hostname that a
// fresh lookup says has a route (a granted hostname: a managed-zone name, or a custom
// domain whose owner proved control). A stale answer or a failed lookup is a no: an
// order is never placed on a guess.
func (f *tlsFront) decide(ctx context.Context, name string) error {
	if !f.routed(ctx, name) {
		return errNotRouted
	}
	f.mu.Lock()
	failure := f.failures[name]
	f.mu.Unlock()
	if time.Now().Before(failure.until) {
		return fmt.Errorf("%w: the last %d orders for %s failed; the next is allowed at %s", errOrderBackoff, failure.count, name, failure.until.Format(time.RFC3339))
	}
	return nil
}

// onEvent hears the ACME library's outcomes: a failure is recorded for the status; a
// success lets the next handshake record the new certificate.
func (f *tlsFront) onEvent(_ context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	switch event {
	case "cert_failed":
		renewal, _ := data["renewal"].(bool)
		err, _ := data["error"].(error)
		msg := "unknown error"
		if err != nil {
			msg = err.Error()
		}
		observeIssuance(renewal, false)
		f.served.failed(name, msg, renewal)
		if !renewal { // renewals have the library's own backoff, and a certificate to serve meanwhile
			f.mu.Lock()
			failure := f.failures[name]
			failure.count++
			wait := min(f.opts.ACME.FailureBackoff<<min(failure.count-1, 10), maxFailureBackoff)
			failure.until = time.Now().Add(wait)
			f.failures[name] = failure
			f.mu.Unlock()
		}
	case "cert_obtained":
		renewal, _ := data["renewal"].(bool)
		observeIssuance(renewal, true)
		f.served.forget(name)
		f.mu.Lock()
		delete(f.failures, name)
		f.mu.Unlock()
	}
	return nil
}

// httpChallenge answers an HTTP-01 challenge for a token this proxy or another replica
// (through the shared storage) is solving; ok is false when there is none.
func (f *tlsFront) httpChallenge(ctx context.Context, host, path string) (status int, body []byte, ok bool) {
	if f.issuer == nil || !strings.HasPrefix(path, challengeBasePath) {
		return 0, nil, false
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+path, nil)
	if err != nil {
		return 0, nil, false
	}
	w := &challengeWriter{header: http.Header{}, status: http.StatusOK}
	if !f.issuer.HandleHTTPChallenge(w, r) {
		return 0, nil, false
	}
	return w.status, w.body, true
}

// challengeWriter collects the ACME library's answer to a challenge request.
type challengeWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *challengeWriter) Header() http.Header    { return w.header }
func (w *challengeWriter) WriteHeader(status int) { w.status = status }
func (w *challengeWriter) Write(b []byte) (int, error) {
	w.body = append(w.body, b...)
	return len(b), nil
}

const challengeBasePath = "/.well-known/acme-challenge/"

// canServe reports whether a handshake for host would find a certificate: a mounted
// one, or ACME (host has a route, or its requests would not be here).
func (f *tlsFront) canServe(host string) bool {
	if f.magic != nil {
		return true
	}
	return f.static != nil && f.static.match(host) != nil
}

// servedCerts remembers, per hostname, the certificate last reported, so that a
// record is written when it changes rather than on every handshake; writes go out
// from one goroutine, never from the handshake.
type servedCerts struct {
	book   routes.CertBook
	mu     sync.Mutex
	last   map[string]routes.CertRecord
	serial map[string]string
	writes chan certWrite
}

type certWrite struct {
	host string
	rec  routes.CertRecord
}

// maxServedRemembered bounds the memory of reported certificates; past it the memory
// starts again (a record is then written again, once, on its next handshake).
const maxServedRemembered = 200_000

func newServedCerts(book routes.CertBook) *servedCerts {
	s := &servedCerts{book: book, last: map[string]routes.CertRecord{}, serial: map[string]string{}}
	if book != nil {
		s.writes = make(chan certWrite, 1024)
		go s.write()
	}
	return s
}

func (s *servedCerts) write() {
	for w := range s.writes {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := s.book.RecordCert(ctx, w.host, w.rec); err != nil {
			certRecordErrors.Inc()
		}
		cancel()
	}
}

func (s *servedCerts) send(host string, rec routes.CertRecord) {
	if s.writes == nil {
		return
	}
	select {
	case s.writes <- certWrite{host, rec}:
	default:
		certRecordErrors.Inc() // the next change or restart writes it again
	}
}

// noted reports whether c is the certificate last recorded for host.
func (s *servedCerts) noted(host string, c *tls.Certificate) bool {
	if c.Leaf == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serial[host] == c.Leaf.SerialNumber.String()
}

func (s *servedCerts) note(host string, c *tls.Certificate, source string) {
	leaf := c.Leaf
	if leaf == nil {
		return
	}
	serial := leaf.SerialNumber.String()
	s.mu.Lock()
	if s.serial[host] == serial {
		s.mu.Unlock()
		return
	}
	if len(s.serial) >= maxServedRemembered {
		clear(s.serial)
		clear(s.last)
	}
	rec := routes.CertRecord{Issuer: issuerName(leaf), NotAfter: leaf.NotAfter, Source: source, At: time.Now()}
	s.serial[host] = serial
	s.last[host] = rec
	s.mu.Unlock()
	observeExpiry(host, leaf.NotAfter)
	s.send(host, rec)
}

func (s *servedCerts) failed(host, msg string, renewal bool) {
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	s.mu.Lock()
	rec := s.last[host] // the certificate still served, if any
	rec.Error, rec.Renewal, rec.At = msg, renewal, time.Now()
	s.last[host] = rec
	s.mu.Unlock()
	s.send(host, rec)
}

// forget makes the next handshake for host record its certificate again (and clear
// a recorded failure).
func (s *servedCerts) forget(host string) {
	s.mu.Lock()
	delete(s.serial, host)
	s.mu.Unlock()
}

func issuerName(c *x509.Certificate) string {
	if c.Issuer.CommonName != "" {
		return c.Issuer.CommonName
	}
	if len(c.Issuer.Organization) > 0 {
		return c.Issuer.Organization[0]
	}
	return c.Issuer.String()
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
