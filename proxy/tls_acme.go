package proxy

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

	"github.com/tenantroute/tenantroute-operator/routes"
)

// setupACME builds the on-demand certificate manager. The rule is split in two:
//   - decide (certmagic's DecisionFunc) says whether a hostname may have a certificate
//     at all. certmagic asks it before loading one from storage too, so it is lenient:
//     a hostname with a known route (a stale one included) passes, so that a replica
//     whose lookups are degraded still serves certificates others obtained.
//   - beforeOrder (the cert_obtaining event, after the storage was checked under the
//     lock) says whether an order may be placed now: only for a hostname a fresh
//     lookup routes, and not while its last orders failed (shared backoff).
func (f *tlsFront) setupACME() {
	o := f.opts.ACME
	var magic *certmagic.Config
	f.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           f.opts.Logger,
	})
	magic = certmagic.New(f.cache, certmagic.Config{
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

var (
	errNotRouted    = errors.New("no route for this hostname: no certificate is obtained for it")
	errOrderBackoff = errors.New("no order now")
)

// routed reports whether a lookup finds a route for name; fresh demands an answer from
// a source or a fresh cache entry, not a stale one.
func (f *tlsFront) routed(ctx context.Context, name string, fresh bool) (known bool, err error) {
	var buf [256]byte
	host, err := routes.NormalizeHost([]byte(name), buf[:0])
	if err != nil {
		return false, nil
	}
	route, outcome := f.chain.Lookup(ctx, host)
	switch {
	case outcome == OutcomeError:
		return false, errors.New("the route lookup failed")
	case route == nil:
		return false, nil
	case fresh && outcome == OutcomeStale:
		return false, errors.New("only a stale route is known")
	}
	return true, nil
}

// decide is certmagic's DecisionFunc: may name have a certificate at all (load or
// order)? A name without a route may not: a client sending random SNI costs a
// negatively cached lookup. When the lookup itself fails, a certificate already in
// storage may still be loaded; an order is then refused by beforeOrder.
func (f *tlsFront) decide(ctx context.Context, name string) error {
	known, err := f.routed(ctx, name, false)
	inStorage := false // asked of the storage at most once
	if !known {
		if err == nil || !f.stored(ctx, name) {
			return errNotRouted
		}
		inStorage = true
	}
	// The local memory of failed orders answers fast, unless another replica has
	// since stored a certificate.
	f.mu.Lock()
	failure := f.failures[name]
	f.mu.Unlock()
	if time.Now().Before(failure.Until) && !inStorage && !f.stored(ctx, name) {
		return fmt.Errorf("%w: the last %d orders for %s failed; the next is allowed at %s", errOrderBackoff, failure.Count, name, failure.Until.Format(time.RFC3339))
	}
	return nil
}

// stored reports whether the storage holds a certificate for name.
func (f *tlsFront) stored(ctx context.Context, name string) bool {
	return f.magic.Storage.Exists(ctx, certmagic.StorageKeys.SiteCert(f.issuer.IssuerKey(), name))
}

// beforeOrder is the last word before an order (not a renewal) is placed, after the
// library found no certificate in storage under the lock. Refusals are final for this
// attempt (ErrNoRetry): the library would otherwise retry within minutes.
func (f *tlsFront) beforeOrder(ctx context.Context, name string) error {
	if known, err := f.routed(ctx, name, true); !known {
		if err == nil {
			err = errNotRouted
		}
		return certmagic.ErrNoRetry{Err: fmt.Errorf("no order for %s: %w", name, err)}
	}
	if failure := f.loadFailure(ctx, name); time.Now().Before(failure.Until) {
		f.mu.Lock()
		f.failures[name] = failure
		f.mu.Unlock()
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

func (f *tlsFront) loadFailure(ctx context.Context, name string) orderFailure {
	var failure orderFailure
	if b, err := f.magic.Storage.Load(ctx, backoffKey(name)); err == nil {
		_ = json.Unmarshal(b, &failure)
	}
	return failure
}

func (f *tlsFront) orderFailed(ctx context.Context, name string) {
	failure := f.loadFailure(ctx, name)
	failure.Count++
	failure.Until = time.Now().Add(min(f.opts.ACME.FailureBackoff<<min(failure.Count-1, 10), maxFailureBackoff))
	f.mu.Lock()
	f.failures[name] = failure
	f.mu.Unlock()
	b, _ := json.Marshal(failure)
	_ = f.magic.Storage.Store(ctx, backoffKey(name), b)
}

func (f *tlsFront) orderSucceeded(ctx context.Context, name string) {
	f.mu.Lock()
	delete(f.failures, name)
	f.mu.Unlock()
	_ = f.magic.Storage.Delete(ctx, backoffKey(name))
}

// onEvent hears the ACME library: it gates orders (beforeOrder), records failures for
// the status and the backoff, and lets the next handshake record a new certificate.
func (f *tlsFront) onEvent(ctx context.Context, event string, data map[string]any) error {
	name, _ := data["identifier"].(string)
	renewal, _ := data["renewal"].(bool)
	switch event {
	case "cert_obtaining":
		if !renewal {
			return f.beforeOrder(ctx, name)
		}
	case "cert_failed":
		err, _ := data["error"].(error)
		if err == nil {
			err = errors.New("unknown error")
		}
		if errors.Is(err, errOrderBackoff) || errors.Is(err, errNotRouted) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil // refused by the gate, or cut by the handshake's end: not the CA's answer
		}
		observeIssuance(renewal, false)
		f.served.failed(name, err.Error(), renewal)
		if !renewal { // renewals have the library's own backoff, and a certificate to serve meanwhile
			f.orderFailed(context.WithoutCancel(ctx), name)
		}
	case "cert_obtained":
		observeIssuance(renewal, true)
		f.served.forget(name)
		f.orderSucceeded(context.WithoutCancel(ctx), name)
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

const challengeBasePath = "/.well-known/acme-challenge/"

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
