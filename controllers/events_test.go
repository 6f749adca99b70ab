package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// Routes that change all at once (a thousand created together, an operator's first
// start over them) share the default budget: its burst goes out, the rest is dropped
// and counted, and EdgeProvider events are never held back by it.
func TestRouteEventsShareTheDefaultBudget(t *testing.T) {
	rec := events.NewFakeRecorder(4096)
	sink := newEventSink(rec, DefaultEventQPS, DefaultEventBurst, DefaultFailoverEvents)
	// A reason of its own: no other test's operator counts under it.
	const reason = "BudgetTest"
	skipped := eventsSkipped.WithLabelValues(reason, "budget")
	before := testutil.ToFloat64(skipped)

	const routes = 1000
	for i := range routes {
		route := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns"}}
		sink.Eventf(route, nil, corev1.EventTypeNormal, reason, "ApplyRecords", "route %d", i)
	}
	ep := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: "cloudflare"}}
	sink.Eventf(ep, nil, corev1.EventTypeNormal, "Healthy", "HealthCheck", "edge is Healthy")

	sent := len(rec.Events)
	// What docs/operating.md promises: the first 50, then one a second. The loop takes
	// well under a second; one more token may have come meanwhile.
	const burst = 50
	if routeEvents := sent - 1; routeEvents < burst || routeEvents > burst+1 {
		t.Errorf("%d of %d route events were sent; want the burst of %d", routeEvents, routes, burst)
	}
	if got := testutil.ToFloat64(skipped) - before; int(got) != routes-(sent-1) {
		t.Errorf("tenantroute_events_skipped_total{BudgetTest,budget} grew by %v; want %d", got, routes-(sent-1))
	}
	var last string
	for range sent {
		last = <-rec.Events
	}
	if want := "Normal Healthy edge is Healthy"; last != want {
		t.Errorf("the EdgeProvider's event, sent past the budget: got %q, want %q", last, want)
	}
}
