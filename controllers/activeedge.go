package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/edge"
)

// EdgeHealth is an edge's health as its EdgeProvider's Healthy condition reports it.
func EdgeHealth(ep *v1.EdgeProvider) edge.State {
	c := meta.FindStatusCondition(ep.Status.Conditions, v1.ConditionHealthy)
	switch {
	case c == nil || c.Status == metav1.ConditionUnknown:
		return edge.Unknown
	case c.Status == metav1.ConditionTrue:
		return edge.Healthy
	default:
		return edge.Unhealthy
	}
}

// ActiveEdgeReason says why an edge is active.
type ActiveEdgeReason string

// Reasons for the choice of the active edge.
const (
	ReasonPreferred  ActiveEdgeReason = "Preferred"   // the first edge, healthy or unknown
	ReasonFailedOver ActiveEdgeReason = "FailedOver"  // a later edge: those before it are unhealthy or missing
	ReasonPinned     ActiveEdgeReason = "Pinned"      // Manual mode
	ReasonFailStatic ActiveEdgeReason = "FailStatic"  // no edge is healthy: the current one stays
	ReasonNoEdge     ActiveEdgeReason = "NoEdgeFound" // none of the edges exists
	// ReasonPinnedMissing: Manual mode names an EdgeProvider that does not exist; the
	// current active edge stays.
	ReasonPinnedMissing ActiveEdgeReason = "PinnedEdgeNotFound"
)

// ActiveEdge chooses the edge every record of the route points at. Automatic: the first
// edge in spec.edges that exists and is not unhealthy (unknown health counts as
// healthy: a new edge is trusted until its probes say otherwise). When every existing
// edge is unhealthy, the current active edge stays (fail static): the operator never
// moves or blanks records because its own probes fail. Manual: the pinned edge.
// edges holds the EdgeProviders that exist, by name; health tells an edge's health.
func ActiveEdge(route *v1.TenantRoute, edges map[string]*v1.EdgeProvider, health func(*v1.EdgeProvider) edge.State) (string, ActiveEdgeReason) {
	if f := route.Spec.Failover; f != nil && f.Mode == v1.FailoverManual {
		if _, ok := edges[f.PinnedEdge]; ok {
			return f.PinnedEdge, ReasonPinned
		}
		if _, ok := edges[route.Status.ActiveEdge]; ok {
			return route.Status.ActiveEdge, ReasonPinnedMissing
		}
		return "", ReasonNoEdge
	}
	for i, name := range route.Spec.Edges {
		ep, ok := edges[name]
		if !ok || health(ep) == edge.Unhealthy {
			continue
		}
		if i == 0 {
			return name, ReasonPreferred
		}
		return name, ReasonFailedOver
	}
	if current := route.Status.ActiveEdge; current != "" {
		if _, ok := edges[current]; ok {
			return current, ReasonFailStatic
		}
	}
	for _, name := range route.Spec.Edges {
		if _, ok := edges[name]; ok {
			return name, ReasonFailStatic
		}
	}
	return "", ReasonNoEdge
}
