package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
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
	recordsManaged = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "tenantroute_records_managed",
		Help: "Record sets the operator owns, by EdgeProvider.",
	}, []string{"provider"})
	reconcileOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tenantroute_reconcile_outcomes_total",
		Help: "TenantRoute reconciles by outcome: ready, pending, conflict, provider_error, deleted, error.",
	}, []string{"outcome"})
)

func init() {
	metrics.Registry.MustRegister(providerRequests, providerErrors, recordsManaged, reconcileOutcomes)
}

// observeProvider returns the hook that counts one EdgeProvider's API requests.
func observeProvider(edge string) func(operation, code string) {
	return func(operation, code string) {
		providerRequests.WithLabelValues(edge, operation, code).Inc()
		if code == "network" || code >= "400" {
			providerErrors.WithLabelValues(edge, operation, code).Inc()
		}
	}
}
