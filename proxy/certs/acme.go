package certs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
)

// setupACME builds the on-demand certificate manager. The rule is split in two:
//   - decide (certmagic's DecisionFunc) says whether a hostname may have a certificate
//     at all. certmagic asks it before loading one from storage too, so it is lenient:
//     a hostname with a known route (a stale one included) passes, so that a replica
//     whose lookups are degraded still serves certificates others obtained.
//   - beforeOrder (the cert_obtaining event, after the storage was checked under the
//     lock) says whether an order, a renewal's included, may be placed now: only for
//     a hostname a fresh lookup routes, and not while its last orders failed (shared
//     backoff).
func (m *Manager) setupACME() {
	o := m.opts.ACME
	var magic *certmagic.Config
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           m.opts.Logger,
	})
	magic = certmagic.New(m.cache, certmagic.Config{
		Storage:            o.Storage,
		RenewalWindowRatio: o.RenewalWindowRatio,
		OnDemand:           &certmagic.OnDemandConfig{DecisionFunc: m.decide},
		OnEvent:            m.onEvent,
		Logger:             m.opts.Logger,
	})
	m.issuer = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:                      o.CA,
		Email:                   o.Email,
		Agreed:                  true,
		TrustedRoots:            o.RootCAs,
		DisableHTTPChallenge:    o.DisableHTTPChallenge,
		DisableTLSALPNChallenge: o.DisableTLSALPNChallenge,
		Logger:                  m.opts.Logger,
	})
	magic.Issuers = []certmagic.Issuer{m.issuer}
	m.magic = magic
}

// Listening tells the ACME library where the proxy answers challenges: on these
// addresses it finds the ports taken and leaves the answering to the proxy's own
// listeners (HTTP-01 on the plain one, TLS-ALPN-01 on the TLS one) instead of
// binding :80 and :443 itself.
func (m *Manager) Listening(plain, secure net.Addr) {
	if m.issuer == nil {
		return
	}
	host, port, _ := net.SplitHostPort(plain.String())
	m.issuer.ListenHost = host
	m.issuer.AltHTTPPort, _ = strconv.Atoi(port)
	_, port, _ = net.SplitHostPort(secure.String())
	m.issuer.AltTLSALPNPort, _ = strconv.Atoi(port)
}

var (
	errNotRouted    = errors.New("no route for this hostname: no certificate is obtained for it")
	errOrderBackoff = errors.New("no order now")
)

// decide is certmagic's DecisionFunc: may name have a certificate at all (load or
// order)? A name without a route may not: a client sending random SNI costs a
// negatively cached lookup. When the lookup itself fails, a certificate already in
// storage may still be loaded; an order is then refused by beforeOrder.
func (m *Manager) decide(ctx context.Context, name string) error {
	known, err := m.router.Routed(ctx, name, false)
	inStorage := false // asked of the storage at most once
	if !known {
		if err == nil || !m.stored(ctx, name) {
			return errNotRouted
		}
		inStorage = true
	}
	// The local memory of failed orders answers fast, unless another replica has
	// since stored a certificate.
	m.mu.Lock()
	failure := m.failures[name]
	m.mu.Unlock()
	if time.Now().Before(failure.Until) && !inStorage && !m.stored(ctx, name) {
		return fmt.Errorf("%w: the last %d orders for %s failed; the next is allowed at %s", errOrderBackoff, failure.Count, name, failure.Until.Format(time.RFC3339))
	}
	return nil
}

// stored reports whether the storage holds a certificate for name.
func (m *Manager) stored(ctx context.Context, name string) bool {
	return m.magic.Storage.Exists(ctx, certmagic.StorageKeys.SiteCert(m.issuer.IssuerKey(), name))
}

// beforeOrder is the last word before an order is placed: a first one, after the
// library found no certificate in storage under the lock, or a renewal. Renewals need
// it as much: the library renews an on-demand certificate from the handshakes that
// find it due, one attempt (with its own retries, for 5 minutes) after another for as
// long as they fail, which for a hostname whose DNS moved away is dozens of failed
// orders an hour, and the CA's limits on those are per account. Refusals are final
// for this attempt (ErrNoRetry): the library would otherwise retry within minutes.
func (m *Manager) beforeOrder(ctx context.Context, name string) error {
	if known, err := m.router.Routed(ctx, name, true); !known {
		if err == nil {
			err = errNotRouted
		}
		return certmagic.ErrNoRetry{Err: fmt.Errorf("no order for %s: %w", name, err)}
	}
	if failure := m.loadFailure(ctx, name); time.Now().Before(failure.Until) {
		m.mu.Lock()
		m.failures[name] = failure
		m.mu.Unlock()
		return certmagic.ErrNoRetry{Err: fmt.Errorf("%w: the last %d orders for %s failed (on this or another replica); the next is allowed at %s",
			errOrderBackoff, failure.Count, name, failure.Until.Format(time.RFC3339))}
	}
	return nil
}

// orderFailure holds a hostname's next order back: each failure doubles the wait,
// from ACMEOptions.FailureBackoff up to an hour, so a hostname that cannot be
// validated (its DNS moved away) costs a few orders a day, not one per handshake.
// Let's Encrypt allows 5 failed validations per hostname per hour. It is kept in the
// storage, so every replica (and a restarted one) holds the hostname back.
type orderFailure struct {
	Count int       `json:"count"`
	Until time.Time `json:"until"`
}

func backoffKey(name string) string {
	return "tenantroute/order-backoff/" + certmagic.StorageKeys.Safe(name)
}

func (m *Manager) loadFailure(ctx context.Context, name string) orderFailure {
	var failure orderFailure
	if b, err := m.magic.Storage.Load(ctx, backoffKey(name)); err == nil {
		_ = json.Unmarshal(b, &failure)
	}
	return failure
}

func (m *Manager) orderFailed(ctx context.Context, name string) {
	failure := m.loadFailure(ctx, name)
	failure.Count++
	failure.Until = time.Now().Add(min(m.opts.ACME.FailureBackoff<<min(failure.Count-1, 10), maxFailureBackoff))
	m.mu.Lock()
	m.failures[name] = failure
	m.mu.Unlock()
	b, _ := json.Marshal(failure)
	_ = m.magic.Storage.Store(ctx, backoffKey(name), b)
}

func (m *Manager) orderSucceeded(ctx context.Context, name string) {
	m.mu.Lock()
	delete(m.failures, name)
	m.mu.Unlock()
	_ = m.magic.Storage.Delete(ctx, backoffKey(name))
}

// onEvent hears the ACME library: it gates orders (beforeOrder), records failures for
// the status and the backoff, and lets the next handshake record a new certificate.
func (m *Manager) onEvent(ctx context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_obtaining":
		return m.beforeOrder(ctx, name)
	case "cert_failed":
		err, _ := data["error"].(error)
		if err == nil {
			err = errors.New("unknown error")
		}
		if errors.Is(err, errOrderBackoff) || errors.Is(err, errNotRouted) || errors.Is(err, context.Canceled) {
			return nil // refused by the gate, or stopped with the proxy: not the CA's answer
		}
		// An order cut by its deadline (the handshake's, for a first one) is a failure
		// like any: the CA or the validation took longer than a client waits, and the
		// next handshake would otherwise place another order at once. A client cannot
		// cause it: closing its connection does not end the handshake's context.
		observeIssuance(renewal, false)
		m.served.failed(name, err.Error(), renewal)
		m.orderFailed(context.WithoutCancel(ctx), name)
	case "cert_obtained":
		observeIssuance(renewal, true)
		m.served.forget(name)
		m.orderSucceeded(context.WithoutCancel(ctx), name)
	}
	return nil
}

// HTTPChallenge answers an HTTP-01 challenge for a token this proxy or another replica
// (through the shared storage) is solving; ok is false when there is none.
func (m *Manager) HTTPChallenge(ctx context.Context, host, path string) (status int, body []byte, ok bool) {
	if m.issuer == nil || !strings.HasPrefix(path, ChallengePath) {
		return 0, nil, false
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+host+path, nil)
	if err != nil {
		return 0, nil, false
	}
	w := &challengeWriter{header: http.Header{}, status: http.StatusOK}
	if !m.issuer.HandleHTTPChallenge(w, r) {
		return 0, nil, false
	}
	return w.status, w.body, true
}

// ChallengePath is where ACME HTTP-01 challenges are asked (RFC 8555 §8.3).
const ChallengePath = "/.well-known/acme-challenge/"

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
