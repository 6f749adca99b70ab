package controllers

import (
	"fmt"
	"sync/atomic"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/clip"
)

// Defaults of the event budget. An event costs the API server and etcd about what a
// status patch costs: at the earlier budget (20 a second, a burst of 200), the 800
// events of a 10,000-route first sync added a tenth to its time to Ready against the
// floor (docs/benchmarks.md). A route created alone still gets all three of its events
// (RecordsChanged from each provider, then Ready); thousands at once get the first 50
// and one a second, and tenantroute_events_skipped_total counts the rest.
const (
	DefaultEventQPS       = 1
	DefaultEventBurst     = 50
	DefaultFailoverEvents = 50
)

// eventSink is where every event of the operator goes. Events are stored in etcd and
// one failover or one initial sync concerns thousands of TenantRoutes, so:
//   - per health transition, only the first failoverEvents routes that move get their
//     own FailedOver or FailedBack event; the EdgeProvider's event gives the count;
//   - TenantRoute events share a budget (qps, burst); beyond it they are dropped.
//
// Dropped and limited events are counted in tenantroute_events_skipped_total. Events
// about EdgeProviders are few and always sent. The sink never blocks: events go out
// through the broadcaster's own client and queue, never delaying status or records.
type eventSink struct {
	inner   events.EventRecorder
	limiter *rate.Limiter
	perWave int64
	wave    atomic.Int64 // per-route failover events left in this health transition
}

func newEventSink(inner events.EventRecorder, qps float64, burst, failoverEvents int) *eventSink {
	s := &eventSink{inner: inner, limiter: rate.NewLimiter(rate.Limit(qps), burst), perWave: int64(failoverEvents)}
	s.wave.Store(s.perWave)
	return s
}

// newWave starts a health transition: the next failoverEvents routes that move get
// their own event.
func (s *eventSink) newWave() { s.wave.Store(s.perWave) }

// Eventf implements events.EventRecorder.
func (s *eventSink) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if _, route := regarding.(*v1.TenantRoute); route {
		if (reason == v1.ReasonFailedOver || reason == v1.ReasonFailedBack) && s.wave.Add(-1) < 0 {
			eventsSkipped.WithLabelValues(reason, "failover").Inc()
			return
		}
		if !s.limiter.Allow() {
			eventsSkipped.WithLabelValues(reason, "budget").Inc()
			return
		}
	}
	s.inner.Eventf(regarding, related, eventtype, reason, action, "%s", clip.String(fmt.Sprintf(note, args...), maxNote))
}

// maxNote is the longest note the API server accepts in an events.k8s.io/v1 Event; it
// refuses the whole event past it, and the recorder only logs that. Messages that
// name many zones or quote a provider's error can pass it.
const maxNote = 1024
