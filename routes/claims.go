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
}

// grant is who holds a claim and since when.
type grant struct {
	uid   types.UID
	key   types.NamespacedName
	since metav1.Time
}

// NewClaims returns an empty registry; Seed fills it from the cluster.
func NewClaims() *Claims {
	return &Claims{hosts: map[string]grant{}, tenants: map[string]grant{}, byKey: map[types.NamespacedName]types.UID{}}
}

// EnsureSeeded learns, once, the grants recorded in the status of every TenantRoute.
func (c *Claims) EnsureSeeded(ctx context.Context, r client.Reader) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seeded {
		return nil
	}
	var list v1.TenantRouteList
	if err := r.List(ctx, &list); err != nil {
		return fmt.Errorf("listing TenantRoutes to learn their grants: %w", err)
	}
	for i := range list.Items {
		tr := &list.Items[i]
		g := grant{uid: tr.UID, key: keyOf(tr)}
		if t := tr.Status.TenantID; t != nil && t.State == v1.ClaimGranted {
			g.since = t.Since
			c.tenants[tr.Spec.TenantID] = earlier(c.tenants[tr.Spec.TenantID], g)
		}
		for _, h := range tr.Status.Hostnames {
			if h.State == v1.ClaimGranted && slices.Contains(tr.Spec.Hostnames, h.Hostname) {
				g.since = h.Since
				c.hosts[h.Hostname] = earlier(c.hosts[h.Hostname], g)
			}
		}
		c.byKey[g.key] = g.uid
	}
	c.seeded = true
	return nil
}

// earlier is the rule for two statuses that both say Granted (which the lock makes
// impossible, but a restored backup or a hand edit can do): the earlier grant, then
// the smaller UID. The same rule is Holder's.
func earlier(held, g grant) grant {
	if held.uid == "" || g.since.Before(&held.since) || (g.since.Equal(&held.since) && g.uid < held.uid) {
		return g
	}
	return held
}

// Claim decides a TenantRoute's tenantID and hostnames, releasing what it no longer
// lists, and returns the status to record. now stamps new states; a state that does
// not change keeps its time.
func (c *Claims) Claim(tr *v1.TenantRoute, now metav1.Time) (tenant v1.ClaimStatus, hostnames []v1.HostnameClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	me := grant{uid: tr.UID, key: keyOf(tr), since: now}
	c.forgetStale(me)
	c.releaseUnlisted(tr)

	tenant = v1.ClaimStatus{State: v1.ClaimGranted}
	if held, ok := c.tenants[tr.Spec.TenantID]; ok && held.uid != me.uid {
		tenant = v1.ClaimStatus{State: v1.ClaimConflict,
			Message: fmt.Sprintf("tenantID %s belongs to TenantRoute %s", tr.Spec.TenantID, held.key)}
	} else if !ok {
		c.tenants[tr.Spec.TenantID] = me
	}
	tenant.Since = keepSince(tr.Status.TenantID, tenant.State, now)

	previous := map[string]*v1.ClaimStatus{}
	for i := range tr.Status.Hostnames {
		previous[tr.Status.Hostnames[i].Hostname] = &tr.Status.Hostnames[i].ClaimStatus
	}
	for _, h := range tr.Spec.Hostnames {
		st := v1.ClaimStatus{State: v1.ClaimGranted}
		switch held, ok := c.hosts[h]; {
		case ok && held.uid != me.uid:
			st = v1.ClaimStatus{State: v1.ClaimConflict, Message: fmt.Sprintf("granted to TenantRoute %s", held.key)}
		case tenant.State != v1.ClaimGranted:
			st = v1.ClaimStatus{State: v1.ClaimConflict, Message: tenant.Message}
		case !ok:
			c.hosts[h] = me
		}
		st.Since = keepSince(previous[h], st.State, now)
		hostnames = append(hostnames, v1.HostnameClaim{Hostname: h, ClaimStatus: st})
	}
	return tenant, hostnames
}

// Release forgets every claim of a TenantRoute that is gone.
func (c *Claims) Release(key types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if uid, ok := c.byKey[key]; ok {
		c.releaseUID(uid)
		delete(c.byKey, key)
	}
}

// forgetStale drops the claims of an earlier object of the same name: a TenantRoute
// deleted and created again is a new claimant.
func (c *Claims) forgetStale(me grant) {
	if uid, ok := c.byKey[me.key]; ok && uid != me.uid {
		c.releaseUID(uid)
	}
	c.byKey[me.key] = me.uid
}

func (c *Claims) releaseUID(uid types.UID) {
	for h, g := range c.hosts {
		if g.uid == uid {
			delete(c.hosts, h)
		}
	}
	for t, g := range c.tenants {
		if g.uid == uid {
			delete(c.tenants, t)
		}
	}
}

// releaseUnlisted frees the hostnames and tenantID a TenantRoute held but no longer
// lists.
func (c *Claims) releaseUnlisted(tr *v1.TenantRoute) {
	for h, g := range c.hosts {
		if g.uid == tr.UID && !slices.Contains(tr.Spec.Hostnames, h) {
			delete(c.hosts, h)
		}
	}
	for t, g := range c.tenants {
		if g.uid == tr.UID && t != tr.Spec.TenantID {
			delete(c.tenants, t)
		}
	}
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
// still lists: what the index of granted hostnames holds.
func Granted(tr *v1.TenantRoute) []string {
	var out []string
	for _, h := range tr.Status.Hostnames {
		if h.State == v1.ClaimGranted && slices.Contains(tr.Spec.Hostnames, h.Hostname) {
			out = append(out, h.Hostname)
		}
	}
	return out
}

// Holder returns, among TenantRoutes, the one whose status holds host, by the rule
// of Seed, or nil.
func Holder(candidates []v1.TenantRoute, host string) *v1.TenantRoute {
	var holder *v1.TenantRoute
	var best grant
	for i := range candidates {
		tr := &candidates[i]
		for _, h := range tr.Status.Hostnames {
			if h.Hostname != host || h.State != v1.ClaimGranted || !slices.Contains(tr.Spec.Hostnames, host) {
				continue
			}
			if g := (grant{uid: tr.UID, since: h.Since}); earlier(best, g) == g {
				holder, best = tr, g
			}
		}
	}
	return holder
}
