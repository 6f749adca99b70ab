package controllers

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// A tenant decides how long its domains' DNS takes to answer: a hundred names under a
// nameserver that never answers cost a reconcile two seconds each, one after another.
// Sixteen such routes held every worker of the TenantRoute controller for minutes at a
// time, again at every check interval, and every other tenant's routes, hand-overs and
// deletions waited. A reconcile now waits a bounded time for all of a route's checks
// together; the answers that come later are there for the next one.
func TestSlowDomainsDoNotHoldAReconcile(t *testing.T) {
	silent, err := net.ListenPacket("udp", "127.0.0.1:0") // reads questions, answers none
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	r := &TenantRouteReconciler{Verifier: &domainVerifier{Resolver: silent.LocalAddr().String(), Interval: time.Minute, Grace: time.Hour}}
	route := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "slow", UID: types.UID("uid-slow")}}
	custom := make([]v1.CustomDomainStatus, 20)
	for i := range custom {
		custom[i] = v1.CustomDomainStatus{Hostname: fmt.Sprintf("h%d.blackhole.test", i), CNAMETarget: "acme.edge.example.com"}
	}
	start := time.Now()
	_, pending, asking := r.verifyCustomDomains(context.Background(), route, custom, metav1.Now(), false)
	if took := time.Since(start); took > domainCheckBudget+time.Second {
		t.Errorf("twenty domains whose DNS never answers held the reconcile %s, want at most %s", took.Round(time.Millisecond), domainCheckBudget+time.Second)
	}
	if len(pending) != 20 {
		t.Errorf("%d of 20 unanswered domains pending, want all", len(pending))
	}
	if !asking {
		t.Error("lookups still under way not reported: the route would wait an interval for their answers")
	}

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
		got, pending, _ := r.verifyCustomDomains(context.Background(), route, []v1.CustomDomainStatus{{Hostname: domain, CNAMETarget: target}}, now, false)
		return got, pending
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
