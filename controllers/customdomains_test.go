package controllers

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// A tenant decides how long its domains' DNS takes to answer: a hundred names under a
// nameserver that never answers cost a reconcile two seconds each, one after another.
// Sixteen such routes held every worker of the TenantRoute controller for minutes at a
// time, again at every check interval, and every other tenant's routes, hand-overs and
// deletions waited. A reconcile now waits a bounded time for all of the checks it
// starts together, and none for those another started; the answers that come later
// reconcile the route.
func TestSlowDomainsDoNotHoldAReconcile(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0") // reads questions, answers none
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	answered, reconciles := queuedReconciles(t)
	r := &TenantRouteReconciler{Verifier: &domainVerifier{Resolver: silent.LocalAddr().String(), Interval: time.Minute, Grace: time.Hour,
		Answered: answered}}
	route := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "slow", UID: types.UID("uid-slow")}}
	// Twice the lookups that may run at once: the second half waits for a slot.
	custom := make([]v1.CustomDomainStatus, 2*maxDomainLookups)
	for i := range custom {
		custom[i] = v1.CustomDomainStatus{Hostname: fmt.Sprintf("h%d.blackhole.test", i), CNAMETarget: "acme.edge.example.com"}
	}
	start := time.Now()
	_, pending := r.verifyCustomDomains(context.Background(), route, custom, metav1.Now(), false)
	if took := time.Since(start); took > domainCheckBudget+time.Second {
		t.Errorf("%d domains whose DNS never answers held the reconcile %s, want at most %s", len(custom), took.Round(time.Millisecond), domainCheckBudget+time.Second)
	}
	if len(pending) != len(custom) {
		t.Errorf("%d of %d unanswered domains pending, want all", len(pending), len(custom))
	}
	// The route's next reconcile, while those lookups still run, does not wait for
	// them again: each such reconcile held a worker for the whole budget, and routes
	// with enough silent domains kept every worker busy.
	start = time.Now()
	r.verifyCustomDomains(context.Background(), route, custom, metav1.Now(), false)
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("a reconcile waited %s for lookups another one started, want none", took.Round(time.Millisecond))
	}
	// Their first answers reconcile the route, gathered rather than one an answer,
	// the last of them too.
	var allAnswered time.Time
	for deadline := time.Now().Add(15 * time.Second); allAnswered.IsZero(); time.Sleep(20 * time.Millisecond) {
		r.Verifier.mu.Lock()
		if len(r.Verifier.asking) == 0 {
			allAnswered = time.Now()
		}
		r.Verifier.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the lookups of silent domains did not end within 15 s")
		}
	}
	time.Sleep(answerCoalesce + 500*time.Millisecond)
	got := reconciles()
	switch {
	case len(got) == 0:
		t.Error("the route was not reconciled when its lookups were answered")
	case len(got) > 2:
		t.Errorf("%d reconciles for the answers of %d lookups in two rounds, want them gathered (at most 2)", len(got), len(custom))
	case got[len(got)-1].Before(allAnswered):
		t.Errorf("no reconcile after the last lookups were answered (%s), the last at %s", allAnswered.Format(time.StampMilli), got[len(got)-1].Format(time.StampMilli))
	}
	// Checked again (the answers are stale): the same answers come, and a reconcile
	// neither waits for them nor is told of them; while a resolver is down, routes
	// were reconciled for every answer, each reconcile waiting the whole budget.
	r.Verifier.Interval = time.Millisecond
	start = time.Now()
	r.verifyCustomDomains(context.Background(), route, custom, metav1.Now(), false)
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("a reconcile checking %d domains again waited %s for their answers, want none", len(custom), took.Round(time.Millisecond))
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r.Verifier.mu.Lock()
		left := len(r.Verifier.asking)
		r.Verifier.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lookups of silent domains did not end within 15 s")
		}
	}
	time.Sleep(answerCoalesce + 500*time.Millisecond)
	if n := len(reconciles()); n != len(got) {
		t.Errorf("the same answers again reconciled the route %d times, want none", n-len(got))
	}
	r.Verifier.Interval = time.Minute

	// A slow answer (past the budget) is not lost: the check goes on, and the next
	// reconcile finds it.
	srv, err := testenv.StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const domain, target = "shop.slow-corp.test", "acme.edge.example.com"
	srv.Set(challengePrefix+domain, dns.TypeTXT, ChallengeValue(route.UID, domain))
	srv.Set(domain, dns.TypeCNAME, target)
	// The TXT and the CNAME: 2.2 s together, past the budget however fast the machine,
	// each 0.9 s within its question's limit however slow.
	srv.SetDelay(1100 * time.Millisecond)
	r.Verifier = &domainVerifier{Resolver: srv.Addr, Interval: time.Minute, Grace: time.Hour}
	one := func(now metav1.Time) ([]v1.CustomDomainStatus, map[string]string) {
		return r.verifyCustomDomains(context.Background(), route, []v1.CustomDomainStatus{{Hostname: domain, CNAMETarget: target}}, now, false)
	}
	if _, pending := one(metav1.Now()); !strings.Contains(pending[domain], "waiting for proof") {
		t.Fatalf("a proof whose answers come after the budget, first reconcile: pending %q, want waiting", pending[domain])
	}
	deadline := time.Now().Add(10 * time.Second)
	var verified *metav1.Time
	for verified == nil {
		got, pending := one(metav1.Now())
		if len(pending) == 0 && got[0].VerifiedAt != nil {
			verified = got[0].VerifiedAt
		} else if time.Now().After(deadline) {
			t.Fatalf("the slow proof never verified: %+v, pending %v", got, pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// verifiedAt is when the proof's answer came, not when a reconcile read it: a later
	// one, with the same answer, leaves it (the grace of a removed proof counts from it).
	later := metav1.NewTime(time.Now().Add(30 * time.Second))
	if got, _ := one(later); got[0].VerifiedAt == nil || !got[0].VerifiedAt.Equal(verified) {
		t.Errorf("verifiedAt after a reconcile 30 s later with the same answer: %v, want %v", got[0].VerifiedAt, verified)
	}
}

// A domain checked again is not waited for: its answer reconciles the route when it
// proves what the one before did not (here a proof added), not when it repeats. And
// the check comes an interval after the last one began: counted from when its answer
// came, a check that no reconcile waits for fell due an interval late each time.
func TestARecheckReconcilesTheRouteWhenItsAnswerChanges(t *testing.T) {
	srv, err := testenv.StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.SetDelay(300 * time.Millisecond)
	ask, reconciles := queuedReconciles(t)
	r := &TenantRouteReconciler{Verifier: &domainVerifier{Resolver: srv.Addr, Interval: time.Second, Grace: time.Hour,
		Answered: ask}}
	answered := func() int { return len(reconciles()) }
	underWay := func() int { r.Verifier.mu.Lock(); defer r.Verifier.mu.Unlock(); return len(r.Verifier.asking) }
	route := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "recheck", Namespace: "tenants", UID: types.UID("uid-recheck")}}
	const domain, target = "shop.recheck-corp.test", "acme.edge.example.com"
	check := func() map[string]string { // a reconcile, its status saved
		custom, pending := r.verifyCustomDomains(context.Background(), route, []v1.CustomDomainStatus{{Hostname: domain, CNAMETarget: target}}, metav1.Now(), false)
		route.Status.CustomDomains = custom
		return pending
	}
	waitIdle := func() {
		for deadline := time.Now().Add(5 * time.Second); underWay() > 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("a lookup did not end within 5 s")
			}
		}
	}

	first := time.Now()
	if pending := check(); pending[domain] == "" {
		t.Fatal("a domain without proof is not pending")
	}
	srv.Set(challengePrefix+domain, dns.TypeTXT, ChallengeValue(route.UID, domain))
	srv.Set(domain, dns.TypeCNAME, target)
	// An interval after the first check began (its answer came 300 ms into it).
	time.Sleep(time.Until(first.Add(r.Verifier.Interval + 50*time.Millisecond)))
	again := time.Now()
	if pending := check(); pending[domain] == "" {
		t.Error("a re-check waited for its answer")
	}
	if underWay() == 0 {
		t.Fatal("an interval after the last check began, the domain was not asked about again")
	}
	for deadline := time.Now().Add(5 * time.Second); answered() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the proof a re-check found did not reconcile the route")
		}
	}
	if pending := check(); len(pending) != 0 {
		t.Errorf("the reconcile after the proof was found: pending %v", pending)
	}

	// The same answer again reconciles nothing.
	time.Sleep(time.Until(again.Add(r.Verifier.Interval + 50*time.Millisecond)))
	check()
	waitIdle()
	time.Sleep(answerCoalesce + 300*time.Millisecond)
	if n := answered(); n != 1 {
		t.Errorf("%d reconciles for one changed answer and one repeated, want 1", n)
	}

	// Nor does a resolver that stops answering: the domain keeps what it had, and a
	// resolver outage would reconcile every route with custom domains.
	srv.Close()
	time.Sleep(r.Verifier.Interval + 50*time.Millisecond)
	check()
	waitIdle()
	time.Sleep(answerCoalesce + 300*time.Millisecond)
	if n := answered(); n != 1 {
		t.Errorf("the resolver gone, %d more reconciles, want none", n-1)
	}
	if pending := check(); len(pending) != 0 {
		t.Errorf("the resolver gone, the proven domain is pending: %v", pending)
	}
}

// queuedReconciles wires Answered as the controller does, to the requests of a real
// work queue, and returns when each reconcile it asked for was taken from the queue.
func queuedReconciles(t *testing.T) (func(types.NamespacedName, time.Duration), func() []time.Time) {
	reqs, q := startedRequests(t)
	var mu sync.Mutex
	var taken []time.Time
	go func() {
		for {
			item, shutdown := q.Get()
			if shutdown {
				return
			}
			mu.Lock()
			taken = append(taken, time.Now())
			mu.Unlock()
			q.Done(item)
		}
	}()
	return reqs.addAfter, func() []time.Time { mu.Lock(); defer mu.Unlock(); return slices.Clone(taken) }
}

// A proven domain whose check gets no answer (the resolver away or slow, or no lookup
// yet since the start, as in a failover then) keeps its grant without a word of loss.
// Within the grace it said "routed until" a time it was kept past, with a warning that
// it had lost its proof: for every proven domain at each start whose first lookups
// were slow. A domain whose proof was found gone still runs out of grace.
func TestAProvenDomainWithoutAnAnswerIsNotLost(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0") // reads questions, answers none
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	r := &TenantRouteReconciler{Verifier: &domainVerifier{Resolver: silent.LocalAddr().String(), Interval: time.Minute, Grace: time.Hour}}
	const domain, target = "login.unanswered-corp.test", "acme.edge.example.com"
	now := metav1.Now()
	route := func(verified time.Time, message string) *v1.TenantRoute {
		at := metav1.NewTime(verified)
		return &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", UID: "uid-unanswered"},
			Status: v1.TenantRouteStatus{CustomDomains: []v1.CustomDomainStatus{{Hostname: domain, CNAMETarget: target, VerifiedAt: &at, Message: message}}}}
	}
	// report writes the check's statuses as a reconcile does, and returns its events.
	report := func(tr *v1.TenantRoute, custom []v1.CustomDomainStatus) []string {
		rec := events.NewFakeRecorder(16)
		r.reportCustomDomains(tr, custom, nil, rec)
		close(rec.Events)
		var got []string
		for e := range rec.Events {
			got = append(got, e)
		}
		return got
	}
	for _, c := range []struct {
		name       string
		cachedOnly bool
	}{{"a failover before any lookup since the start", true}, {"a reconcile whose lookup is not answered in its budget", false}} {
		tr := route(now.Add(-time.Minute), "")
		custom, pending := r.verifyCustomDomains(context.Background(), tr, []v1.CustomDomainStatus{{Hostname: domain, CNAMETarget: target}}, now, c.cachedOnly)
		if len(pending) != 0 {
			t.Errorf("%s: a proven domain is pending: %v", c.name, pending)
		}
		if m := custom[0].Message; strings.Contains(m, "routed until") || !strings.HasSuffix(m, uncheckedNote) {
			t.Errorf("%s: message %q, want the proof unchecked, not lost", c.name, m)
		}
		if got := report(tr, custom); len(got) != 0 {
			t.Errorf("%s: events %q, want none", c.name, got)
		}
		// The proof then found gone is a loss, announced.
		unchecked := tr.Status.CustomDomains
		lost := slices.Clone(unchecked)
		lost[0].Message = "TXT _tenantroute-challenge." + domain + " does not hold it; routed until later"
		if got := report(tr, lost); len(got) != 1 || !strings.Contains(got[0], v1.ReasonDomainUnverified) {
			t.Errorf("%s, then the proof gone: events %q, want one %s", c.name, got, v1.ReasonDomainUnverified)
		}
	}
	check := func(tr *v1.TenantRoute) (v1.CustomDomainStatus, map[string]string) {
		custom, pending := r.verifyCustomDomains(context.Background(), tr, []v1.CustomDomainStatus{{Hostname: domain, CNAMETarget: target}}, now, false)
		return custom[0], pending
	}
	// A proof found gone runs out of grace, answers or not: granted within it...
	const gone = "TXT _tenantroute-challenge." + domain + txtMissing + "it; routed until "
	if got, pending := check(route(now.Add(-30*time.Minute), gone+"later")); len(pending) != 0 || !strings.Contains(got.Message, "routed until") {
		t.Errorf("a proof found gone 30 minutes ago (grace: one hour), no answer since: pending %v, message %q; want granted, in its grace", pending, got.Message)
	}
	// ...and not after it.
	if _, pending := check(route(now.Add(-2*time.Hour), gone+"an hour ago")); pending[domain] == "" {
		t.Error("a domain whose proof was found gone two hours ago (grace: one hour) is still granted while its checks get no answer")
	}
	// Statuses written before the unchecked note: a domain kept while unanswered
	// said the resolver's error alone, within the grace with "routed until" too.
	// They are not losses.
	for _, old := range []struct {
		verified time.Time
		message  string
	}{
		{now.Add(-2 * time.Hour), "asking 10.0.0.10:53 for _tenantroute-challenge." + domain + ": i/o timeout"},
		{now.Add(-time.Minute), "10.0.0.10:53 answered SERVFAIL for _tenantroute-challenge." + domain + "; routed until later"},
	} {
		if got, pending := check(route(old.verified, old.message)); len(pending) != 0 || !strings.HasSuffix(got.Message, uncheckedNote) {
			t.Errorf("a domain kept unanswered by the version before (%q), no answer again: pending %v, message %q; want it kept", old.message, pending, got.Message)
		}
	}
}
