package controllers_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

const awsActive = "CNAME " + awsEdgeTarget

// pointAt checks that every hostname's records, in both providers, point at the edge.
func (o *operator) pointAt(edgeTarget func(hostname string) (cf, r53 string), hostnames ...string) error {
	cf, r53 := o.cfRecords(), o.r53Records()
	for _, h := range hostnames {
		wantCF, wantR53 := edgeTarget(h)
		if !slices.Equal(cf[h], []string{wantCF}) {
			return fmt.Errorf("cloudflare %s: %v, want %s", h, cf[h], wantCF)
		}
		if !slices.Equal(r53[h], []string{wantR53}) {
			return fmt.Errorf("route53 %s: %v, want %s", h, r53[h], wantR53)
		}
	}
	return nil
}

func onCloudflare(h string) (string, string) { return cfActive(h), r53Active(h) }
func onAWS(string) (string, string)          { return awsActive, awsActive + "." }

func (o *operator) waitReady(names ...string) {
	o.t.Helper()
	eventually(o.t, 30*time.Second, func() error {
		for _, name := range names {
			if err := expectCondition(o.get(name).Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, ""); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
}

func (o *operator) waitHealth(edgeName string, status metav1.ConditionStatus) {
	o.t.Helper()
	eventually(o.t, 20*time.Second, func() error {
		ep := &v1.EdgeProvider{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: edgeName}, ep); err != nil {
			return err
		}
		return expectCondition(ep.Status.Conditions, v1.ConditionHealthy, status, "")
	})
}

// seriesCount is how many times an event recurred (the events API folds repeats).
func seriesCount(e eventsv1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return 1
}

func countEvents(obj client.Object, kind, reason string) int {
	obj.GetObjectKind().SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
	n := 0
	for _, e := range eventsFor(obj) {
		if e.Reason == reason {
			n += max(1, int(seriesCount(e)))
		}
	}
	return n
}

func TestFailoverAndFailback(t *testing.T) {
	o := newOperator(t, "failover")
	o.start()
	hosts := []string{"a.auth.example.com", "b.auth.example.com", "c.auth.example.com"}
	for i, h := range hosts {
		o.create(o.route(fmt.Sprintf("r%d", i), h))
	}
	o.waitReady("r0", "r1", "r2")
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)
	if err := o.pointAt(onCloudflare, hosts...); err != nil {
		t.Fatal(err)
	}

	// The Cloudflare edge goes down: 3 failed probes a second apart, then one apply.
	down := time.Now()
	o.cfUp.Store(false)
	eventually(t, 15*time.Second, func() error { return o.pointAt(onAWS, hosts...) })
	t.Logf("records in both providers on the AWS edge %s after the Cloudflare edge went down", time.Since(down).Round(10*time.Millisecond))
	if took := time.Since(down); took > 3*time.Second+3*time.Second {
		t.Errorf("failover took %s, want within failureThreshold x interval (3 s) plus an apply", took)
	}
	eventually(t, 10*time.Second, func() error {
		for _, name := range []string{"r0", "r1", "r2"} {
			tr := o.get(name)
			if tr.Status.ActiveEdge != o.awsEdge || tr.Status.LastFailoverTime == nil {
				return fmt.Errorf("%s: active %s, lastFailoverTime %v", name, tr.Status.ActiveEdge, tr.Status.LastFailoverTime)
			}
			if err := expectCondition(tr.Status.Conditions, v1.ConditionFailedOver, metav1.ConditionTrue, v1.ReasonFailedOver); err != nil {
				return err
			}
			if err := expectEvent(tr, "TenantRoute", v1.ReasonFailedOver, "from "+o.cfEdge+" to "+o.awsEdge); err != nil {
				return err
			}
		}
		ep := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.cfEdge}}
		return expectEvent(ep, "EdgeProvider", v1.ReasonFailedOver, "3 of its 3 TenantRoutes")
	})

	// It recovers: after 2 good probes and the 2 s hold-down, traffic fails back, once.
	o.cfUp.Store(true)
	up := time.Now()
	eventually(t, 20*time.Second, func() error { return o.pointAt(onCloudflare, hosts...) })
	if took := time.Since(up); took < 2*time.Second {
		t.Errorf("failed back after %s, before the hold-down", took)
	}
	eventually(t, 10*time.Second, func() error {
		tr := o.get("r0")
		if err := expectCondition(tr.Status.Conditions, v1.ConditionFailedOver, metav1.ConditionFalse, ""); err != nil {
			return err
		}
		return expectEvent(tr, "TenantRoute", v1.ReasonFailedBack, "back from "+o.awsEdge+" to "+o.cfEdge)
	})
	time.Sleep(3 * time.Second) // a second failback would come within a few probes
	for _, name := range []string{"r0", "r1", "r2"} {
		tr := o.get(name)
		if n := countEvents(tr, "TenantRoute", v1.ReasonFailedBack); n != 1 {
			t.Errorf("%s: %d FailedBack events, want 1", name, n)
		}
		if n := countEvents(tr, "TenantRoute", v1.ReasonFailedOver); n != 1 {
			t.Errorf("%s: %d FailedOver events, want 1", name, n)
		}
	}
	if _, n := rewriteHistogram(t, o.cfEdge); n < 2 {
		t.Errorf("tenantroute_failover_rewrite_seconds observed %d rewrites of %s, want the failover and the failback", n, o.cfEdge)
	}
}

// A reconcile that reads a copy of the route from before the last status write sees
// the move again: it must not announce it again.
func TestStaleReadsAnnounceEachMoveOnce(t *testing.T) {
	o := newOperator(t, "stale")
	o.laggingReads = true
	o.start()
	o.create(o.route("r0", "a.auth.example.com"))
	o.waitReady("r0")
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)

	o.cfUp.Store(false)
	eventually(t, 15*time.Second, func() error { return o.pointAt(onAWS, "a.auth.example.com") })
	eventually(t, 10*time.Second, func() error {
		return expectEvent(o.get("r0"), "TenantRoute", v1.ReasonFailedOver, "to "+o.awsEdge)
	})
	o.cfUp.Store(true)
	eventually(t, 20*time.Second, func() error { return o.pointAt(onCloudflare, "a.auth.example.com") })
	eventually(t, 10*time.Second, func() error {
		return expectEvent(o.get("r0"), "TenantRoute", v1.ReasonFailedBack, "to "+o.cfEdge)
	})
	time.Sleep(3 * time.Second) // later reconciles of the route, reading one write behind
	tr := o.get("r0")
	if tr.Status.ActiveEdge != o.cfEdge {
		t.Errorf("active edge %s, want %s", tr.Status.ActiveEdge, o.cfEdge)
	}
	for _, reason := range []string{v1.ReasonFailedOver, v1.ReasonFailedBack} {
		if n := countEvents(tr, "TenantRoute", reason); n != 1 {
			t.Errorf("%d %s events, want 1", n, reason)
		}
	}
}

func TestFlappingEdgeCausesNoRewrites(t *testing.T) {
	o := newOperator(t, "flapping")
	o.start()
	o.create(o.route("r0", "a.auth.example.com"))
	o.waitReady("r0")
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)
	writes := func() int {
		return o.cf.Counters()["POST /zones/{id}/dns_records/batch"] + o.r53.Counters()["POST /2013-04-01/hostedzone/{Id}/rrset"]
	}
	before := writes()

	// The health endpoint now answers up and down in turn: never 3 failures in a row.
	edit(t, &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.cfEdge}}, func(ep *v1.EdgeProvider) {
		ep.Spec.HealthCheck.URL = strings.Replace(o.cfProbe, "/healthz", "/flapping", 1)
	})
	time.Sleep(10 * time.Second) // about ten probes
	if w := writes(); w != before {
		t.Errorf("a flapping edge caused %d record writes", w-before)
	}
	tr := o.get("r0")
	if tr.Status.ActiveEdge != o.cfEdge || countEvents(tr, "TenantRoute", v1.ReasonFailedOver) != 0 {
		t.Errorf("a flapping edge moved traffic: active %s", tr.Status.ActiveEdge)
	}
	if err := o.pointAt(onCloudflare, "a.auth.example.com"); err != nil {
		t.Error(err)
	}
}

func TestBothEdgesDownFailStatic(t *testing.T) {
	o := newOperator(t, "failstatic")
	o.start()
	o.create(o.route("r0", "a.auth.example.com"))
	o.waitReady("r0")
	o.awsUp.Store(false)
	o.waitHealth(o.awsEdge, metav1.ConditionFalse)
	o.cfUp.Store(false)
	o.waitHealth(o.cfEdge, metav1.ConditionFalse)
	eventually(t, 10*time.Second, func() error {
		tr := o.get("r0")
		if err := expectCondition(tr.Status.Conditions, v1.ConditionEdgeHealthy, metav1.ConditionFalse, v1.ReasonFailStatic); err != nil {
			return err
		}
		return expectEvent(tr, "TenantRoute", v1.ReasonFailStatic, "records stay on "+o.cfEdge)
	})
	if err := o.pointAt(onCloudflare, "a.auth.example.com"); err != nil {
		t.Errorf("records moved although no edge is healthy: %v", err)
	}
	if tr := o.get("r0"); tr.Status.ActiveEdge != o.cfEdge {
		t.Errorf("active edge %s", tr.Status.ActiveEdge)
	}
}

func TestManualPinIgnoresHealth(t *testing.T) {
	o := newOperator(t, "pinned")
	o.start()
	tr := o.route("r0", "a.auth.example.com")
	tr.Spec.Failover = &v1.FailoverPolicy{Mode: v1.FailoverManual, PinnedEdge: o.awsEdge}
	o.create(tr)
	o.waitReady("r0")
	if err := o.pointAt(onAWS, "a.auth.example.com"); err != nil {
		t.Fatal(err)
	}
	o.awsUp.Store(false)
	o.waitHealth(o.awsEdge, metav1.ConditionFalse)
	eventually(t, 10*time.Second, func() error {
		return expectCondition(o.get("r0").Status.Conditions, v1.ConditionEdgeHealthy, metav1.ConditionFalse, v1.ReasonEdgeUnhealthy)
	})
	got := o.get("r0")
	if err := expectCondition(got.Status.Conditions, v1.ConditionFailedOver, metav1.ConditionFalse, v1.ReasonPinned); err != nil {
		t.Error(err)
	}
	if err := o.pointAt(onAWS, "a.auth.example.com"); err != nil {
		t.Errorf("a pinned route moved: %v", err)
	}

	// The pinned EdgeProvider is deleted, and with it the edge the records point at:
	// left so, the Cloudflare record would point at an edge nobody runs, which whoever
	// gets its name or address next could serve. The route goes to the first edge that
	// exists, and says the pin names none.
	if err := k8s.Delete(context.Background(), &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.awsEdge}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		got := o.get("r0").Status
		if err := expectCondition(got.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonProviderError); err != nil {
			return err
		}
		if err := expectCondition(got.Conditions, v1.ConditionFailedOver, metav1.ConditionFalse, v1.ReasonPinnedEdgeMissing); err != nil {
			return err
		}
		if rec := o.cfRecords()["a.auth.example.com"]; !slices.Equal(rec, []string{cfActive("a.auth.example.com")}) {
			return fmt.Errorf("with the pinned edge gone, the Cloudflare record is %v", rec)
		}
		return nil
	})
}

// One 403 from Cloudflare, met while the operator checks the credentials again (here
// because the Secret was edited), must not drop the account and its queues: the
// failover that follows rewrites the Cloudflare records at once, and the credentials
// are accepted again at the next try.
func TestA403DoesNotStopTheFailoverThatFollows(t *testing.T) {
	o := newOperator(t, "forbidden403")
	o.start()
	hosts := []string{"f403.auth.example.com"}
	o.create(o.route("r", hosts...))
	o.waitReady("r")
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)

	f := o.cf.Faults()
	f.Forbidden = 1
	o.cf.SetFaults(f)
	secret := o.cfSecret()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	secret.Labels = map[string]string{"rotated": "yes"}
	if err := k8s.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	ep := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.cfEdge}}
	eventually(t, 10*time.Second, func() error {
		return expectEvent(ep, "EdgeProvider", v1.ReasonCredentialsRejected, "refused")
	})

	o.cfUp.Store(false)
	eventually(t, 15*time.Second, func() error { return o.pointAt(onAWS, hosts...) })
	eventually(t, 15*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, ep); err != nil {
			return err
		}
		return expectCondition(ep.Status.Conditions, v1.ConditionCredentialsReady, metav1.ConditionTrue, v1.ReasonCredentialsAccepted)
	})
}

// A failover shows on the EdgeProvider and the Region as soon as its records have
// moved, whatever the number of routes: how many moved and how many of their statuses
// are still to follow, counting down to none; one event on each.
func TestFailoverShowsOnTheEdgeProviderAndTheRegion(t *testing.T) {
	o := newOperator(t, "report")
	o.start()
	var hosts, names []string
	for i := range 20 {
		name, host := fmt.Sprintf("r%d", i), fmt.Sprintf("h%d.auth.example.com", i)
		o.create(o.route(name, host))
		hosts, names = append(hosts, host), append(names, name)
	}
	o.waitReady(names...)
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)

	o.cfUp.Store(false)
	eventually(t, 15*time.Second, func() error { return o.pointAt(onAWS, hosts...) })
	moved := time.Now()
	ep, region := &v1.EdgeProvider{}, &v1.Region{}
	failoverOf := func() (*v1.FailoverStatus, *v1.FailoverStatus, error) {
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, ep); err != nil {
			return nil, nil, err
		}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.region}, region); err != nil {
			return nil, nil, err
		}
		return ep.Status.Failover, region.Status.Failover, nil
	}
	// Within 2 s of the records moving, both say so.
	eventually(t, 2*time.Second, func() error {
		e, r, err := failoverOf()
		if err != nil {
			return err
		}
		for _, s := range []*v1.FailoverStatus{e, r} {
			if s == nil || s.RecordsMovedAt == nil || s.Reason != v1.ReasonFailedOver || s.Edge != o.cfEdge || s.Moved != 20 {
				return fmt.Errorf("status.failover %+v", s)
			}
		}
		return nil
	})
	t.Logf("the EdgeProvider showed the records moved %s after they were", time.Since(moved).Round(time.Millisecond))
	if e, _, _ := failoverOf(); e.RecordsMovedAt.Time.Before(e.StartedAt.Time) || e.StartedAt.Time.After(moved) {
		t.Errorf("failover started %s, records moved %s, seen moved %s", e.StartedAt, e.RecordsMovedAt, moved)
	}
	// The statuses follow, and the count goes to none.
	eventually(t, 15*time.Second, func() error {
		e, r, err := failoverOf()
		if err != nil {
			return err
		}
		if e.StatusesPending != 0 || r.StatusesPending != 0 {
			return fmt.Errorf("statuses pending: edge %d, region %d", e.StatusesPending, r.StatusesPending)
		}
		for _, n := range names {
			if tr := o.get(n); tr.Status.ActiveEdge != o.awsEdge {
				return fmt.Errorf("%s: no statuses pending, but %s's status says %s", o.cfEdge, n, tr.Status.ActiveEdge)
			}
		}
		return nil
	})
	eventually(t, 5*time.Second, func() error {
		if err := expectEvent(ep, "EdgeProvider", v1.ReasonFailedOver, "records of 20 TenantRoutes moved"); err != nil {
			return err
		}
		return expectEvent(region, "Region", v1.ReasonFailedOver, "records of 20 of this region's TenantRoutes moved")
	})
	if n := countEvents(region, "Region", v1.ReasonFailedOver); n != 1 {
		t.Errorf("%d FailedOver events on the Region, want 1", n)
	}
}

// A health decision the API server refused is written again until it is taken, not
// at the next heartbeat minutes later: a new leader plans from the saved health, and
// would move a failover's records back to the dead edge it believes healthy.
func TestARefusedHealthDecisionIsWrittenAgain(t *testing.T) {
	o := newOperator(t, "healthsave")
	o.start()
	const host = "saved.auth.example.com"
	o.create(o.route("r", host))
	o.waitReady("r")
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)

	ctx := context.Background()
	unhealthy := &v1.EdgeProvider{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: o.cfEdge}, unhealthy); err != nil {
		t.Fatal(err)
	}
	for i := range unhealthy.Status.Conditions {
		if unhealthy.Status.Conditions[i].Type == v1.ConditionHealthy {
			unhealthy.Status.Conditions[i].Status = metav1.ConditionFalse
		}
	}
	lift := refuseUpdates(t, "refuse-unhealthy-"+o.id, "edgeproviders/status",
		fmt.Sprintf("object.metadata.name != %q || !has(object.status.conditions) || "+
			"object.status.conditions.all(c, c.type != 'Healthy' || c.status != 'False')", o.cfEdge),
		"the edge's ill health is refused", unhealthy)

	o.cfUp.Store(false)
	eventually(t, 15*time.Second, func() error { return o.pointAt(onAWS, host) })
	time.Sleep(time.Second) // the decision's write, refused
	o.waitHealth(o.cfEdge, metav1.ConditionTrue)
	lift()
	// The heartbeat is 5 minutes away; the decision is saved within the retries' wait.
	eventually(t, 45*time.Second, func() error {
		ep := &v1.EdgeProvider{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: o.cfEdge}, ep); err != nil {
			return err
		}
		return expectCondition(ep.Status.Conditions, v1.ConditionHealthy, metav1.ConditionFalse, "")
	})
}

// A failover soon after a leader change, with the DNS resolver down, does not wait
// for the resolver: the routes not reconciled yet since the start had their custom
// domains checked on the failover's one goroutine, up to 2 s each, one after another.
func TestAFailoverDoesNotWaitForTheDNSResolver(t *testing.T) {
	dnsSrv, err := testenv.StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := newOperator(t, "dnsdown")
	o.dns = dnsSrv.Addr
	o.start()
	var names, hosts []string
	for i := range 12 {
		name, host := fmt.Sprintf("r%d", i), fmt.Sprintf("h%d.auth.example.com", i)
		o.create(o.route(name, host, fmt.Sprintf("login.corp%d.test", i)))
		names, hosts = append(names, name), append(hosts, host)
	}
	// Each owner proves its domain.
	eventually(t, 30*time.Second, func() error {
		for _, name := range names {
			tr := o.get(name)
			if len(tr.Status.CustomDomains) != 1 || tr.Status.CustomDomains[0].ChallengeValue == "" {
				return fmt.Errorf("%s: custom domains %+v", name, tr.Status.CustomDomains)
			}
			c := tr.Status.CustomDomains[0]
			dnsSrv.Set(c.Hostname, dns.TypeCNAME, c.CNAMETarget)
			dnsSrv.Set(c.ChallengeName, dns.TypeTXT, c.ChallengeValue)
		}
		return nil
	})
	eventually(t, 30*time.Second, func() error {
		for i, name := range names {
			if st := hostnameState(o.get(name), fmt.Sprintf("login.corp%d.test", i)); st != v1.ClaimGranted {
				return fmt.Errorf("%s's custom domain: %q", name, st)
			}
		}
		return nil
	})
	o.waitReady(names...)

	// A new leader, and the resolver takes queries but never answers.
	o.stopManager()
	dnsSrv.Close()
	// The port can still be held a moment: by the server's own socket, or by a
	// lookup the stopped manager left running (each ends within its 2 s).
	var silent net.PacketConn
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if silent, err = net.ListenPacket("udp", dnsSrv.Addr); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = silent.Close() })
	o.start()
	down := time.Now()
	o.cfUp.Store(false)
	eventually(t, 60*time.Second, func() error { return o.pointAt(onAWS, hosts...) })
	took := time.Since(down)
	t.Logf("records on the AWS edge %s after the Cloudflare edge went down", took.Round(10*time.Millisecond))
	// The probes decide in 3 s; the manager's start and one apply add a few.
	if took > 10*time.Second {
		t.Errorf("the failover took %s with the resolver silent, want it not to wait for it", took)
	}
}
