package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	cfemulator "github.com/tenantroute/tenantroute-operator/providers/cloudflare/emulator"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// recordOwner returns the owner in the comment of the Cloudflare record of a name.
func (o *operator) recordOwner(name string) string {
	for _, r := range o.cf.Records(o.cfZone) {
		if r.Name == name {
			return r.Comment
		}
	}
	return ""
}

// routedTenant is the tenant the proxy would send a host to: the holder of its grant,
// by the rule the proxy's source of truth applies.
func routedTenant(host string, namespaces ...string) (string, error) {
	var all []*v1.TenantRoute
	for _, ns := range namespaces {
		var list v1.TenantRouteList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return "", err
		}
		for i := range list.Items {
			all = append(all, &list.Items[i])
		}
	}
	if h := routes.Holder(all, host); h != nil {
		return h.Namespace + "/" + h.Name, nil
	}
	return "", nil
}

func hostnameState(tr *v1.TenantRoute, host string) v1.ClaimState {
	for _, h := range tr.Status.Hostnames {
		if h.Hostname == host {
			return h.State
		}
	}
	return ""
}

// Two TenantRoutes in namespaces team and team-b, created in the same second, claim
// one hostname: the one granted it gets the record and the traffic, whichever it is.
// Under the old rules DNS sorted "team" before "team-b" while the proxy sorted
// "team-b/..." before "team/...", and sent the traffic to the other tenant.
func TestSameSecondClaimsAcrossNamespacesAgree(t *testing.T) {
	o := newOperator(t, "tie")
	o.extraNS = []string{"team", "team-b"}
	for _, ns := range o.extraNS {
		o.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	o.start()
	const host = "tie.auth.example.com"
	a, b := o.route("x", host), o.route("x", host)
	a.Namespace, b.Namespace = "team", "team-b"
	a.Spec.TenantID, b.Spec.TenantID = "tenant-a", "tenant-b"
	o.create(a)
	o.create(b)
	if a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		t.Log("created in the same second")
	}
	var holder string
	eventually(t, 30*time.Second, func() error {
		var ga, gb v1.TenantRoute
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(a), &ga); err != nil {
			return err
		}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(b), &gb); err != nil {
			return err
		}
		sa, sb := hostnameState(&ga, host), hostnameState(&gb, host)
		switch {
		case sa == v1.ClaimGranted && sb == v1.ClaimConflict:
			holder = "team/x"
		case sb == v1.ClaimGranted && sa == v1.ClaimConflict:
			holder = "team-b/x"
		default:
			return fmt.Errorf("claims: team %q, team-b %q", sa, sb)
		}
		if owner := o.recordOwner(host); owner != "tenantroute:tie/"+holder {
			return fmt.Errorf("the record belongs to %q, the grant to %s", owner, holder)
		}
		return nil
	})
	if routed, err := routedTenant(host, "team", "team-b"); err != nil || routed != holder {
		t.Errorf("DNS serves %s, the proxy routes to %q (%v)", holder, routed, err)
	}
}

// A TenantRoute created earlier that adds a hostname another already holds gets a
// Conflict: the holder keeps the record and the traffic, whatever the ages.
func TestOlderRouteCannotTakeAGrantedHostname(t *testing.T) {
	o := newOperator(t, "grant")
	o.start()
	o.create(o.route("old", "old.auth.example.com"))
	eventually(t, 20*time.Second, func() error {
		return expectCondition(o.get("old").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
	o.create(o.route("new", "held.auth.example.com"))
	eventually(t, 20*time.Second, func() error {
		return expectCondition(o.get("new").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
	edit(t, o.get("old"), func(old *v1.TenantRoute) {
		old.Spec.Hostnames = append(old.Spec.Hostnames, "held.auth.example.com")
	})
	eventually(t, 20*time.Second, func() error {
		old := o.get("old")
		if old.Status.ObservedGeneration != old.Generation {
			return fmt.Errorf("not reconciled yet")
		}
		if st := hostnameState(old, "held.auth.example.com"); st != v1.ClaimConflict {
			return fmt.Errorf("the older route's claim: %q", st)
		}
		return expectCondition(old.Status.Conditions, v1.ConditionConflict, metav1.ConditionTrue, "")
	})
	// Give a wrongly taken name time to show in the providers, then check it did not.
	time.Sleep(3 * time.Second)
	if owner := o.recordOwner("held.auth.example.com"); owner != "tenantroute:grant/t-grant/new" {
		t.Errorf("the record of the held name belongs to %q", owner)
	}
	if routed, err := routedTenant("held.auth.example.com", o.ns); err != nil || routed != "t-grant/new" {
		t.Errorf("the proxy routes the held name to %q (%v)", routed, err)
	}
}

// A tenantID belongs to one TenantRoute: a second claimant gets a Conflict and
// neither records nor traffic.
func TestDuplicateTenantIDIsAConflict(t *testing.T) {
	o := newOperator(t, "dup")
	o.start()
	first, second := o.route("first", "dup-first.auth.example.com"), o.route("second", "dup-second.auth.example.com")
	first.Spec.TenantID, second.Spec.TenantID = "shared", "shared"
	o.create(first)
	eventually(t, 20*time.Second, func() error {
		return expectCondition(o.get("first").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
	o.create(second)
	eventually(t, 20*time.Second, func() error {
		tr := o.get("second")
		if tr.Status.TenantID == nil || tr.Status.TenantID.State != v1.ClaimConflict {
			return fmt.Errorf("tenantID claim: %+v", tr.Status.TenantID)
		}
		if st := hostnameState(tr, "dup-second.auth.example.com"); st != v1.ClaimConflict {
			return fmt.Errorf("hostname claim: %q", st)
		}
		return expectCondition(tr.Status.Conditions, v1.ConditionConflict, metav1.ConditionTrue, "")
	})
	time.Sleep(3 * time.Second)
	if owner := o.recordOwner("dup-second.auth.example.com"); owner != "" {
		t.Errorf("a record was written for the second claimant: %q", owner)
	}
	if routed, err := routedTenant("dup-second.auth.example.com", o.ns); err != nil || routed != "" {
		t.Errorf("the proxy routes the second claimant's name to %q (%v)", routed, err)
	}
}

// A route deleted while Redis is unreachable, with the manager restarted before Redis
// is back, is gone from Redis within one synchronisation after: the operator deletes
// every entry no TenantRoute grants.
func TestRedisForgetsRoutesDeletedWhileItWasDown(t *testing.T) {
	redisSrv, kv := startRedisKV(t)
	o := newOperator(t, "kvsync")
	o.kv, o.kvSync = &kv, time.Second
	o.start()
	const host = "kv.auth.example.com"
	o.create(o.route("doomed", host))
	eventually(t, 20*time.Second, func() error {
		r, err := kv.Lookup(context.Background(), host)
		if err != nil || r.Tenant != "doomed" {
			return fmt.Errorf("in Redis: %+v %v", r, err)
		}
		return nil
	})
	redisSrv.Pause()
	if err := k8s.Delete(context.Background(), o.get("doomed")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		var tr v1.TenantRoute
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: "doomed"}, &tr); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	o.stopManager()
	redisSrv.Resume()
	if _, err := kv.Lookup(context.Background(), host); err != nil {
		t.Fatalf("the deleted route's entry should still be in Redis before the operator is back: %v", err)
	}
	o.start()
	eventually(t, 10*time.Second, func() error {
		if n, err := kv.Client.Exists(context.Background(), routes.KeyPrefix+host).Result(); err != nil || n != 0 {
			return fmt.Errorf("still in Redis (%v)", err)
		}
		return nil
	})
}

// Redis that lost its data (a restart without persistence) also lost the record of
// the hostnames written for each route: the synchronisation writes it again with the
// entries, so that a hostname a route drops afterwards leaves Redis at once, not at
// the next synchronisation (an hour here; it would lead to the route meanwhile).
func TestAHostnameDroppedAfterRedisLostItsDataLeavesRedis(t *testing.T) {
	_, kv := startRedisKV(t)
	o := newOperator(t, "kvlost")
	o.kv, o.kvSync = &kv, time.Hour // the synchroniser runs once, at the start
	o.start()
	const kept, dropped = "kept.auth.example.com", "dropped.auth.example.com"
	o.create(o.route("r", kept, dropped))
	inRedis := func(host string) error {
		if r, err := kv.Lookup(context.Background(), host); err != nil || r.Tenant != "r" {
			return fmt.Errorf("%s in Redis: %+v %v", host, r, err)
		}
		return nil
	}
	eventually(t, 20*time.Second, func() error { return errors.Join(inRedis(kept), inRedis(dropped)) })

	o.stopManager()
	if err := kv.Client.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	o.start()
	eventually(t, 20*time.Second, func() error { return errors.Join(inRedis(kept), inRedis(dropped)) })
	r := o.get("r")
	r.Spec.Hostnames = []string{kept}
	if err := k8s.Update(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if n, err := kv.Client.Exists(context.Background(), routes.KeyPrefix+dropped).Result(); err != nil || n != 0 {
			return fmt.Errorf("%s still in Redis (%v)", dropped, err)
		}
		return inRedis(kept)
	})
}

// A custom domain whose nameservers answer after the reconcile stopped waiting (its
// budget, 2 s) is routed as soon as their answer is in, not at the route's next check:
// here a minute later, the default interval.
func TestASlowProofIsTakenWhenItsAnswerComes(t *testing.T) {
	dnsSrv, err := testenv.StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dnsSrv.Close)
	o := newOperator(t, "slowproof")
	o.dns, o.domainInterval = dnsSrv.Addr, time.Minute
	o.start()
	const managed, domain = "acme-sp.auth.example.com", "login.slowproof-corp.test"
	o.create(o.route("acme", managed))
	eventually(t, 30*time.Second, func() error {
		return expectCondition(o.get("acme").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonReady)
	})
	// The proof is in place before the domain is added; each of its two answers (the
	// TXT, the CNAME) takes 1.1 s, so they come after the reconcile's budget.
	tr := o.get("acme")
	dnsSrv.Set("_tenantroute-challenge."+domain, dns.TypeTXT, controllers.ChallengeValue(tr.UID, domain))
	dnsSrv.Set(domain, dns.TypeCNAME, managed)
	dnsSrv.SetDelay(1100 * time.Millisecond)
	tr.Spec.Hostnames = append(tr.Spec.Hostnames, domain)
	if err := k8s.Update(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, 15*time.Second, func() error {
		if routed, err := routedTenant(domain, o.ns); err != nil || routed != o.ns+"/acme" {
			return fmt.Errorf("routed to %q (%v)", routed, err)
		}
		return nil
	})
	t.Logf("routed %s after the domain was added", time.Since(start).Round(100*time.Millisecond))
}

// A custom domain is routed only once its owner proved control on a real DNS server
// (the challenge TXT and the CNAME), within one check interval; when the TXT goes, it
// stays routed for the grace period, then is released.
func TestCustomDomainsAreRoutedOnlyWithProof(t *testing.T) {
	dnsSrv, err := testenv.StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dnsSrv.Close)
	o := newOperator(t, "domains")
	o.dns = dnsSrv.Addr
	o.start()
	const domain = "login.domains-corp.test"
	o.create(o.route("acme", "acme-cd.auth.example.com", domain))
	var challenge v1.CustomDomainStatus
	eventually(t, 20*time.Second, func() error {
		tr := o.get("acme")
		if st := hostnameState(tr, domain); st != v1.ClaimPendingVerification {
			return fmt.Errorf("claim %q", st)
		}
		if len(tr.Status.CustomDomains) != 1 || tr.Status.CustomDomains[0].ChallengeValue == "" {
			return fmt.Errorf("custom domains %+v", tr.Status.CustomDomains)
		}
		challenge = tr.Status.CustomDomains[0]
		return expectCondition(tr.Status.Conditions, v1.ConditionCustomDomainsVerified, metav1.ConditionFalse, v1.ReasonDomainPending)
	})
	if routed, _ := routedTenant(domain, o.ns); routed != "" {
		t.Fatalf("routed before any proof, to %s", routed)
	}
	// Only the CNAME: not enough.
	dnsSrv.Set(domain, dns.TypeCNAME, challenge.CNAMETarget)
	time.Sleep(2 * time.Second)
	if st := hostnameState(o.get("acme"), domain); st != v1.ClaimPendingVerification {
		t.Fatalf("with the CNAME alone: %q", st)
	}
	// The TXT too: granted within one check interval (500 ms here).
	dnsSrv.Set(challenge.ChallengeName, dns.TypeTXT, challenge.ChallengeValue)
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		if routed, err := routedTenant(domain, o.ns); err != nil || routed != o.ns+"/acme" {
			return fmt.Errorf("routed to %q (%v)", routed, err)
		}
		return nil
	})
	t.Logf("routed %s after the proof appeared", time.Since(start).Round(100*time.Millisecond))
	// The proof goes: still routed for the grace period (4 s here) from when it was
	// last seen (one check interval before at most; status keeps whole seconds), then
	// released.
	dnsSrv.Set(challenge.ChallengeName, dns.TypeTXT)
	lost := time.Now()
	eventually(t, 15*time.Second, func() error {
		if st := hostnameState(o.get("acme"), domain); st != v1.ClaimPendingVerification {
			return fmt.Errorf("claim %q", st)
		}
		return nil
	})
	if since := time.Since(lost); since < 4*time.Second-500*time.Millisecond-time.Second {
		t.Errorf("released %s after the proof went, before the grace period", since)
	}
	if routed, _ := routedTenant(domain, o.ns); routed != "" {
		t.Errorf("still routed to %s after the grace period", routed)
	}
	if err := expectEvent(o.get("acme"), "TenantRoute", v1.ReasonDomainUnverified, domain); err != nil {
		t.Error(err)
	}
}

// A route whose records a provider refuses ends its reconciles in a terminal error,
// and controller-runtime drops the result of a reconcile that errs: its custom
// domains were no longer checked, so a proof added was never seen, and a removed
// one's grace would never have run out, for as long as a record stayed refused.
func TestARouteWithRefusedRecordsKeepsItsChecks(t *testing.T) {
	dnsSrv, err := testenv.StartDNS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dnsSrv.Close)
	o := newOperator(t, "refused")
	o.dns = dnsSrv.Addr
	const managed, domain = "acme-rf.auth.example.com", "login.refused-corp.test"
	refused := managed
	o.cfRefused.Store(&refused)
	terminal := map[string]string{"controller": "tenantroute"}
	errsBefore := metricValue(t, "controller_runtime_terminal_reconcile_errors_total", terminal)
	o.start()
	o.create(o.route("acme", managed, domain))
	var challenge v1.CustomDomainStatus
	eventually(t, 20*time.Second, func() error {
		tr := o.get("acme")
		states := map[string]v1.ProviderRecordStatus{}
		for _, p := range tr.Status.Providers {
			states[p.Edge] = p
		}
		if cf := states[o.cfEdge]; cf.State != v1.RecordsError || !strings.Contains(cf.Message, "rejected by the provider") {
			return fmt.Errorf("Cloudflare: %+v", cf)
		}
		if aws := states[o.awsEdge]; aws.State != v1.RecordsSynced {
			return fmt.Errorf("Route53: %+v", aws) // its report is the last news the route waits for
		}
		if len(tr.Status.CustomDomains) != 1 || tr.Status.CustomDomains[0].ChallengeValue == "" {
			return fmt.Errorf("custom domains %+v", tr.Status.CustomDomains)
		}
		challenge = tr.Status.CustomDomains[0]
		return nil
	})
	if metricValue(t, "controller_runtime_terminal_reconcile_errors_total", terminal) == errsBefore {
		t.Error("the refusal was no terminal error of the reconcile that found it")
	}
	// The proof, after every news of the route: only its own checks can find it, one
	// interval (500 ms here) after the last.
	dnsSrv.Set(challenge.ChallengeName, dns.TypeTXT, challenge.ChallengeValue)
	dnsSrv.Set(domain, dns.TypeCNAME, challenge.CNAMETarget)
	start := time.Now()
	eventually(t, 10*time.Second, func() error {
		if st := hostnameState(o.get("acme"), domain); st != v1.ClaimGranted {
			return fmt.Errorf("claim %q", st)
		}
		return nil
	})
	t.Logf("granted %s after the proof appeared", time.Since(start).Round(100*time.Millisecond))
	// The refusal was an error of the reconcile that found it; found again at each of
	// the route's checks, it is not one more: a logged error and a counted terminal
	// error a minute for each refused route, forever.
	errs, checks := metricValue(t, "controller_runtime_terminal_reconcile_errors_total", terminal), o.reconciles.Load()
	time.Sleep(3 * time.Second)
	if n := o.reconciles.Load() - checks; n < 3 {
		t.Errorf("%d reconciles in 3 s with a 500 ms check interval", n)
	}
	if n := metricValue(t, "controller_runtime_terminal_reconcile_errors_total", terminal) - errs; n != 0 {
		t.Errorf("the same refusal found again made %v more terminal errors, want none", n)
	}
}

// A route being deleted stops being routed through Redis at once, not at the next
// synchronisation.
func TestRedisForgetsADeletedRouteAtOnce(t *testing.T) {
	_, kv := startRedisKV(t)
	o := newOperator(t, "kvdelete")
	o.kv, o.kvSync = &kv, time.Hour // no synchronisation during the test
	o.start()
	const host = "kvdel.auth.example.com"
	o.create(o.route("doomed", host))
	eventually(t, 20*time.Second, func() error {
		if _, err := kv.Lookup(context.Background(), host); err != nil {
			return err
		}
		return nil
	})
	if err := k8s.Delete(context.Background(), o.get("doomed")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if n, _ := kv.Client.Exists(context.Background(), routes.KeyPrefix+host).Result(); n != 0 {
			return fmt.Errorf("still in Redis")
		}
		return nil
	})
}

// A TenantRoute is one tenant: its tenantID cannot be edited into another's (which
// would present one tenant's hostnames to the backends as another tenant).
func TestTenantIDIsImmutable(t *testing.T) {
	o := newOperator(t, "immutable")
	o.create(o.route("acme", "imm.auth.example.com"))
	tr := o.get("acme")
	tr.Spec.TenantID = "victim"
	err := k8s.Update(context.Background(), tr)
	if err == nil || !strings.Contains(err.Error(), "spec.tenantID cannot be changed") {
		t.Errorf("changing spec.tenantID: %v", err)
	}
}

// Records whose TenantRoute is gone without its finalizer having run (a finalizer
// removed by hand, a crash between the deletion's calls) are found and deleted on
// start; live routes' records and records the operator does not own are untouched.
func TestOrphanedRecordsAreSweptOnStart(t *testing.T) {
	o := newOperator(t, "orphans")
	if _, err := o.cf.AddRecord(o.cfZone, cfemulator.Record{Name: "foreign.auth.example.com", Type: "A", Content: "203.0.113.9", TTL: 300}); err != nil {
		t.Fatal(err)
	}
	o.start()
	o.create(o.route("ghost", "ghost.auth.example.com"))
	o.create(o.route("alive", "alive.auth.example.com"))
	eventually(t, 20*time.Second, func() error {
		for _, h := range []string{"ghost.auth.example.com", "alive.auth.example.com"} {
			if len(o.cfRecords()[h]) != 1 || len(o.r53Records()[h]) != 1 {
				return fmt.Errorf("%s not in both providers yet", h)
			}
		}
		return nil
	})
	o.stopManager()
	ghost := o.get("ghost")
	ghost.Finalizers = nil
	if err := k8s.Update(context.Background(), ghost); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), ghost); err != nil {
		t.Fatal(err)
	}
	if len(o.cfRecords()["ghost.auth.example.com"]) != 1 {
		t.Fatal("the orphan's record should still be there before the operator starts again")
	}
	o.start()
	eventually(t, 20*time.Second, func() error {
		cf, r53 := o.cfRecords(), o.r53Records()
		for _, name := range []string{"ghost.auth.example.com", "_tenantroute-cname.ghost.auth.example.com"} {
			if len(cf[name]) > 0 || len(r53[name]) > 0 {
				return fmt.Errorf("%s is still there: cloudflare %v, route53 %v", name, cf[name], r53[name])
			}
		}
		return nil
	})
	cf, r53 := o.cfRecords(), o.r53Records()
	if len(cf["alive.auth.example.com"]) != 1 || len(r53["alive.auth.example.com"]) != 1 || len(cf["foreign.auth.example.com"]) != 1 {
		t.Errorf("records that are not orphans changed: cloudflare %v, route53 %v", cf, r53)
	}
}

// A zone restricted to namespaces labelled zone-auth=allowed: a TenantRoute from
// another namespace is refused at admission by the ValidatingAdmissionPolicy shipped in
// config/policy, and a route admitted before its namespace lost the label has the
// hostname Forbidden by the controller, with the same message: no record, no traffic.
// It can still be deleted.
func TestNamespaceOutsideAZoneSelectorIsForbidden(t *testing.T) {
	ctx := context.Background()
	if err := testenv.Apply(ctx, k8s, "config/policy/zone_namespaces.yaml"); err != nil {
		t.Fatal(err)
	}
	o := newOperator(t, "forbid")
	outsider := "forbid-outsider"
	o.extraNS = []string{outsider}
	o.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: outsider}})
	setLabel := func(ns, value string) {
		t.Helper()
		var n corev1.Namespace
		if err := k8s.Get(ctx, client.ObjectKey{Name: ns}, &n); err != nil {
			t.Fatal(err)
		}
		if value == "" {
			delete(n.Labels, "zone-auth")
		} else {
			n.Labels["zone-auth"] = value
		}
		if err := k8s.Update(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}
	setLabel(o.ns, "allowed")
	// The same rule written two ways: matchLabels on one edge, matchExpressions on the other.
	selectors := map[string]*metav1.LabelSelector{
		o.cfEdge: {MatchLabels: map[string]string{"zone-auth": "allowed"}},
		o.awsEdge: {MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone-auth", Operator: metav1.LabelSelectorOpIn, Values: []string{"allowed", "trusted"}},
			{Key: "quarantined", Operator: metav1.LabelSelectorOpDoesNotExist}}},
	}
	for _, name := range []string{o.cfEdge, o.awsEdge} {
		var ep v1.EdgeProvider
		if err := k8s.Get(ctx, client.ObjectKey{Name: name}, &ep); err != nil {
			t.Fatal(err)
		}
		ep.Spec.Zones[0].NamespaceSelector = selectors[name]
		if err := k8s.Update(ctx, &ep); err != nil {
			t.Fatal(err)
		}
	}
	o.start()

	const host = "fb.auth.example.com"
	intruder := o.route("intruder", host)
	intruder.Namespace = outsider
	intruder.Spec.Edges = []string{o.cfEdge}
	want := "spec.hostnames: " + host + ": " + routes.ForbiddenMessage(outsider, zoneName, o.cfEdge)
	// The API server loads a new policy within a second or so.
	eventually(t, 20*time.Second, func() error {
		err := k8s.Create(ctx, intruder.DeepCopy(), client.DryRunAll)
		if err == nil || !strings.Contains(err.Error(), want) {
			return fmt.Errorf("admission of a route from %s: %v", outsider, err)
		}
		return nil
	})
	viaAWS := intruder.DeepCopy()
	viaAWS.Spec.Edges = []string{o.awsEdge}
	wantAWS := "spec.hostnames: " + host + ": " + routes.ForbiddenMessage(outsider, zoneName, o.awsEdge)
	if err := k8s.Create(ctx, viaAWS, client.DryRunAll); err == nil || !strings.Contains(err.Error(), wantAWS) {
		t.Errorf("admission through the matchExpressions selector: %v", err)
	}
	// A hostname outside the restricted zone is admitted from the same namespace.
	elsewhere := intruder.DeepCopy()
	elsewhere.Spec.Hostnames = []string{"fb.other-zone.test"}
	if err := k8s.Create(ctx, elsewhere, client.DryRunAll); err != nil {
		t.Errorf("a hostname outside the zone was refused: %v", err)
	}

	o.create(o.route("tenant", host))
	eventually(t, 20*time.Second, func() error {
		if len(o.cfRecords()[host]) != 1 || len(o.r53Records()[host]) != 1 {
			return fmt.Errorf("records: cloudflare %v, route53 %v", o.cfRecords()[host], o.r53Records()[host])
		}
		return expectCondition(o.get("tenant").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})

	setLabel(o.ns, "")
	eventually(t, 20*time.Second, func() error {
		tr := o.get("tenant")
		var claim v1.HostnameClaim
		for _, h := range tr.Status.Hostnames {
			if h.Hostname == host {
				claim = h
			}
		}
		if claim.State != v1.ClaimForbidden || claim.Message != routes.ForbiddenMessage(o.ns, zoneName, o.cfEdge) {
			return fmt.Errorf("claim %+v", claim)
		}
		if len(o.cfRecords()[host])+len(o.r53Records()[host]) != 0 {
			return fmt.Errorf("records still there: cloudflare %v, route53 %v", o.cfRecords()[host], o.r53Records()[host])
		}
		return expectCondition(tr.Status.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonForbidden)
	})
	if routed, err := routedTenant(host, o.ns, outsider); err != nil || routed != "" {
		t.Errorf("the proxy routes a forbidden hostname to %q (%v)", routed, err)
	}
	if err := k8s.Delete(ctx, o.get("tenant")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		var tr v1.TenantRoute
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: o.ns, Name: "tenant"}, &tr); err == nil {
			return fmt.Errorf("not deleted yet (finalizers %v)", tr.Finalizers)
		}
		return nil
	})
}

// A hostname two TenantRoutes list is used (records, traffic) only once the grant is
// saved in the API server: a leader that died between deciding and saving would leave
// records for a grant its successor does not know, and could give the name to the
// other claimant. Here the holder of a hostname two more routes list is deleted; the
// API server refuses to save the grant of the next claimant (an admission policy);
// no record of the name may appear for it until the grant is saved.
func TestAContestedGrantIsUsedOnlyOnceSaved(t *testing.T) {
	o := newOperator(t, "durable")
	o.start()
	const host = "moved.auth.example.com"
	o.create(o.route("holder", host))
	o.waitReady("holder")
	// next lists the name; so does idle, whose tenantID is another route's: it can be
	// granted nothing, but the name stays contested.
	o.create(o.route("twin", "twin.auth.example.com"))
	o.waitReady("twin")
	o.create(o.route("next", host))
	idle := o.route("idle", host)
	idle.Spec.TenantID = "twin"
	o.create(idle)
	eventually(t, 20*time.Second, func() error {
		for _, name := range []string{"next", "idle"} {
			if st := hostnameState(o.get(name), host); st != v1.ClaimConflict {
				return fmt.Errorf("%s's claim: %q", name, st)
			}
		}
		return nil
	})

	ctx := context.Background()
	granted := o.get("next")
	granted.Status.Hostnames = []v1.HostnameClaim{{Hostname: host, ClaimStatus: v1.ClaimStatus{State: v1.ClaimGranted, Since: metav1.Now()}}}
	lift := refuseUpdates(t, "refuse-grants-"+o.id, "tenantroutes/status",
		fmt.Sprintf("object.metadata.namespace != %q || object.metadata.name != 'next' || "+
			"!has(object.status.hostnames) || object.status.hostnames.all(h, h.state != 'Granted')", o.ns),
		"grants of next are refused", granted)

	if err := k8s.Delete(ctx, o.get("holder")); err != nil {
		t.Fatal(err)
	}
	// The holder's records leave both providers, each at its own pace: Route53's may
	// still be there when Cloudflare's are gone.
	eventually(t, 20*time.Second, func() error {
		if owner := o.recordOwner(host); owner == "tenantroute:durable/"+o.ns+"/holder" {
			return fmt.Errorf("the holder's record is still there")
		}
		if names := o.r53Records()[host]; len(names) > 0 {
			return fmt.Errorf("a Route53 record of %s is still there (%v)", host, names)
		}
		return nil
	})
	// The queues flush within a second or two: give a record declared from the unsaved
	// grant time to show, then check it did not.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if owner := o.recordOwner(host); owner != "" {
			t.Fatalf("a record of %s appeared for %q while its grant was refused", host, owner)
		}
		if r53 := o.r53Records(); len(r53[host]) > 0 {
			t.Fatalf("a Route53 record of %s appeared (%v, owner %v) while its grant was refused",
				host, r53[host], r53["_tenantroute-cname."+host])
		}
	}
	if st := hostnameState(o.get("next"), host); st == v1.ClaimGranted {
		t.Fatalf("the refused grant was saved")
	}

	// Once the API server takes the grant, the records follow.
	lift()
	eventually(t, 30*time.Second, func() error {
		if owner := o.recordOwner(host); owner != "tenantroute:durable/"+o.ns+"/next" {
			return fmt.Errorf("the record belongs to %q", owner)
		}
		if st := hostnameState(o.get("next"), host); st != v1.ClaimGranted {
			return fmt.Errorf("next's claim: %q", st)
		}
		return nil
	})
	if routed, err := routedTenant(host, o.ns); err != nil || routed != o.ns+"/next" {
		t.Errorf("the proxy routes the name to %q (%v)", routed, err)
	}
}

// A former leader that resumes after its lease ran out may save a grant the new leader
// has since given to another route: both statuses then say Granted, and readers
// (the proxy) prefer the earlier grant, the stale one. The leader's registry stands:
// the route whose status it disowns is reconciled at once and told Conflict.
func TestALateGrantOfAFormerLeaderIsOverruled(t *testing.T) {
	o := newOperator(t, "late")
	o.start()
	const host = "late.auth.example.com"
	o.create(o.route("holder", host))
	o.waitReady("holder")
	o.create(o.route("stale", host))
	eventually(t, 20*time.Second, func() error {
		if st := hostnameState(o.get("stale"), host); st != v1.ClaimConflict {
			return fmt.Errorf("stale's claim: %q", st)
		}
		return nil
	})
	// Once stale's reconciles are over (nothing of it is pending), the former leader's
	// write: stale granted the name, a minute before holder was.
	eventually(t, 20*time.Second, func() error {
		return expectCondition(o.get("stale").Status.Conditions, v1.ConditionRecordsSynced, metav1.ConditionTrue, "")
	})
	time.Sleep(3 * time.Second)
	stale := o.get("stale")
	since := metav1.NewTime(hostnameSince(o.get("holder"), host).Add(-time.Minute))
	stale.Status.TenantID = &v1.ClaimStatus{State: v1.ClaimGranted, Since: since}
	stale.Status.Hostnames = []v1.HostnameClaim{{Hostname: host, ClaimStatus: v1.ClaimStatus{State: v1.ClaimGranted, Since: since}}}
	if err := k8s.Status().Update(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if st := hostnameState(o.get("stale"), host); st != v1.ClaimConflict {
			return fmt.Errorf("stale's claim after the late grant: %q", st)
		}
		if routed, err := routedTenant(host, o.ns); err != nil || routed != o.ns+"/holder" {
			return fmt.Errorf("the proxy routes the name to %q (%v)", routed, err)
		}
		return nil
	})
	if owner := o.recordOwner(host); owner != "tenantroute:late/"+o.ns+"/holder" {
		t.Errorf("the record belongs to %q", owner)
	}
}

func hostnameSince(tr *v1.TenantRoute, host string) time.Time {
	for _, h := range tr.Status.Hostnames {
		if h.Hostname == host {
			return h.Since.Time
		}
	}
	return time.Time{}
}
