package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// challengePrefix names the TXT record that proves control of a custom domain.
const challengePrefix = "_tenantroute-challenge."

// ChallengeValue is a TenantRoute's proof for a custom domain. It derives from the
// route's UID, so a proof made for one TenantRoute is worthless to any other.
func ChallengeValue(uid types.UID, domain string) string {
	sum := sha256.Sum256([]byte("tenantroute-challenge/" + string(uid) + "/" + domain))
	return hex.EncodeToString(sum[:16])
}

// domainVerifier checks that the owner of a custom domain proved control: the TXT
// record _tenantroute-challenge.<domain> holds the route's challenge value, and the
// domain is a CNAME to the target the route's status tells. It asks a DNS resolver
// directly (miekg/dns), and remembers each answer for Interval.
//
// How long an answer takes is the tenant's to decide (its domain's nameservers), so a
// reconcile waits domainCheckBudget in all, and only for the first answers of the
// domains it asks about first: the lookups go on in the background, at most
// maxDomainLookups at once. A domain checked again keeps its answer until the new one
// comes, and an answer no reconcile waited for reconciles the route (Answered) when it
// is the first or changes whether the domain is proven.
type domainVerifier struct {
	// Resolver is the DNS server asked, host:port.
	Resolver string
	// Interval between two checks of one domain; Grace is how long a domain that
	// loses its proof stays routed.
	Interval, Grace time.Duration
	// Answered, if set, is asked to reconcile a route after the given time, for an
	// answer no reconcile of the route waited for that is the domain's first or proves
	// what the one before did not. The controller's queue keeps one request a route at
	// its earliest time: the answers of a route's domains, asked together, come within
	// answerCoalesce of the first and make one reconcile.
	Answered func(types.NamespacedName, time.Duration)

	mu     sync.Mutex
	cache  map[string]verdict
	asking map[string]*domainLookup // under way, by cache key
	slots  chan struct{}            // one per lookup in flight
}

// verdict is a lookup's answer: at is when it came (the proof was seen then), asked
// when the lookup began (an answer is fresh for Interval from then: from when it came,
// a check the reconciles no longer wait for fell an interval later each time).
type verdict struct {
	ok, unknown bool
	message     string
	at, asked   time.Time
}

// domainLookup is a lookup under way. v is set and done closed under the verifier's
// mu; waiting are the routes to reconcile once it is answered.
type domainLookup struct {
	done    chan struct{}
	v       verdict
	waiting map[types.NamespacedName]struct{}
}

// begun is one domain's check as a reconcile began it: the last answer, which is the
// one to use when final (fresh, or the failover's); otherwise the lookup under way,
// and whether to wait for it (this reconcile started it, and the domain has no answer
// yet).
type begun struct {
	last  verdict
	final bool
	call  *domainLookup
	wait  bool
}

const (
	// domainCheckBudget is how long a reconcile waits for the lookups of all of a
	// route's custom domains together; a resolver answers in milliseconds.
	domainCheckBudget = 2 * time.Second
	// queryTimeout bounds one question to the resolver.
	queryTimeout = 2 * time.Second
	// maxDomainLookups bounds the lookups in flight, so that a route with a hundred
	// domains that never answer holds a hundred goroutines, not a hundred sockets.
	maxDomainLookups = 32
	// answerCoalesce gathers the answers of a route's lookups into one reconcile: its
	// domains, asked together, answer together, up to 16 a second when none answers.
	answerCoalesce = time.Second
)

// begin returns the last answer for the route's domain and whether it is fresh; when
// it is not (and cachedOnly is false), the lookup under way, started if none is.
func (v *domainVerifier) begin(uid types.UID, domain, target string, cachedOnly bool) begun {
	key := string(uid) + "/" + domain + "/" + target
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cache == nil {
		v.cache, v.asking, v.slots = map[string]verdict{}, map[string]*domainLookup{}, make(chan struct{}, maxDomainLookups)
	}
	last, cached := v.cache[key]
	if cached && (cachedOnly || time.Since(last.asked) < v.Interval) {
		return begun{last: last, final: true}
	}
	if cachedOnly {
		return begun{last: verdict{unknown: true, message: "not checked yet since the operator started"}, final: true}
	}
	b := begun{last: last, call: v.asking[key]}
	if b.call == nil {
		// Waiting for a domain checked again would hold a worker for answers that
		// only confirm, and while the resolver is down, for every route at every
		// check: past 16 silent domains a second (32 slots, 2 s each) the workers
		// never caught up.
		b.call, b.wait = &domainLookup{done: make(chan struct{})}, !cached
		v.asking[key] = b.call
		go v.ask(key, uid, domain, target, b.call, time.Now())
	}
	return b
}

// answer returns b's verdict: the lookup's answer if it came (waited for until ctx
// ends when b says so), or the answer before (or unknown), and then route is
// reconciled again when the lookup's answer matters (see ask).
func (v *domainVerifier) answer(ctx context.Context, b begun, route types.NamespacedName) verdict {
	if b.final {
		return b.last
	}
	if b.wait {
		select {
		case <-b.call.done:
			return b.call.v
		case <-ctx.Done():
		}
	}
	v.mu.Lock()
	select {
	case <-b.call.done:
		v.mu.Unlock()
		return b.call.v
	default:
	}
	if b.call.waiting == nil {
		b.call.waiting = map[types.NamespacedName]struct{}{}
	}
	b.call.waiting[route] = struct{}{}
	v.mu.Unlock()
	if !b.last.at.IsZero() {
		return b.last
	}
	return verdict{unknown: true, message: "still asking " + v.Resolver}
}

// ask runs a lookup when a slot is free, whoever still waits for it; it has its own
// time limit (a reconcile that stopped waiting does not cut it short).
func (v *domainVerifier) ask(key string, uid types.UID, domain, target string, call *domainLookup, asked time.Time) {
	v.slots <- struct{}{}
	got := v.lookup(context.Background(), uid, domain, target)
	<-v.slots
	got.at, got.asked = time.Now(), asked
	v.mu.Lock()
	if len(v.cache) > 100_000 {
		clear(v.cache) // routes come and go; answers are cheap to ask again
	}
	last, answered := v.cache[key]
	v.cache[key] = got
	delete(v.asking, key)
	call.v = got
	close(call.done)
	waiting := call.waiting
	v.mu.Unlock()
	// The routes that did not wait hear of a first answer, and of one that proves
	// what the one before did not, or no longer does. The same answer again (a proof
	// still missing) and a resolver that cannot answer (which changes nothing: a
	// domain keeps what it had) are read at the route's next check.
	if answered && (got.unknown || last.ok == got.ok) {
		return
	}
	if v.Answered == nil {
		return
	}
	for route := range waiting {
		v.Answered(route, answerCoalesce)
	}
}

// lookup asks for the proof: the TXT, then the CNAME, each within the query's 2 s.
func (v *domainVerifier) lookup(ctx context.Context, uid types.UID, domain, target string) verdict {
	ctx, cancel := context.WithTimeout(ctx, 2*queryTimeout)
	defer cancel()
	value := ChallengeValue(uid, domain)
	txt, err := v.query(ctx, challengePrefix+domain, dns.TypeTXT)
	if err != nil {
		return verdict{unknown: true, message: err.Error()}
	}
	found := false
	for _, rr := range txt {
		if t, ok := rr.(*dns.TXT); ok && strings.Join(t.Txt, "") == value {
			found = true
		}
	}
	if !found {
		return verdict{message: fmt.Sprintf("TXT %s%s"+txtMissing+"%s", challengePrefix, domain, value)}
	}
	cname, err := v.query(ctx, domain, dns.TypeCNAME)
	if err != nil {
		return verdict{unknown: true, message: err.Error()}
	}
	for _, rr := range cname {
		if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(strings.TrimSuffix(c.Target, "."), target) {
			return verdict{ok: true}
		}
	}
	return verdict{message: fmt.Sprintf("%s"+cnameMissing+"%s", domain, target)}
}

// query asks the resolver; a name that does not exist is an empty answer, a failure to
// get any answer an error.
func (v *domainVerifier) query(ctx context.Context, name string, rrtype uint16) ([]dns.RR, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), rrtype)
	m.RecursionDesired = true
	c := &dns.Client{Timeout: queryTimeout}
	in, _, err := c.ExchangeContext(ctx, m, v.Resolver)
	if err != nil {
		return nil, fmt.Errorf("asking %s for %s: %w", v.Resolver, name, err)
	}
	switch in.Rcode {
	case dns.RcodeSuccess, dns.RcodeNameError:
		return in.Answer, nil
	}
	return nil, fmt.Errorf("%s answered %s for %s", v.Resolver, dns.RcodeToString[in.Rcode], name)
}

const (
	// txtMissing and cnameMissing are in the message of an answer that found the
	// proof missing, and in no other.
	txtMissing   = " does not hold "
	cnameMissing = " is not a CNAME to "
	// uncheckedNote ends the message of a proven domain whose check got no answer.
	uncheckedNote = "; the proof could not be checked, the domain stays verified"
)

// proofLost reports whether a domain's status says it was proven and its proof was
// since found missing: its grace runs, and a check without an answer does not stop it.
// It reads what the answer found, not what a message lacks: statuses written before
// uncheckedNote existed say the same of a domain kept while unanswered.
func proofLost(c v1.CustomDomainStatus) bool {
	return c.VerifiedAt != nil && (strings.Contains(c.Message, txtMissing) || strings.Contains(c.Message, cnameMissing))
}

// verifyCustomDomains checks every custom domain of a route and returns the status of
// each, and the domains not eligible for a grant (with why). A domain is eligible
// while its proof is in place, and for Grace after it was last seen; while the
// resolver cannot answer, a domain keeps what it had.
func (r *TenantRouteReconciler) verifyCustomDomains(ctx context.Context, route *v1.TenantRoute, custom []v1.CustomDomainStatus, now metav1.Time, cachedOnly bool) ([]v1.CustomDomainStatus, map[string]string) {
	previous := map[string]v1.CustomDomainStatus{}
	for _, c := range route.Status.CustomDomains {
		previous[c.Hostname] = c
	}
	pending := map[string]string{}
	checks := make([]begun, len(custom))
	if r.Verifier != nil {
		// Every lookup starts before the first is waited for: the budget is for all
		// of the route's domains together.
		for i := range custom {
			checks[i] = r.Verifier.begin(route.UID, custom[i].Hostname, custom[i].CNAMETarget, cachedOnly)
		}
	}
	if r.Verifier != nil && !cachedOnly {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, domainCheckBudget)
		defer cancel()
	}
	key := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
	for i := range custom {
		c := &custom[i]
		c.ChallengeName = challengePrefix + c.Hostname
		c.ChallengeValue = ChallengeValue(route.UID, c.Hostname)
		c.VerifiedAt = previous[c.Hostname].VerifiedAt
		if r.Verifier == nil {
			pending[c.Hostname] = "custom domains cannot be verified: the operator has no DNS resolver"
			continue
		}
		v := r.Verifier.answer(ctx, checks[i], key)
		switch {
		case v.ok:
			// The proof was seen when its answer came, which may be before this
			// reconcile (an answer kept for Interval, or the one before when the lookup
			// under way did not come in time): the grace counts from then.
			if seen := metav1.NewTime(v.at); c.VerifiedAt == nil || c.VerifiedAt.Before(&seen) {
				c.VerifiedAt = &seen
			}
		case v.unknown && c.VerifiedAt != nil && !proofLost(previous[c.Hostname]):
			// No answer (the resolver away or slow, or not asked yet since the start)
			// says nothing against the proof: it stands, with no loss announced and no
			// grace counted. Before, within the grace it said "routed until" a time it
			// was kept past, with a warning that it had lost its proof, for every proven
			// domain at each start whose first lookups were slow.
			c.Message = v.message + uncheckedNote
		case c.VerifiedAt != nil && now.Sub(c.VerifiedAt.Time) < r.Verifier.Grace:
			c.Message = fmt.Sprintf("%s; routed until %s", v.message, c.VerifiedAt.Add(r.Verifier.Grace).UTC().Format(time.RFC3339))
		default:
			c.Message = v.message
			pending[c.Hostname] = fmt.Sprintf("waiting for proof of control: create TXT %s = %s and CNAME %s -> %s (%s)",
				c.ChallengeName, c.ChallengeValue, c.Hostname, c.CNAMETarget, v.message)
		}
	}
	return custom, pending
}
