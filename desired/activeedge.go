package desired

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

// ActiveEdge chooses the edge every record of the route points at. Automatic: the first
// edge in spec.edges that exists and is not unhealthy (unknown health counts as
// healthy: a new edge is trusted until its probes say otherwise). When every existing
// edge is unhealthy, the current active edge stays (fail static): the operator never
// moves or blanks records because its own probes fail. Manual: the pinned edge; while
// it does not exist, the current one, or once that is deleted too, the first that exists.
// edges holds the EdgeProviders that exist, by name; health tells an edge's health.
func ActiveEdge(route *v1.TenantRoute, edges map[string]*v1.EdgeProvider, health func(*v1.EdgeProvider) edge.State) (active, reason string) {
	if f := route.Spec.Failover; f != nil && f.Mode == v1.FailoverManual {
		if _, ok := edges[f.PinnedEdge]; ok {
			return f.PinnedEdge, v1.ReasonPinned
		}
		if _, ok := edges[route.Status.ActiveEdge]; ok {
			return route.Status.ActiveEdge, v1.ReasonPinnedEdgeMissing
		}
		if route.Status.ActiveEdge == "" {
			return "", v1.ReasonNoEdge // nothing written yet: nothing to move
		}
		// The edge the records point at was deleted: left there, they point at a
		// decommissioned edge, which whoever gets its name or address next could serve.
		for _, name := range route.Spec.Edges {
			if _, ok := edges[name]; ok {
				return name, v1.ReasonPinnedEdgeMissing
			}
		}
		return "", v1.ReasonNoEdge
	}
	for i, name := range route.Spec.Edges {
		ep, ok := edges[name]
		if !ok || health(ep) == edge.Unhealthy {
			continue
		}
		if i == 0 {
			return name, v1.ReasonPreferred
		}
		return name, v1.ReasonFailedOver
	}
	if current := route.Status.ActiveEdge; current != "" {
		if _, ok := edges[current]; ok {
			return current, v1.ReasonFailStatic
		}
	}
	for _, name := range route.Spec.Edges {
		if _, ok := edges[name]; ok {
			return name, v1.ReasonFailStatic
		}
	}
	return "", v1.ReasonNoEdge
}
