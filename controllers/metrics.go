package controllers

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"

	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/edge"
)

var (
	providerRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_provider_api_requests_total",
		Help: "HTTP requests sent to DNS provider APIs, SDK retries included, by EdgeProvider, operation and HTTP status code.",
	}, []string{"provider", "operation", "code"})
	providerErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_provider_api_errors_total",
		Help: "DNS provider API requests that failed (HTTP status >= 400 or no answer), by EdgeProvider, operation and code.",
	}, []string{"provider", "operation", "code"})
	kvSyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_kv_syncs_total",
		Help: "Full synchronisations of the shared cache (Redis) by result (ok, error).",
	}, []string{"result"})
	kvOrphansDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantroute_kv_orphans_deleted_total",
		Help: "Route entries deleted from the shared cache because no TenantRoute grants their hostname.",
	})
	orphanRecordsDeleted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "tenantroute_orphan_records_deleted_total",
		Help: "Record changes that deleted records whose TenantRoute no longer exists (found at a zone's resync or on start).",
	})
	abandonedDeletions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_deletions_abandoned_total",
		Help: "TenantRoute deletions completed after --deletion-timeout with records possibly left in an EdgeProvider's zones, by EdgeProvider.",
	}, []string{"edge"})
	recordsManaged = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantroute_records_managed",
		Help: "Record sets the operator owns, by EdgeProvider.",
	}, []string{"provider"})
	edgeHealthGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantroute_edge_health",
		Help: "Health of each edge: 1 healthy, 0 unhealthy, -1 unknown.",
	}, []string{"edge"})
	probeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantroute_edge_probe_duration_seconds",
		Help:    "Latency of edge health probes, by edge and result.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
	}, []string{"edge", "result"})
	failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_failovers_total",
		Help: "TenantRoutes whose active edge moved because of health, by from and to edge.",
	}, []string{"from", "to"})
	failoverRewriteSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantroute_failover_rewrite_seconds",
		Help:    "Time from an edge health change to every record it changed being applied, by edge.",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 10),
	}, []string{"edge"})
	recordsFailing = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantroute_records_failing",
		Help: "TenantRoutes whose records the EdgeProvider's last attempt did not apply (provider error, or a change the provider rejected), by EdgeProvider.",
	}, []string{"provider"})
	flushSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantroute_zone_flush_duration_seconds",
		Help:    "Time a provider took to apply one flush of a zone's apply queue (all its batch requests), by EdgeProvider and result (ok, error).",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
	}, []string{"provider", "result"})
	flushChanges = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "tenantroute_zone_flush_changes",
		Help:    "Record changes sent by one flush of a zone's apply queue, by EdgeProvider.",
		Buckets: prometheus.ExponentialBuckets(1, 4, 9),
	}, []string{"provider"})
	eventsSkipped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_events_skipped_total",
		Help: "TenantRoute events not sent, by reason and cause: failover (past the per-transition limit of per-route failover events) or budget (past the event rate budget).",
	}, []string{"reason", "cause"})
	failStaticRoutes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "tenantroute_routes_fail_static",
		Help: "TenantRoutes none of whose edges is healthy: their records stay on the last active edge (fail static).",
	})
	certificates = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantroute_certificates",
		Help: "Granted hostnames by the state of their HTTPS certificate (Issued, Pending, Failed), as the proxies report them; served only when certificate status is on.",
	}, []string{"state"})
	reconcileOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_reconcile_outcomes_total",
		Help: "TenantRoute reconciles by outcome: ready, pending, conflict, provider_error, deleting, deleted.",
	}, []string{"outcome"})
)

func init() {
	metrics.Registry.MustRegister(providerRequests, providerErrors, recordsManaged, reconcileOutcomes,
		edgeHealthGauge, probeSeconds, failovers, failoverRewriteSeconds, kvSyncs, kvOrphansDeleted, orphanRecordsDeleted, abandonedDeletions,
		recordsFailing, flushSeconds, flushChanges, failStaticRoutes, eventsSkipped, certificates)
	// Counters of known label values start at zero, so that a dashboard or an alert
	// sees rate() = 0 rather than no series before the first event.
	for _, outcome := range []string{"ready", "pending", "conflict", "provider_error", "deleting", "deleted"} {
		reconcileOutcomes.WithLabelValues(outcome)
	}
	for _, state := range []v1.CertificateState{v1.CertificateIssued, v1.CertificatePending, v1.CertificateFailed} {
		certificates.WithLabelValues(string(state))
	}
}

// routeSet is the set of routes in fail static, kept for its gauge.
type routeSet struct {
	mu      sync.Mutex
	members map[types.NamespacedName]struct{}
}

func (s *routeSet) set(key types.NamespacedName, in bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.members == nil {
		s.members = map[types.NamespacedName]struct{}{}
	}
	if in {
		s.members[key] = struct{}{}
	} else {
		delete(s.members, key)
	}
	failStaticRoutes.Set(float64(len(s.members)))
}

// observeFlush returns the hook that times one EdgeProvider's queue flushes.
func observeFlush(edge string) func(changes int, took time.Duration, err error) {
	return func(changes int, took time.Duration, err error) {
		result := "ok"
		if err != nil {
			result = "error"
		}
		flushSeconds.WithLabelValues(edge, result).Observe(took.Seconds())
		flushChanges.WithLabelValues(edge).Observe(float64(changes))
	}
}

// observeProvider returns the hook that counts one EdgeProvider's API requests.
func observeProvider(edge string) func(operation, code string) {
	return func(operation, code string) {
		providerRequests.WithLabelValues(edge, operation, code).Inc()
		if status, err := strconv.Atoi(code); err != nil || status >= 400 { // "network": no answer at all
			providerErrors.WithLabelValues(edge, operation, code).Inc()
		}
	}
}

// observeProbe records one health probe.
func observeProbe(edgeName string, p edge.Probe) {
	result := "success"
	if !p.OK {
		result = "failure"
	}
	probeSeconds.WithLabelValues(edgeName, result).Observe(p.Latency.Seconds())
}
