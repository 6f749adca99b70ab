package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/cloudflare"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
	"github.com/tenantroute/tenantroute-operator/providers/route53"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
)

const scaleRoutes = 1000

func hostname(i int) string { return fmt.Sprintf("tenant-%04d.auth.example.com", i) }

// createRoutes creates n TenantRoutes with one hostname each, concurrently.
func (o *operator) createRoutes(n int) {
	o.t.Helper()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				if err := k8s.Create(context.Background(), o.route(fmt.Sprintf("r%04d", i), hostname(i))); err != nil {
					o.t.Errorf("creating route %d: %v", i, err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// converged checks that both zones hold exactly one record per route, owned by it,
// pointing at the Cloudflare edge, and nothing else of the operator's.
func (o *operator) converged(n int) error {
	seen := map[string]int{}
	for _, r := range o.cf.Records(o.cfZone) {
		seen[r.Name]++
		i := 0
		if _, err := fmt.Sscanf(r.Name, "tenant-%04d.auth.example.com", &i); err != nil || i >= n {
			return fmt.Errorf("cloudflare has an orphan %s", r.Name)
		}
		if want := fmt.Sprintf("tenantroute:%s/%s/r%04d", o.id, o.ns, i); r.Comment != want || r.Content != r.Name+".cdn.cloudflare.net" {
			return fmt.Errorf("cloudflare %s: comment %q content %q", r.Name, r.Comment, r.Content)
		}
	}
	for name, count := range seen {
		if count != 1 {
			return fmt.Errorf("cloudflare has %d records at %s", count, name)
		}
	}
	if len(seen) != n {
		return fmt.Errorf("cloudflare has %d of %d records", len(seen), n)
	}
	sets := o.r53.RecordSets(o.r53Zone)
	if want := 2 + 2*n; len(sets) != want { // SOA, NS, and a set and its registry record per route
		return fmt.Errorf("route53 has %d record sets, want %d", len(sets), want)
	}
	return nil
}

// TestManagerStoppedMidApply stops the manager while it applies 1,000 TenantRoutes
// (the emulators answer slowly, so the apply takes seconds) and starts it again.
func TestManagerStoppedMidApply(t *testing.T) {
	o := newOperator(t, "restart")
	slow := emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: 400 * time.Millisecond}}
	o.cf.SetFaults(slow)
	o.r53.SetFaults(slow)
	o.start()
	o.createRoutes(scaleRoutes)
	eventually(t, 60*time.Second, func() error {
		if n := len(o.cf.Records(o.cfZone)); n == 0 || n >= scaleRoutes {
			return fmt.Errorf("%d records in cloudflare: not in the middle of the apply", n)
		}
		return nil
	})
	o.stopManager()
	stoppedAt := len(o.cf.Records(o.cfZone))
	t.Logf("manager stopped with %d of %d records in cloudflare, %d record sets in route53", stoppedAt, scaleRoutes, len(o.r53.RecordSets(o.r53Zone)))

	o.cf.SetFaults(emulatorkit.Faults{})
	o.r53.SetFaults(emulatorkit.Faults{})
	o.start()
	eventually(t, 120*time.Second, func() error { return o.converged(scaleRoutes) })
	eventually(t, 60*time.Second, func() error { return o.allReady(scaleRoutes) })
}

func (o *operator) allReady(n int) error {
	ready := 0
	var example string
	for i := range n {
		tr := o.get(fmt.Sprintf("r%04d", i))
		if c := condition(tr.Status.Conditions, "Ready"); c.Status == "True" {
			ready++
		} else if example == "" {
			example = fmt.Sprintf("%s: %s/%s %s; providers %+v", tr.Name, c.Status, c.Reason, c.Message, tr.Status.Providers)
		}
	}
	if ready != n {
		return fmt.Errorf("%d of %d TenantRoutes Ready; e.g. %s", ready, n, example)
	}
	return nil
}

// Each route of a sync is reconciled when it is planned and once its last provider has
// answered, not also for each provider that answers before the last: that reconcile
// found it pending and kept its status as it was. Route53 answers a second late, so
// that Cloudflare answers every route first.
func TestOneReconcileForAllTheProvidersAnswers(t *testing.T) {
	const n = 200
	o := newOperator(t, "answers")
	o.r53.SetFaults(emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: time.Second}})
	// A route still pending when its grace (MaxWait + 5 s) runs out is planned once
	// more to see whether its queues still move: on a loaded machine the sync below
	// outlasted it, and those plans were counted as answers' reconciles. The grace
	// has a test of its own (status_events_test.go); here it is out of the way.
	o.queue = zonequeue.Options{MaxWait: 30 * time.Second}
	o.start()
	// Both accounts connected and both zones listed: the routes below are planned
	// once each, with nothing to wait for but their own records.
	o.create(o.route("warmup", "warmup.auth.example.com"))
	o.waitReady("warmup")
	before := o.reconciles.Load()
	o.createRoutes(n)
	eventually(t, 60*time.Second, func() error { return o.allReady(n) })
	time.Sleep(2 * time.Second) // reconciles still queued would be counted too
	got := o.reconciles.Load() - before
	t.Logf("%d reconciles for %d routes", got, n)
	// Two a route, and a few conflicts of a status write with a cache behind it.
	if got > 2*n+n/10 {
		t.Fatalf("%d reconciles for %d routes: more than one a route beside its plan", got, n)
	}
}

// A zone whose listing fails tells the routes waiting for it, and no other: every
// route keeps an empty desire there, and while a sync starts nearly every route is
// pending. Told each failure, 100,000 routes were planned again at every retry of
// one zone none of them had records in.
func TestAFailingListingReconcilesOnlyTheRoutesWaitingForIt(t *testing.T) {
	const n = 100
	o := newOperator(t, "listquiet")
	_, r53Old := o.addZone("legacy.example.com")
	o.r53.SetFaults(emulatorkit.Faults{PathOutage: []string{r53Old}})
	o.start()
	o.create(o.route("warmup", "warmup.auth.example.com"))
	o.waitReady("warmup")
	// The routes below stay pending for as long as their Route53 zone is held, while
	// the failing zone is tried again and again: longer than two failed listings can
	// take (five attempts each, with the SDK's backoff of up to 5 s between them).
	o.r53.SetFaults(emulatorkit.Faults{PathOutage: []string{r53Old},
		PathLatency: map[string]emulatorkit.Duration{o.r53Zone: {Duration: time.Minute}}})
	before, tried := o.reconciles.Load(), o.r53.Injected()
	o.createRoutes(n)
	// Two failed listings (five attempts each) after the routes were planned: each
	// told every route with an empty desire there.
	eventually(t, 50*time.Second, func() error {
		if got := o.r53.Injected() - tried; got < 10 {
			return fmt.Errorf("the failing zone was tried %d times since the routes came", got)
		}
		return nil
	})
	got := o.reconciles.Load() - before
	t.Logf("%d reconciles for %d pending routes through two failed listings", got, n)
	if err := o.allReady(n); err == nil {
		t.Fatal("the routes were Ready before the failing zone was tried: the count says nothing")
	}
	// One a route, its plan: Cloudflare's answer waits for Route53's (settling).
	if got > n+n/4 {
		t.Fatalf("%d reconciles for %d routes that do not wait for the failing zone", got, n)
	}
}

// A zone that resolves but cannot be listed changes no route's plan, and its
// EdgeProvider's ZonesReady turning False (ZoneUnreadable) reconciles no route of
// the edge: the routes with records there, or waiting for it, hear of it from the
// zone's queue. Taken for a change of the edge, each turn of the condition planned
// every route of the edge again.
func TestAZoneTurningUnreadableReconcilesNoOtherRoute(t *testing.T) {
	const n = 50
	o := newOperator(t, "unreadquiet")
	_, r53Old := o.addZone("legacy.example.com")
	// The zones are listed again every 2 s, so that the failure below is met.
	o.zoneResync = 2 * time.Second
	o.start()
	o.createRoutes(n)
	eventually(t, 60*time.Second, func() error { return o.allReady(n) })
	ep := &v1.EdgeProvider{}
	zonesReady := func(reason string) func() error {
		return func() error {
			if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.awsEdge}, ep); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(ep.Status.Conditions, v1.ConditionZonesReady); c == nil || c.Reason != reason {
				return fmt.Errorf("ZonesReady is %+v, want reason %s", c, reason)
			}
			return nil
		}
	}
	eventually(t, 10*time.Second, zonesReady(v1.ReasonZonesResolved))
	time.Sleep(time.Second) // the last answers' reconciles
	before := o.reconciles.Load()
	o.r53.SetFaults(emulatorkit.Faults{PathOutage: []string{r53Old}})
	eventually(t, 40*time.Second, zonesReady(v1.ReasonZoneUnreadable))
	time.Sleep(2 * time.Second) // the reconciles it would have queued
	if got := o.reconciles.Load() - before; got > n/10 {
		t.Fatalf("%d reconciles for %d Ready routes while a zone none of them uses turned unreadable", got, n)
	}
	before = o.reconciles.Load()
	o.r53.SetFaults(emulatorkit.Faults{})
	eventually(t, 40*time.Second, zonesReady(v1.ReasonZonesResolved))
	time.Sleep(2 * time.Second)
	if got := o.reconciles.Load() - before; got > n/10 {
		t.Fatalf("%d reconciles for %d Ready routes while a zone none of them uses could be listed again", got, n)
	}
}

// TestThousandRoutesInOneZone counts the provider calls that 1,000 TenantRoutes in one
// zone take: one listing of the zone, and writes close to the batch minimum.
func TestThousandRoutesInOneZone(t *testing.T) {
	o := newOperator(t, "scale")
	o.createRoutes(scaleRoutes)
	start := time.Now()
	o.start()
	eventually(t, 120*time.Second, func() error { return o.converged(scaleRoutes) })
	converged := time.Since(start)
	eventually(t, 60*time.Second, func() error { return o.allReady(scaleRoutes) })

	cf, r53 := o.cf.Counters(), o.r53.Counters()
	cfLists, cfWrites := cf["GET /zones/{id}/dns_records"], cf["POST /zones/{id}/dns_records/batch"]
	r53Lists, r53Writes := r53["GET /2013-04-01/hostedzone/{Id}/rrset"], r53["POST /2013-04-01/hostedzone/{Id}/rrset"]
	cfMin, r53Min := minimumWrites(o, scaleRoutes)
	t.Logf("%d TenantRoutes converged in %s", scaleRoutes, converged.Round(time.Millisecond))
	t.Logf("cloudflare: %d list calls, %d batch writes (minimum %d)", cfLists, cfWrites, cfMin)
	t.Logf("route53:    %d list calls, %d change batches (minimum %d)", r53Lists, r53Writes, r53Min)
	if cfLists > 1 || r53Lists > 1 {
		t.Errorf("the zone was listed %d times in cloudflare and %d in route53, want once each", cfLists, r53Lists)
	}
	// While desires stream in, a queue sends only full batches, but what it holds back
	// goes out once the stream has lasted three times MaxWait, so that a trickle cannot
	// delay records for long: on a machine loaded enough to stretch the stream past
	// that (the other packages' tests beside this one), one partial batch per such
	// window is the design, not waste.
	aged := float64(converged / (3 * zonequeue.DefaultMaxWait))
	if float64(cfWrites) > 1.2*float64(cfMin)+aged || float64(r53Writes) > 1.2*float64(r53Min)+aged {
		t.Errorf("writes above 1.2x the batch minimum (plus %.0f for a stream that lasted %s): cloudflare %d/%d, route53 %d/%d",
			aged, converged.Round(time.Second), cfWrites, cfMin, r53Writes, r53Min)
	}

	// Steady state: another pass over every route writes nothing.
	o.cf.ResetCounters()
	o.r53.ResetCounters()
	o.stopManager()
	o.start()
	eventually(t, 60*time.Second, func() error {
		if o.cf.Counters()["GET /zones/{id}/dns_records"] == 0 || o.r53.Counters()["GET /2013-04-01/hostedzone/{Id}/rrset"] == 0 {
			return fmt.Errorf("the restarted operator has not planned against both zones yet")
		}
		return nil
	})
	// Any write would follow its plan within the coalescing window.
	time.Sleep(zonequeue.DefaultMaxWait + zonequeue.DefaultQuiet)
	if w := o.cf.Counters()["POST /zones/{id}/dns_records/batch"] + o.r53.Counters()["POST /2013-04-01/hostedzone/{Id}/rrset"]; w != 0 {
		t.Errorf("a restart over converged records made %d writes", w)
	}
}

// minimumWrites is the fewest batches the routes' creates take in each provider,
// packed by its own costs and limits as its batcher packs them.
func minimumWrites(o *operator, n int) (int, int) {
	cf := cloudflare.New(cloudflare.Options{})
	r53, err := route53.New(context.Background(), route53.Options{AccessKeyID: "x", SecretAccessKey: "x"})
	if err != nil {
		o.t.Fatal(err)
	}
	var creates []providers.Change
	for i := range n {
		owner := desired.OwnerKey(o.id, o.ns, fmt.Sprintf("r%04d", i))
		rec := providers.Record{Name: hostname(i), Type: "CNAME", TTL: 60, Owner: owner, Values: []string{hostname(i) + ".cdn.cloudflare.net"}}
		creates = append(creates, providers.Change{Action: providers.Create, New: &rec})
	}
	return providers.Batcher{Limit: cf.BatchLimit(), Cost: cf.ChangeCost}.Batches(creates),
		providers.Batcher{Limit: r53.BatchLimit(), Cost: r53.ChangeCost}.Batches(creates)
}

// TestReadyOnlyWithRecordsInBothProviders: 1,000 routes while Route53 answers slowly, so
// that Cloudflare holds every record long before Route53 does. Whenever the Ready
// column says True for a route, both providers hold its record; and there is a moment
// when Cloudflare holds them all while Route53 does not, so the check meant something.
func TestReadyOnlyWithRecordsInBothProviders(t *testing.T) {
	o := newOperator(t, "slowr53")
	o.r53.SetFaults(emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: 1500 * time.Millisecond}})
	o.createRoutes(scaleRoutes)
	o.start()
	sawWindow := false
	eventually(t, 180*time.Second, func() error {
		cf := map[string]bool{}
		for _, r := range o.cf.Records(o.cfZone) {
			cf[r.Name] = true
		}
		r53 := map[string]bool{}
		for _, rs := range o.r53.RecordSets(o.r53Zone) {
			if rs.Type == "CNAME" {
				r53[strings.TrimSuffix(rs.Name, ".")] = true
			}
		}
		if len(cf) == scaleRoutes && len(r53) < scaleRoutes {
			sawWindow = true
		}
		var list v1.TenantRouteList
		if err := k8s.List(context.Background(), &list, client.InNamespace(o.ns)); err != nil {
			return err
		}
		ready := 0
		for _, tr := range list.Items {
			if condition(tr.Status.Conditions, v1.ConditionReady).Status != metav1.ConditionTrue {
				continue
			}
			ready++
			// Records are written before the status that reports them, and never
			// removed here: one missing now was missing when Ready was written.
			h := tr.Spec.Hostnames[0]
			if !cf[h] || !r53[h] {
				t.Fatalf("%s says Ready with its record in cloudflare %t, in route53 %t", tr.Name, cf[h], r53[h])
			}
		}
		if ready < scaleRoutes {
			return fmt.Errorf("%d of %d Ready; cloudflare holds %d records, route53 %d", ready, scaleRoutes, len(cf), len(r53))
		}
		return nil
	})
	if !sawWindow {
		t.Fatal("route53 was never behind cloudflare: the check saw nothing")
	}
}
