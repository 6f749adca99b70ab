package controllers

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/edge"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// routePlan is what a route wants, computed from the cache without writing anything.
type routePlan struct {
	edges     map[string]*v1.EdgeProvider
	tenant    v1.ClaimStatus
	claims    []v1.HostnameClaim
	active    string
	reason    string
	zones     []desired.ZoneRecords
	custom    []v1.CustomDomainStatus
	regionErr error
	// unsaved are granted hostnames that another route also lists and whose grant is
	// not saved yet: their records wait for the status that saves it (saveGrants).
	unsaved []string
	// releasing are hostnames the route holds and no longer lists: its records there
	// are deleted, then the status that drops them is saved, then they are let go.
	releasing []string
}

// planRoute claims the route's tenantID and hostnames, chooses its active edge and
// computes its records. It reads only the cache, so a failover can plan thousands of
// routes at once. A failover plans from a snapshot that may be stale: with readOnly it
// takes the grants a reconcile made as they are, so that an old snapshot can neither
// take nor free a hostname.
func (r *TenantRouteReconciler) planRoute(ctx context.Context, route *v1.TenantRoute, readOnly bool, reads *planReads) (*routePlan, error) {
	edges, err := reads.edgeProviders(ctx, r, route)
	if err != nil {
		return nil, err
	}
	if err := r.Claims.EnsureSeeded(ctx, r.APIReader, r.routeNamespaces...); err != nil {
		return nil, err
	}
	p := &routePlan{edges: edges, regionErr: reads.checkRegion(ctx, r, route)}
	p.active, p.reason = desired.ActiveEdge(route, edges, r.health)
	var held []string
	claimed := false
	if readOnly {
		// A route a reconcile already decided for keeps those grants; one not decided
		// for yet since the operator started is decided now, as its reconcile would.
		held, claimed = r.Claims.Held(route)
	}
	if !claimed {
		now := metav1.Now()
		forbidden, err := r.forbidden(ctx, route, edges)
		if err != nil {
			return nil, err
		}
		var unproven map[string]string
		var freed routes.Freed
		// A failover (readOnly) does not wait for the resolver: the checks, up to 3 s
		// each, ran one route after another on the failover's one goroutine, and a
		// failover soon after a leader change, with the resolver down, stalled for
		// minutes. It takes the answers the reconciles got, or what was proven before.
		p.custom, unproven = r.verifyCustomDomains(ctx, route, desired.CustomDomains(route, edges, p.active), now, readOnly)
		ineligible := make(map[string]v1.ClaimStatus, len(unproven)+len(forbidden))
		for h, why := range unproven {
			ineligible[h] = v1.ClaimStatus{State: v1.ClaimPendingVerification, Message: why}
		}
		for h, why := range forbidden {
			ineligible[h] = v1.ClaimStatus{State: v1.ClaimForbidden, Message: why}
		}
		p.tenant, p.claims, freed = r.Claims.Claim(route, now, ineligible)
		r.enqueueClaimants(ctx, client.ObjectKeyFromObject(route), freed)
		for _, c := range p.claims {
			switch {
			case routes.Releasing(route, c):
				p.releasing = append(p.releasing, c.Hostname)
			case c.State == v1.ClaimGranted:
				held = append(held, c.Hostname)
			}
		}
	}
	if p.unsaved, err = r.contested(ctx, route, r.Claims.Unsaved(route)); err != nil {
		return nil, err
	}
	if readOnly && len(p.unsaved) > 0 && !grantsUsedBeforeSaved {
		// The route's reconcile saves these grants before it declares their records.
		held = slices.DeleteFunc(slices.Clone(held), func(h string) bool { return slices.Contains(p.unsaved, h) })
	}
	p.zones = desired.Records(route, held, edges, p.active)
	return p, nil
}

// contested returns the hostnames among hosts that another TenantRoute lists too.
//
// A grant is decided in memory and saved with the route's status. Used before it is
// saved (records declared, which the proxy does not wait for: it routes by saved
// status only), a grant dies with a leader that dies before the save, and its
// successor may give the name to another claimant while the first one's records are
// in DNS. Where no other route lists the name, the successor can only grant it to the
// same route, and the grant is used at once: the status written once the records are
// in says Granted and Ready together. Where another route lists it, the reconcile
// saves the grant first (saveGrants), at the price of one more status write.
func (r *TenantRouteReconciler) contested(ctx context.Context, route *v1.TenantRoute, hosts []string) ([]string, error) {
	var out []string
	self := client.ObjectKeyFromObject(route)
	for _, h := range hosts {
		keys, err := r.byHostname.Keys(ctx, h)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(keys, func(k types.NamespacedName) bool { return k != self }) {
			out = append(out, h)
		}
	}
	return out, nil
}

// forbidden returns the route's hostnames its namespace may not claim (routes.Forbidden).
// The namespace's labels are read only when a zone of the route's EdgeProviders has a
// namespaceSelector, from a metadata-only cache.
func (r *TenantRouteReconciler) forbidden(ctx context.Context, route *v1.TenantRoute, edges map[string]*v1.EdgeProvider) (map[string]string, error) {
	restricted := false
	for _, name := range route.Spec.Edges {
		if ep := edges[name]; ep != nil {
			for _, z := range ep.Spec.Zones {
				restricted = restricted || z.NamespaceSelector != nil
			}
		}
	}
	if !restricted {
		return nil, nil
	}
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := r.Get(ctx, types.NamespacedName{Name: route.Namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading the labels of namespace %s: %w", route.Namespace, err)
	}
	return routes.Forbidden(route, edges, ns.Labels), nil
}

// health is an edge's health: the leader's own probes when they have decided, else
// what the EdgeProvider's status last said (a new leader inherits its predecessor's
// view until its probes decide).
func (r *TenantRouteReconciler) health(ep *v1.EdgeProvider) edge.State {
	if r.Monitor != nil {
		if state, _ := r.Monitor.Health(ep.Name); state != edge.Unknown {
			return state
		}
	}
	return desired.EdgeHealth(ep)
}

func (r *TenantRouteReconciler) ownerOf(route *v1.TenantRoute) string {
	key := desired.OwnerKey(r.Instance, route.Namespace, route.Name)
	r.owners.Store(key, types.NamespacedName{Namespace: route.Namespace, Name: route.Name})
	return key
}

// edgeProviders returns the EdgeProviders that exist, and are not being deleted,
// among those the route lists now or listed before (its records may still be there),
// by name.
func (r *TenantRouteReconciler) edgeProviders(ctx context.Context, route *v1.TenantRoute) (map[string]*v1.EdgeProvider, error) {
	edges := map[string]*v1.EdgeProvider{}
	for _, name := range desired.Edges(route) {
		// Read in place, never changed: every reconcile and every route of a failover
		// reads its EdgeProviders, and copying them was 5% of the manager's CPU at
		// 100,000 routes.
		ep := &v1.EdgeProvider{}
		if err := r.Get(ctx, types.NamespacedName{Name: name}, ep, client.UnsafeDisableDeepCopy); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, fmt.Errorf("reading EdgeProvider %s: %w", name, err)
		}
		if !ep.DeletionTimestamp.IsZero() {
			continue // its records are being deleted with it: declare none there
		}
		edges[name] = ep
	}
	return edges, nil
}

func (r *TenantRouteReconciler) checkRegion(ctx context.Context, route *v1.TenantRoute) error {
	err := r.Get(ctx, types.NamespacedName{Name: route.Spec.Region}, &v1.Region{}, client.UnsafeDisableDeepCopy)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("region %s not found", route.Spec.Region)
	}
	return err
}

// planReads keeps, for one pass that plans many routes, the EdgeProviders and Regions
// they name. A failover plans every route of an edge at once; reading EdgeProviders and
// Regions from the cache for every plan (this pass's and the reconciles') was 12% of
// what a 100,000-route failover allocated in its first seconds. Routes that name the same EdgeProviders share one map: no plan
// changes it. Not safe for concurrent use; nil reads from the cache every time.
type planReads struct {
	edges   map[string]map[string]*v1.EdgeProvider // by the route's desired.Edges, joined
	regions map[string]bool                        // found
	key     []byte
}

func newPlanReads() *planReads {
	return &planReads{edges: map[string]map[string]*v1.EdgeProvider{}, regions: map[string]bool{}}
}

func (p *planReads) edgeProviders(ctx context.Context, r *TenantRouteReconciler, route *v1.TenantRoute) (map[string]*v1.EdgeProvider, error) {
	if p == nil {
		return r.edgeProviders(ctx, route)
	}
	p.key = p.key[:0]
	for _, name := range route.Spec.Edges {
		p.key = append(append(p.key, name...), 0)
	}
	p.key = append(p.key, 0) // status edges after spec edges: desired.Edges' order
	for _, st := range route.Status.Providers {
		p.key = append(append(p.key, st.Edge...), 0)
	}
	if edges, ok := p.edges[string(p.key)]; ok {
		return edges, nil
	}
	edges, err := r.edgeProviders(ctx, route)
	if err == nil {
		p.edges[string(p.key)] = edges
	}
	return edges, err
}

func (p *planReads) checkRegion(ctx context.Context, r *TenantRouteReconciler, route *v1.TenantRoute) error {
	if p == nil {
		return r.checkRegion(ctx, route)
	}
	if p.regions[route.Spec.Region] {
		return nil
	}
	err := r.checkRegion(ctx, route)
	if err == nil {
		p.regions[route.Spec.Region] = true // a missing Region is read again: rare, and its route's error
	}
	return err
}
