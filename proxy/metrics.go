package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_requests_total",
		Help: "Requests served by the proxy, by status code and route lookup outcome (hit, resolved, stale, not_found, error).",
	}, []string{"code", "outcome"})
	lookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_lookups_total",
		Help: "Route lookups by layer (memory, redis, source) and result (hit, miss, stale, error, breaker_open).",
	}, []string{"layer", "result"})
	kvRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_kv_rejected_total",
		Help: "Shared-cache entries the proxy ignored, by reason (forged, expired, malformed); the source of truth answered instead.",
	}, []string{"reason"})
	rejectedConns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_rejected_connections_total",
		Help: "Client connections refused at accept by a connection limit, by the status sent (503: MaxConns, 429: MaxConnsPerIP).",
	}, []string{"code"})
	upstreamSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantroute_proxy_upstream_duration_seconds",
		Help:    "Time from a request's arrival to its backend's response headers, by region.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"region"})

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

	// requestCounters caches the counter of each status code and outcome, so the hot
	// path does not hash label values.
	requestCounters [600][numOutcomes]atomic.Pointer[prometheus.Counter]
	memoryLookups   [numOutcomes]prometheus.Counter
)

func init() {
	for o := range numOutcomes {
		result := map[Outcome]string{OutcomeHit: "hit", OutcomeStale: "stale", OutcomeNotFound: "hit"}[o]
		if result == "" {
			result = "miss"
		}
		memoryLookups[o] = lookups.WithLabelValues("memory", result)
	}
	// Counters of known label values start at zero, so that a dashboard or an alert
	// sees rate() = 0 rather than no series before the first event.
	for _, reason := range []string{"forged", "expired", "malformed"} {
		kvRejected.WithLabelValues(reason)
	}
	for _, code := range []string{"503", "429"} {
		rejectedConns.WithLabelValues(code)
	}
	for _, r := range []string{"secret", "acme", "no_sni", "not_routed", "backoff", "no_certificate", "acme_failed"} {
		handshakes.WithLabelValues(r)
	}
	for _, kind := range []string{"obtain", "renew"} {
		for _, r := range []string{"ok", "failed"} {
			issuances.WithLabelValues(kind, r)
		}
	}
}

// declareLayer starts a lookup layer's counters at zero.
func declareLayer(layer string) {
	for _, result := range []string{"hit", "miss", "error", "breaker_open"} {
		lookups.WithLabelValues(layer, result)
	}
}

// Register adds the proxy's metrics to a registry.
func Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{requests, lookups, upstreamSeconds, rejectedConns, kvRejected,
		handshakes, issuances, certReloadErrors, certRecordErrors, storageUnreadable, earliestExpiry} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ObserveLayer counts a layer's answer; it is the chain's Observe hook.
func ObserveLayer(layer, result string) { lookups.WithLabelValues(layer, result).Inc() }

func observeLookup(o Outcome) { memoryLookups[o].Inc() }

func observeRequest(status int, o Outcome) {
	if status < 0 || status >= len(requestCounters) {
		requests.WithLabelValues("other", outcomeNames[o]).Inc()
		return
	}
	slot := &requestCounters[status][o]
	c := slot.Load()
	if c == nil {
		counter := requests.WithLabelValues(strconv.Itoa(status), outcomeNames[o])
		slot.Store(&counter)
		c = &counter
	}
	(*c).Inc()
}

func observeRejectedConn(code string) { rejectedConns.WithLabelValues(code).Inc() }

// ObserveKVRejected counts a shared-cache entry ignored as untrustworthy; it is the
// KV's Rejected hook.
func ObserveKVRejected(reason string) { kvRejected.WithLabelValues(reason).Inc() }

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
