package certs

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The certificate metrics keep the proxy's names (tenantroute_proxy_*): they are the
// proxy's HTTPS, whichever package chooses the certificate.
var (
	handshakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_tls_certificate_selections_total",
		Help: "TLS handshakes by how their certificate was chosen: secret (mounted), acme (on demand), or why there was none: no_sni, not_routed (no ACME order placed), backoff (the hostname's last order failed recently; no order placed), no_certificate, acme_failed.",
	}, []string{"result"})
	issuances = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_acme_issuances_total",
		Help: "ACME certificate orders finished by this proxy, by kind (obtain, renew) and result (ok, failed).",
	}, []string{"kind", "result"})
	certReloadErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantroute_proxy_certificate_reload_errors_total",
		Help: "Reloads of the mounted certificates that found a pair that does not load (the previous one is still served).",
	})
	certRecordErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantroute_proxy_certificate_record_errors_total",
		Help: "Certificate records (for the TenantRoute status) that could not be written.",
	})
	storageUnreadable = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantroute_proxy_certificate_storage_unreadable_total",
		Help: "Values in the shared certificate storage that do not open with this proxy's key (the shared key was rotated, or the value was tampered with); they are treated as absent and obtained again.",
	})
	storageErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_certificate_storage_errors_total",
		Help: "Commands of the shared certificate storage in Redis that failed (Redis away, full or refusing), by operation: write, read, delete, list, lock, unlock, refresh (a held lock not kept: the command failed, or the lock was gone). A certificate that cannot be written is obtained again by every replica and at every restart.",
	}, []string{"op"})
	earliestExpiry = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tenantroute_proxy_certificate_earliest_expiry_timestamp_seconds",
		Help: "When the certificate served by this proxy that expires first expires (Unix seconds); 0 before any TLS handshake.",
	}, func() float64 {
		expiryMu.Lock()
		defer expiryMu.Unlock()
		var first time.Time
		for _, t := range expiries {
			if first.IsZero() || t.Before(first) {
				first = t
			}
		}
		if first.IsZero() {
			return 0
		}
		return float64(first.Unix())
	})
	expiryMu sync.Mutex
	expiries = map[string]time.Time{}
)

func init() {
	// Counters of known label values start at zero, so that a dashboard or an alert
	// sees rate() = 0 rather than no series before the first event.
	for _, r := range []string{"secret", "acme", "no_sni", "not_routed", "backoff", "no_certificate", "acme_failed"} {
		handshakes.WithLabelValues(r)
	}
	for _, op := range []string{"write", "read", "delete", "list", "lock", "unlock", "refresh"} {
		storageErrors.WithLabelValues(op)
	}
	for _, kind := range []string{"obtain", "renew"} {
		for _, r := range []string{"ok", "failed"} {
			issuances.WithLabelValues(kind, r)
		}
	}
}

// Register adds the certificate metrics to a registry.
func Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{handshakes, issuances, certReloadErrors, certRecordErrors, storageUnreadable, storageErrors, earliestExpiry} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func observeHandshake(result string) { handshakes.WithLabelValues(result).Inc() }

func observeIssuance(renewal, ok bool) {
	kind, result := "obtain", "ok"
	if renewal {
		kind = "renew"
	}
	if !ok {
		result = "failed"
	}
	issuances.WithLabelValues(kind, result).Inc()
}

// setExpiry remembers when the certificate served for a routed host expires (zero
// forgets the host); the memory is bounded like the records of served certificates.
func setExpiry(host string, notAfter time.Time) {
	expiryMu.Lock()
	defer expiryMu.Unlock()
	if notAfter.IsZero() {
		delete(expiries, host)
		return
	}
	if len(expiries) >= maxServedRemembered {
		clear(expiries)
	}
	expiries[host] = notAfter
}

// expiryHosts lists the hosts the expiry gauge covers.
func expiryHosts() map[string]struct{} {
	expiryMu.Lock()
	defer expiryMu.Unlock()
	out := make(map[string]struct{}, len(expiries))
	for h := range expiries {
		out[h] = struct{}{}
	}
	return out
}

// storageFailed counts a failed command of the certificate storage and returns err;
// not one that failed because its caller gave up (a client gone mid-handshake, a lock
// no longer waited for): that says nothing of the storage.
func storageFailed(caller context.Context, op string, err error) error {
	if caller.Err() == nil {
		storageErrors.WithLabelValues(op).Inc()
	}
	return err
}
