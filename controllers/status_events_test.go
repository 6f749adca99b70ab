package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// A new route's status is written once, when its records are in place: never a
// Pending on the way that the next flush overwrites a second later. Watched from the
// API server, every version of the object is seen.
func TestStatusIsWrittenOncePerChange(t *testing.T) {
	o := newOperator(t, "statusonce")
	o.start()
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1.TenantRouteList{}, client.InNamespace(o.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	o.create(o.route("once", "once.auth.example.com"))

	var statuses []string // one entry per version whose status differs from the last
	last := ""
	for ev := range w.ResultChan() {
		if ev.Type != watch.Added && ev.Type != watch.Modified {
			continue
		}
		tr := ev.Object.(*v1.TenantRoute)
		ready := meta.FindStatusCondition(tr.Status.Conditions, v1.ConditionReady)
		summary := "none"
		if ready != nil {
			summary = string(ready.Status) + "/" + ready.Reason
		}
		if summary != last {
			statuses = append(statuses, summary)
			last = summary
		}
		if ready != nil && ready.Status == metav1.ConditionTrue {
			break
		}
	}
	if strings.Join(statuses, " ") != "none True/Ready" {
		t.Errorf("Ready went through %v; want it written once, straight to True/Ready", statuses)
	}
	if got := o.cfRecords()["once.auth.example.com"]; len(got) != 1 {
		t.Errorf("Ready before the record was in Cloudflare: %v", got)
	}
}

// A failover of more routes than the per-transition limit gives the first routes
// their own event, counts every route on the EdgeProvider's event, and counts the
// events not sent.
func TestFailoverEventsAreSummarised(t *testing.T) {
	o := newOperator(t, "failevents")
	o.failoverEvents = 2
	o.start()
	names := []string{"e0", "e1", "e2", "e3", "e4"}
	for i, n := range names {
		o.create(o.route(n, fmt.Sprintf("e%d.auth.example.com", i)))
	}
	o.waitReady(names...)
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)
	skippedBefore := metricValue(t, "tenantroute_events_skipped_total", map[string]string{"reason": controllers.ReasonEdgeFailedOver, "cause": "failover"})

	o.cfUp.Store(false)
	eventually(t, 30*time.Second, func() error {
		for _, n := range names {
			if tr := o.get(n); tr.Status.ActiveEdge != o.awsEdge {
				return fmt.Errorf("%s is on %s", n, tr.Status.ActiveEdge)
			}
		}
		ep := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.cfEdge}}
		return expectEvent(ep, "EdgeProvider", controllers.ReasonEdgeFailedOver, "5 of its 5 TenantRoutes move to another edge (per-route events for the first 2)")
	})
	time.Sleep(2 * time.Second) // any late event would land by now
	withEvent := 0
	for _, n := range names {
		withEvent += countEvents(o.get(n), "TenantRoute", controllers.ReasonEdgeFailedOver)
	}
	if withEvent != 2 {
		t.Errorf("%d routes got a FailedOver event; want the first 2", withEvent)
	}
	if skipped := metricValue(t, "tenantroute_events_skipped_total", map[string]string{"reason": controllers.ReasonEdgeFailedOver, "cause": "failover"}) - skippedBefore; skipped != 3 {
		t.Errorf("tenantroute_events_skipped_total{FailedOver,failover} grew by %v; want 3", skipped)
	}
}
