package routes

import (
	"context"
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// Claims decides who holds each hostname and each tenantID: the first TenantRoute
// granted one keeps it while it lists it, whatever the objects' ages. A later claimant
// gets a Conflict. Decisions are made one at a time under a lock, so two TenantRoutes
// can never both be granted a name, and they are recorded in the TenantRoutes'
// status, from which a restarted or newly elected operator learns them again (Seed).
//
// Only the leader decides; everyone else (the proxy, the shared cache) reads the
// grants from status through Holder.
type Claims struct {
	mu      sync.Mutex
	seeded  bool
	hosts   map[string]grant
	tenants map[string]grant
	byKey   map[types.NamespacedName]types.UID
	// What each route holds, so that a claim or a release costs what the route holds,
	// not what the cluster holds: one small record per route (a map per route was a
	// fifth of the registry's memory).
	held map[types.UID]*holding
}

// holding is what one route holds.
type holding struct {
	hosts  []string // granted hostnames
	tenant string   // its granted tenantID, "" when it holds none
	// unsaved are the hostnames Claim granted that no status of the route, read or
	// written since, records (see Unsaved); nil for nearly every route.
	unsaved []string
	// claimed: Claim decided for the route since this registry started.
	claimed bool
}

// holdingOf returns the record of uid, created when new.
func (c *Claims) holdingOf(uid types.UID) *holding {
	h := c.held[uid]
	if h == nil {
		h = &holding{}
		c.held[uid] = h
	}
	return h
}

// forget drops the record of uid once it holds nothing and was not decided for.
func (c *Claims) forget(uid types.UID) {
	if h := c.held[uid]; h != nil && len(h.hosts) == 0 && h.tenant == "" && !h.claimed {
		delete(c.held, uid)
	}
}

// grant is who holds a claim and since when.
type grant struct {
	uid   types.UID
	key   types.NamespacedName
	since metav1.Time
}

// Freed are the hostnames and tenantIDs a claim or a release let go: the routes
// waiting for them must be reconciled.
type Freed struct {
	Hostnames, TenantIDs []string
}

// NewClaims returns an empty registry; EnsureSeeded fills it from the cluster.
func NewClaims() *Claims {
	return &Claims{hosts: map[string]grant{}, tenants: map[string]grant{}, byKey: map[types.NamespacedName]types.UID{},
		held: map[types.UID]*holding{}}
}

// seedPage is how many TenantRoutes one page of the seeding list holds: at 100,000
// routes the whole list at once would hold every route twice in the manager's memory
// (decoded and as JSON) on top of the cache.
const seedPage = 500

// EnsureSeeded learns, once, the grants recorded in the status of every TenantRoute
// r lists in namespaces (all when none). r should read the API server, not a cache: a
// replica that just became the leader has had its cache running while it waited, and
// a cache that lags behind the former leader's last grants would let the new leader
// give a name away twice. The list is read in pages, each a consistent read.
func (c *Claims) EnsureSeeded(ctx context.Context, r client.Reader, namespaces ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seeded {
		return nil
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		var list v1.TenantRouteList
		for {
			if err := r.List(ctx, &list, client.InNamespace(ns), client.Limit(seedPage), client.Continue(list.Continue)); err != nil {
				return fmt.Errorf("listing TenantRoutes to learn their grants: %w", err)
			}
			for i := range list.Items {
				c.seed(&list.Items[i])
			}
			if list.Continue == "" {
				break
			}
		}
	}
	c.seeded = true
	return nil
}

// seed learns the grants tr's status records.
func (c *Claims) seed(tr *v1.TenantRoute) {
	g := grant{uid: tr.UID, key: keyOf(tr)}
	if t := tr.Status.TenantID; t != nil && t.State == v1.ClaimGranted {
		g.since = t.Since
		c.takeTenant(tr.Spec.TenantID, g)
	}
	for _, h := range tr.Status.Hostnames {
		// One the spec no longer lists is being released: its records may still be
		// in DNS, so it stays the route's until its reconcile lets it go.
		if h.State == v1.ClaimGranted {
			g.since = h.Since
			c.takeHost(h.Hostname, g)
		}
	}
	c.byKey[g.key] = g.uid
}

// takeHost and takeTenant record g as the holder of a name unless an earlier grant
// holds it: two statuses that both say Granted (which the lock makes impossible, but a
// restored backup or a hand edit can do) resolve to the earlier grant, then the
// smaller UID — Holder's rule.
func (c *Claims) takeHost(name string, g grant) {
	if held, ok := c.hosts[name]; ok {
		if earlier(held, g) == held {
			return
		}
		c.dropHost(name)
	}
	c.hosts[name] = g
	h := c.holdingOf(g.uid)
	h.hosts = append(h.hosts, name)
}

func (c *Claims) takeTenant(name string, g grant) {
	if held, ok := c.tenants[name]; ok {
		if earlier(held, g) == held {
			return
		}
		c.dropTenant(name)
	}
	c.tenants[name] = g
	c.holdingOf(g.uid).tenant = name
}

func (c *Claims) dropHost(name string) {
	if g, ok := c.hosts[name]; ok {
		delete(c.hosts, name)
		if h := c.held[g.uid]; h != nil {
			h.hosts = slices.DeleteFunc(h.hosts, func(held string) bool { return held == name })
			h.unsaved = slices.DeleteFunc(h.unsaved, func(held string) bool { return held == name })
			c.forget(g.uid)
		}
	}
}

func (c *Claims) dropTenant(name string) {
	if g, ok := c.tenants[name]; ok {
		delete(c.tenants, name)
		if h := c.held[g.uid]; h != nil && h.tenant == name {
			h.tenant = ""
			c.forget(g.uid)
		}
	}
}

func earlier(held, g grant) grant {
	if held.uid == "" || g.since.Before(&held.since) || (g.since.Equal(&held.since) && g.uid < held.uid) {
		return g
	}
	return held
}

// Claim decides a TenantRoute's tenantID and hostnames, and returns the status to
// record and what was freed. A hostname the route no longer lists is kept, recorded
// as Granted with ReleasingMessage, until Let releases it. ineligible are the
// hostnames the route may not hold now, with their state and why: Forbidden (its
// namespace may not claim in that zone) or PendingVerification (a custom domain whose
// owner has not proven control); they are neither granted nor held. now stamps new
// states; a state that does not change keeps its time.
func (c *Claims) Claim(tr *v1.TenantRoute, now metav1.Time, ineligible map[string]v1.ClaimStatus) (tenant v1.ClaimStatus, hostnames []v1.HostnameClaim, freed Freed) {
	c.mu.Lock()
	defer c.mu.Unlock()
	me := grant{uid: tr.UID, key: keyOf(tr), since: now}
	freed = c.forgetStale(me)
	holds := c.holdingOf(me.uid)
	holds.claimed = true
	// A hostname the route no longer lists stays its own until its records are gone
	// (Let): handed to the next claimant at once, it would have that tenant's grant
	// in the proxy while DNS still held this one's records.
	var releasing []v1.HostnameClaim
	for _, h := range holds.hosts {
		if !slices.Contains(tr.Spec.Hostnames, h) {
			st := v1.ClaimStatus{State: v1.ClaimGranted, Message: ReleasingMessage}
			st.Since = keepSince(previousClaim(tr, h), st.State, now)
			releasing = append(releasing, v1.HostnameClaim{Hostname: h, ClaimStatus: st})
		}
	}
	if t := holds.tenant; t != "" && t != tr.Spec.TenantID {
		c.dropTenant(t)
		freed.TenantIDs = append(freed.TenantIDs, t)
	}

	tenant = v1.ClaimStatus{State: v1.ClaimGranted}
	if held, ok := c.tenants[tr.Spec.TenantID]; ok && held.uid != me.uid {
		tenant = v1.ClaimStatus{State: v1.ClaimConflict, Message: "tenantID " + tr.Spec.TenantID + " " + holderOf(held, tr)}
	} else if !ok {
		c.takeTenant(tr.Spec.TenantID, me)
	}
	tenant.Since = keepSince(tr.Status.TenantID, tenant.State, now)

	previous := map[string]*v1.ClaimStatus{}
	for i := range tr.Status.Hostnames {
		previous[tr.Status.Hostnames[i].Hostname] = &tr.Status.Hostnames[i].ClaimStatus
	}
	for _, h := range tr.Spec.Hostnames {
		st := v1.ClaimStatus{State: v1.ClaimGranted}
		not, barred := ineligible[h]
		held, ok := c.hosts[h]
		mine := ok && held.uid == me.uid
		switch {
		case barred && not.State == v1.ClaimForbidden:
			st = v1.ClaimStatus{State: v1.ClaimForbidden, Message: not.Message}
		case ok && !mine:
			st = v1.ClaimStatus{State: v1.ClaimConflict, Message: holderOf(held, tr)}
		case tenant.State != v1.ClaimGranted:
			st = v1.ClaimStatus{State: v1.ClaimConflict, Message: tenant.Message}
		case barred:
			st = v1.ClaimStatus{State: not.State, Message: not.Message}
		case !ok:
			c.takeHost(h, me)
			holds.unsaved = append(holds.unsaved, h)
		}
		if mine && st.State != v1.ClaimGranted {
			// Held, but no longer eligible (its proof is gone, its tenantID another's):
			// the name is free for the next claimant, as status will say.
			c.dropHost(h)
			freed.Hostnames = append(freed.Hostnames, h)
		}
		st.Since = keepSince(previous[h], st.State, now)
		hostnames = append(hostnames, v1.HostnameClaim{Hostname: h, ClaimStatus: st})
	}
	hostnames = append(hostnames, releasing...)
	if len(holds.unsaved) > 0 {
		// A grant the route's status already records was saved.
		saved := Granted(tr)
		holds.unsaved = slices.DeleteFunc(holds.unsaved, func(h string) bool { return slices.Contains(saved, h) })
	}
	return tenant, hostnames, freed
}

// ReleasingMessage is the message of a hostname a TenantRoute no longer lists and
// still holds, in its status: its records are being deleted, and the name goes to the
// next claimant once they are gone and the status that says so is saved.
const ReleasingMessage = "no longer listed: held until its records are deleted"

// Releasing reports whether a claim in a route's status is that of a hostname it no
// longer lists and still holds.
func Releasing(tr *v1.TenantRoute, c v1.HostnameClaim) bool {
	return c.State == v1.ClaimGranted && !slices.Contains(tr.Spec.Hostnames, c.Hostname)
}

// Let releases hostnames tr held without listing them, once a status of tr that no
// longer records them is saved (its records at them are gone), and returns what it
// freed. A hostname tr lists again is kept.
func (c *Claims) Let(tr *v1.TenantRoute, hostnames []string) Freed {
	c.mu.Lock()
	defer c.mu.Unlock()
	var freed Freed
	for _, h := range hostnames {
		if g, ok := c.hosts[h]; ok && g.uid == tr.UID && !slices.Contains(tr.Spec.Hostnames, h) {
			c.dropHost(h)
			freed.Hostnames = append(freed.Hostnames, h)
		}
	}
	return freed
}

func previousClaim(tr *v1.TenantRoute, host string) *v1.ClaimStatus {
	for i := range tr.Status.Hostnames {
		if tr.Status.Hostnames[i].Hostname == host {
			return &tr.Status.Hostnames[i].ClaimStatus
		}
	}
	return nil
}

// Unsaved are the hostnames the registry grants tr that no status of tr read or
// written since (Saved) records: a grant lives in this process's memory until the
// route's status is saved, and a leader that dies before that leaves no trace of it
// for its successor.
func (c *Claims) Unsaved(tr *v1.TenantRoute) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.held[tr.UID]; h != nil && len(h.unsaved) > 0 && c.byKey[keyOf(tr)] == tr.UID {
		return slices.Clone(h.unsaved)
	}
	return nil
}

// Disowns reports whether tr's status records a grant (hostname or tenantID) that the
// registry, once seeded, gives to another route or to none.
func (c *Claims) Disowns(tr *v1.TenantRoute) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seeded {
		return false
	}
	if t := tr.Status.TenantID; t != nil && t.State == v1.ClaimGranted {
		if g, ok := c.tenants[tr.Spec.TenantID]; !ok || g.uid != tr.UID {
			return true
		}
	}
	for _, h := range Granted(tr) {
		if g, ok := c.hosts[h]; !ok || g.uid != tr.UID {
			return true
		}
	}
	return false
}

// Saved tells the registry that tr's status, as it is, was saved in the API server:
// the grants it records are no longer unsaved.
func (c *Claims) Saved(tr *v1.TenantRoute) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.held[tr.UID]; h != nil && len(h.unsaved) > 0 {
		saved := Granted(tr)
		h.unsaved = slices.DeleteFunc(h.unsaved, func(name string) bool { return slices.Contains(saved, name) })
	}
}

// holderOf names the holder of a claim to the route that lost it: by name within its
// own namespace; across namespaces, without saying whose it is.
func holderOf(held grant, tr *v1.TenantRoute) string {
	if held.key.Namespace == tr.Namespace {
		return "granted to TenantRoute " + held.key.Name
	}
	return "granted to a TenantRoute of another namespace"
}

// Held returns the hostnames the registry grants a TenantRoute now, and whether
// Claim has decided for this very object since the registry started, without
// deciding anything: for planning from a snapshot (a failover) that must not change
// grants a reconcile made.
func (c *Claims) Held(tr *v1.TenantRoute) (hostnames []string, claimed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.held[tr.UID]
	if c.byKey[keyOf(tr)] != tr.UID || h == nil || !h.claimed {
		return nil, false
	}
	for _, name := range tr.Spec.Hostnames {
		if slices.Contains(h.hosts, name) {
			hostnames = append(hostnames, name)
		}
	}
	return hostnames, true
}

// Release forgets every claim of a TenantRoute that is gone and returns what it freed.
func (c *Claims) Release(key types.NamespacedName) Freed {
	c.mu.Lock()
	defer c.mu.Unlock()
	uid, ok := c.byKey[key]
	if !ok {
		return Freed{}
	}
	delete(c.byKey, key)
	return c.releaseUID(uid)
}

// forgetStale drops the claims of an earlier object of the same name: a TenantRoute
// deleted and created again is a new claimant.
func (c *Claims) forgetStale(me grant) Freed {
	var freed Freed
	if uid, ok := c.byKey[me.key]; ok && uid != me.uid {
		freed = c.releaseUID(uid)
	}
	c.byKey[me.key] = me.uid
	return freed
}

func (c *Claims) releaseUID(uid types.UID) Freed {
	var freed Freed
	h := c.held[uid]
	if h == nil {
		return freed
	}
	h.claimed = false
	for _, name := range slices.Clone(h.hosts) { // dropHost changes h.hosts
		c.dropHost(name)
		freed.Hostnames = append(freed.Hostnames, name)
	}
	if t := h.tenant; t != "" {
		c.dropTenant(t)
		freed.TenantIDs = append(freed.TenantIDs, t)
	}
	c.forget(uid)
	return freed
}

func keepSince(previous *v1.ClaimStatus, state v1.ClaimState, now metav1.Time) metav1.Time {
	if previous != nil && previous.State == state {
		return previous.Since
	}
	return now
}

func keyOf(tr *v1.TenantRoute) types.NamespacedName {
	return types.NamespacedName{Namespace: tr.Namespace, Name: tr.Name}
}

// Granted returns the hostnames a TenantRoute's status says it holds and its spec
// still lists, while it holds its tenantID and is not being deleted: what the index of
// granted hostnames holds, so what the proxy routes.
func Granted(tr *v1.TenantRoute) []string {
	if !tr.DeletionTimestamp.IsZero() || tr.Status.TenantID == nil || tr.Status.TenantID.State != v1.ClaimGranted {
		return nil
	}
	var out []string
	for _, h := range tr.Status.Hostnames {
		if h.State == v1.ClaimGranted && slices.Contains(tr.Spec.Hostnames, h.Hostname) {
			out = append(out, h.Hostname)
		}
	}
	return out
}

// Holder returns, among TenantRoutes, the one whose status holds host (by Granted),
// or nil; two that both do resolve by the rule of EnsureSeeded.
func Holder(candidates []*v1.TenantRoute, host string) *v1.TenantRoute {
	var holder *v1.TenantRoute
	var best grant
	for _, tr := range candidates {
		if !slices.Contains(Granted(tr), host) {
			continue
		}
		for _, h := range tr.Status.Hostnames {
			if h.Hostname != host {
				continue
			}
			if g := (grant{uid: tr.UID, since: h.Since}); earlier(best, g) == g {
				holder, best = tr, g
			}
		}
	}
	return holder
}
