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
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
)

// A new route's status is written once, when its records are in place: never a
// Pending on the way that the next flush overwrites a second later. Watched from the
// API server, every version of the object is seen.
func TestStatusIsWrittenOncePerChange(t *testing.T) {
	o := newOperator(t, "statusonce")
	o.start()
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)
	versions := watchRoutes(t, o.ns, time.Minute)
	o.create(o.route("once", "once.auth.example.com"))

	var statuses []string // one entry per version whose status differs from the last
	last := ""
	for tr := range versions {
		summary := readySummary(tr)
		if summary != last {
			statuses = append(statuses, summary)
			last = summary
		}
		if summary == "True/Ready" {
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

// Routes behind a backlog that takes longer than the pending grace to drain (a
// provider slow to answer, as one at its rate limit is) still have their status
// written once, when their records are in place: the queues are moving, so there is
// nothing to report on the way.
func TestABacklogIsReportedOnce(t *testing.T) {
	const routes = 400 // two Cloudflare batches, two Route53 change batches
	o := newOperator(t, "backlog")
	o.queue = zonequeue.Options{Quiet: 100 * time.Millisecond, MaxWait: 500 * time.Millisecond}
	grace := o.queue.MaxWait + 5*time.Second // the operator's PendingGrace
	slow := emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: 2500 * time.Millisecond}}
	o.cf.SetFaults(slow)
	o.r53.SetFaults(slow)
	versions := watchRoutes(t, o.ns, 2*time.Minute)
	o.createRoutes(routes)
	start := time.Now()
	o.start()

	statuses := map[string][]string{} // per route, its Ready as it changed
	ready := 0
	for ready < routes {
		tr, ok := <-versions
		if !ok {
			t.Fatalf("the watch ended with %d of %d routes Ready", ready, routes)
		}
		summary := readySummary(tr)
		seen := statuses[tr.Name]
		if len(seen) == 0 || seen[len(seen)-1] != summary {
			statuses[tr.Name] = append(seen, summary)
			if summary == "True/Ready" {
				ready++
			}
		}
	}
	if took := time.Since(start); took < grace+time.Second {
		t.Fatalf("every route was Ready %s after the start, within the grace of %s: nothing was tested", took.Round(time.Millisecond), grace)
	}
	twice := 0
	var example string
	for name, seen := range statuses {
		if strings.Join(seen, " ") != "none True/Ready" {
			twice++
			example = name + ": " + strings.Join(seen, " ")
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d routes had their Ready written on the way, e.g. %s", twice, routes, example)
	}
}

// watchRoutes returns every version of the TenantRoutes of a namespace, as the API
// server writes them, from now until timeout.
func watchRoutes(t *testing.T, ns string, timeout time.Duration) <-chan *v1.TenantRoute {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1.TenantRouteList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(); cancel() })
	versions := make(chan *v1.TenantRoute)
	go func() {
		defer close(versions)
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			select {
			case versions <- ev.Object.(*v1.TenantRoute):
			case <-ctx.Done():
				return
			}
		}
	}()
	return versions
}

// readySummary is a route's Ready condition as status/reason, with the message when
// it is not True; "none" before it has one.
func readySummary(tr *v1.TenantRoute) string {
	c := meta.FindStatusCondition(tr.Status.Conditions, v1.ConditionReady)
	switch {
	case c == nil:
		return "none"
	case c.Status == metav1.ConditionTrue:
		return string(c.Status) + "/" + c.Reason
	}
	return string(c.Status) + "/" + c.Reason + " (" + c.Message + ")"
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
	skippedBefore := metricValue(t, "tenantroute_events_skipped_total", map[string]string{"reason": v1.ReasonFailedOver, "cause": "failover"})

	o.cfUp.Store(false)
	eventually(t, 30*time.Second, func() error {
		for _, n := range names {
			if tr := o.get(n); tr.Status.ActiveEdge != o.awsEdge {
				return fmt.Errorf("%s is on %s", n, tr.Status.ActiveEdge)
			}
		}
		ep := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.cfEdge}}
		return expectEvent(ep, "EdgeProvider", v1.ReasonFailedOver, "5 of its 5 TenantRoutes move to another edge (per-route events for the first 2)")
	})
	time.Sleep(2 * time.Second) // any late event would land by now
	withEvent := 0
	for _, n := range names {
		withEvent += countEvents(o.get(n), "TenantRoute", v1.ReasonFailedOver)
	}
	if withEvent != 2 {
		t.Errorf("%d routes got a FailedOver event; want the first 2", withEvent)
	}
	if skipped := metricValue(t, "tenantroute_events_skipped_total", map[string]string{"reason": v1.ReasonFailedOver, "cause": "failover"}) - skippedBefore; skipped != 3 {
		t.Errorf("tenantroute_events_skipped_total{FailedOver,failover} grew by %v; want 3", skipped)
	}
}

// A failover whose records take longer than the pending grace to move (a provider
// slow to answer, as one at its rate limit is) plans each route about as often as
// its records move, not again every grace: while its queues are flushing, each says
// how its flush went for the route when it ends.
func TestAFailoverBehindABacklogPlansEachRouteOnce(t *testing.T) {
	const routes = 400 // two Cloudflare batches, two Route53 change batches
	o := newOperator(t, "slowfailover")
	o.queue = zonequeue.Options{Quiet: 100 * time.Millisecond, MaxWait: 500 * time.Millisecond}
	grace := o.queue.MaxWait + 5*time.Second // the operator's PendingGrace
	o.createRoutes(routes)
	o.start()
	eventually(t, 60*time.Second, func() error { return o.allReady(routes) })

	o.cf.SetFaults(emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: 7 * time.Second}})
	o.r53.SetFaults(emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: 7 * time.Second}})
	pending := map[string]string{"outcome": "pending"}
	pendingBefore := metricValue(t, "tenantroute_reconcile_outcomes_total", pending)
	start := time.Now()
	o.cfUp.Store(false)
	eventually(t, 2*time.Minute, func() error {
		for i := range routes {
			tr := o.get(fmt.Sprintf("r%04d", i))
			if tr.Status.ActiveEdge != o.awsEdge || condition(tr.Status.Conditions, v1.ConditionReady).Status != metav1.ConditionTrue {
				return fmt.Errorf("%s: active edge %q, Ready %+v", tr.Name, tr.Status.ActiveEdge, condition(tr.Status.Conditions, v1.ConditionReady))
			}
		}
		return nil
	})
	if took := time.Since(start); took < grace+3*time.Second {
		t.Fatalf("every route moved %s after the edge failed, within the grace of %s: nothing was tested", took.Round(time.Millisecond), grace)
	}
	// Found pending when the failover reconciles it, when the EdgeProvider's health
	// changes, and when its records are in one provider and not yet in the other.
	plans := (metricValue(t, "tenantroute_reconcile_outcomes_total", pending) - pendingBefore) / routes
	t.Logf("%.2f reconciles a route found its records pending, %s after the edge failed", plans, time.Since(start).Round(100*time.Millisecond))
	if plans > 3 {
		t.Errorf("routes were found pending %.2f times each on average: planned again while their queues were flushing", plans)
	}
}
