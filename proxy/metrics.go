package proxy

import (
	"strconv"
	"sync/atomic"

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
	acceptErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_proxy_accept_errors_total",
		Help: "Client connections whose accept failed and was tried again, by reason (exhausted: out of file descriptors, kernel memory or poller watches, tried again after a backoff; network: the connection's own network error or a firewall rule, tried again at once).",
	}, []string{"reason"})
	requestBuffered = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenantroute_proxy_request_buffer_bytes",
		Help: "Bytes of request bodies held whole before their backend is asked; at the buffer's memory limit, bodies stream instead.",
	})
	requestBufferFull = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantroute_proxy_request_buffer_full_total",
		Help: "Request bodies streamed as they came, although small enough to be held whole, because the buffer's memory limit, or its client address's share of it, was reached.",
	})
	tenantShareFull = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantroute_proxy_tenant_share_full_total",
		Help: "Requests answered 503 because their tenant's requests held their share (--upstream-max-conns-per-tenant) of the pool of every backend of its region; the log names the tenant.",
	})
	upstreamSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantroute_proxy_upstream_duration_seconds",
		Help:    "Time from a request's arrival to its backend's response headers, by region.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	}, []string{"region"})

	// requestCounters caches the counter of each status code and outcome, so the hot
	// path does not hash label values.
	requestCounters                [600][numOutcomes]atomic.Pointer[prometheus.Counter]
	memoryLookups                  [numOutcomes]prometheus.Counter
	acceptExhausted, acceptNetwork prometheus.Counter
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
	acceptExhausted, acceptNetwork = acceptErrors.WithLabelValues("exhausted"), acceptErrors.WithLabelValues("network")
}

// declareLayer starts a lookup layer's counters at zero.
func declareLayer(layer string) {
	for _, result := range []string{"hit", "miss", "error", "breaker_open"} {
		lookups.WithLabelValues(layer, result)
	}
}

// Register adds the proxy's metrics to a registry.
func Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{requests, lookups, upstreamSeconds, rejectedConns, acceptErrors, kvRejected, requestBuffered, requestBufferFull, tenantShareFull} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ObserveLayer counts a layer's answer; it is the chain's Observe hook.
func ObserveLayer(layer, result string) { lookups.WithLabelValues(layer, result).Inc() }

func observeLookup(o Outcome) { memoryLookups[o].Inc() }

func observeRequest(status int, o Outcome) { observeRequests(status, o, 1) }

// observeRequests counts n requests answered with status.
func observeRequests(status int, o Outcome, n uint64) {
	if status < 0 || status >= len(requestCounters) {
		requests.WithLabelValues("other", outcomeNames[o]).Add(float64(n))
		return
	}
	slot := &requestCounters[status][o]
	c := slot.Load()
	if c == nil {
		counter := requests.WithLabelValues(strconv.Itoa(status), outcomeNames[o])
		slot.Store(&counter)
		c = &counter
	}
	(*c).Add(float64(n))
}

func observeRejectedConn(code string) { rejectedConns.WithLabelValues(code).Inc() }

// ObserveKVRejected counts a shared-cache entry ignored as untrustworthy; it is the
// KV's Rejected hook.
func ObserveKVRejected(reason string) { kvRejected.WithLabelValues(reason).Inc() }
