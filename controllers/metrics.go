package controllers

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenantroute/tenantroute-operator/edge"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
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
	reconcileOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_reconcile_outcomes_total",
		Help: "TenantRoute reconciles by outcome: ready, pending, conflict, provider_error, deleted, error.",
	}, []string{"outcome"})
)

func init() {
	metrics.Registry.MustRegister(providerRequests, providerErrors, recordsManaged, reconcileOutcomes,
		edgeHealthGauge, probeSeconds, failovers, failoverRewriteSeconds, kvSyncs, kvOrphansDeleted, orphanRecordsDeleted, abandonedDeletions)
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
