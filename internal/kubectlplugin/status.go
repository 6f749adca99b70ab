package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
)

// status prints what a route holds and where its traffic goes, the records as the
// providers hold them (not as the status last counted them).
func (c *cli) status(ctx context.Context, name string) error {
	route, err := c.route(ctx, name)
	if err != nil {
		return err
	}
	w, err := c.world(ctx)
	if err != nil {
		return err
	}
	printf(c.out, "TenantRoute %s/%s: tenant %s, region %s\n", route.Namespace, route.Name, route.Spec.TenantID, route.Spec.Region)
	cond := func(typ string) string {
		if cd := meta.FindStatusCondition(route.Status.Conditions, typ); cd != nil {
			return fmt.Sprintf("%s (%s) %s", cd.Status, cd.Reason, cd.Message)
		}
		return "unknown (not reconciled yet)"
	}
	t := c.table()
	printf(t, "Ready:\t%s\n", cond(v1.ConditionReady))
	mode := "Automatic"
	if f := route.Spec.Failover; f != nil && f.Mode == v1.FailoverManual {
		mode = "Manual, pinned to " + f.PinnedEdge
		if f.Reason != "" {
			mode += ": " + f.Reason
		}
	}
	preferred := ""
	if len(route.Spec.Edges) > 0 {
		preferred = route.Spec.Edges[0]
	}
	printf(t, "Active edge:\t%s (preferred %s; failover %s)\n", orDash(route.Status.ActiveEdge), preferred, mode)
	last := "never"
	if lf := route.Status.LastFailoverTime; lf != nil {
		last = fmt.Sprintf("%s (%s ago)", lf.UTC().Format(time.RFC3339), time.Since(lf.Time).Round(time.Second))
	}
	printf(t, "Last failover:\t%s\n", last)
	printf(t, "Failed over:\t%s\n", cond(v1.ConditionFailedOver))
	_ = t.Flush()

	fmt.Fprintln(c.out, "\nHostnames:")
	t = c.table()
	fmt.Fprintln(t, "  HOSTNAME\tSTATE\tSINCE\tMESSAGE")
	states := map[string]v1.HostnameClaim{}
	for _, h := range route.Status.Hostnames {
		states[h.Hostname] = h
	}
	for _, h := range route.Spec.Hostnames {
		st, ok := states[h]
		if !ok {
			printf(t, "  %s\t-\t-\tnot reconciled yet\n", h)
			continue
		}
		printf(t, "  %s\t%s\t%s\t%s\n", h, st.State, st.Since.UTC().Format(time.RFC3339), orDash(st.Message))
	}
	_ = t.Flush()

	fmt.Fprintln(c.out, "\nEdges:")
	t = c.table()
	fmt.Fprintln(t, "  EDGE\tTYPE\tHEALTH\tLAST PROBE")
	for _, edge := range route.Spec.Edges {
		ep, ok := w.edges[edge]
		if !ok {
			printf(t, "  %s\t-\tdoes not exist\t-\n", edge)
			continue
		}
		health := "Unknown"
		if cd := meta.FindStatusCondition(ep.Status.Conditions, v1.ConditionHealthy); cd != nil {
			health = fmt.Sprintf("%s (%s)", map[string]string{"True": "Healthy", "False": "Unhealthy", "Unknown": "Unknown"}[string(cd.Status)], cd.Reason)
		}
		probe := "-"
		if p := ep.Status.LastProbe; p != nil {
			result := "failed"
			if p.Success {
				result = "passed"
			}
			probe = fmt.Sprintf("%s in %d ms at %s %s", result, p.LatencyMilliseconds, p.Time.UTC().Format(time.RFC3339), p.Message)
		}
		printf(t, "  %s\t%s\t%s\t%s\n", edge, orDash(ep.Status.Type), health, probe)
	}
	_ = t.Flush()

	fmt.Fprintln(c.out, "\nRecords, as the providers hold them:")
	t = c.table()
	fmt.Fprintln(t, "  EDGE\tZONE\tNAME\tTYPE\tTTL\tVALUE")
	owner := desired.OwnerKey(c.instance, route.Namespace, route.Name)
	var failed []error
	for _, edge := range route.Spec.Edges {
		ep, ok := w.edges[edge]
		if !ok {
			continue
		}
		for _, z := range ep.Spec.Zones {
			zv := w.zone(ctx, edge, z.Name)
			if zv.err != nil {
				printf(t, "  %s\t%s\t?\t\t\t%v\n", edge, z.Name, zv.err)
				failed = append(failed, zv.err)
				continue
			}
			for _, r := range zv.records {
				if r.Owner == owner {
					printf(t, "  %s\t%s\t%s\t%s\t%d\t%s\n", edge, z.Name, r.Name, r.Type, r.TTL, values(r))
				}
			}
		}
	}
	_ = t.Flush()
	if len(failed) > 0 {
		return fmt.Errorf("%d zones could not be read", len(failed))
	}
	return nil
}

// pin keeps a route on an edge whatever its health, with the reason recorded.
func (c *cli) pin(ctx context.Context, name, edge, reason string) error {
	route, err := c.route(ctx, name)
	if err != nil {
		return err
	}
	if !slices.Contains(route.Spec.Edges, edge) {
		return fmt.Errorf("%s is not one of the edges of %s/%s (%v)", edge, route.Namespace, name, route.Spec.Edges)
	}
	failover := map[string]any{"mode": v1.FailoverManual, "pinnedEdge": edge, "reason": nil}
	if reason != "" {
		failover["reason"] = reason
	}
	if err := c.patchFailover(ctx, route, failover); err != nil {
		return err
	}
	printf(c.out, "TenantRoute %s/%s pinned to %s\n", route.Namespace, name, edge)
	return nil
}

// unpin gives a route back to automatic failover.
func (c *cli) unpin(ctx context.Context, name string) error {
	route, err := c.route(ctx, name)
	if err != nil {
		return err
	}
	if err := c.patchFailover(ctx, route, map[string]any{"mode": v1.FailoverAutomatic, "pinnedEdge": nil, "reason": nil}); err != nil {
		return err
	}
	printf(c.out, "TenantRoute %s/%s is back on automatic failover\n", route.Namespace, name)
	return nil
}

// patchFailover merge-patches spec.failover alone: the operator's status writes and
// edits of other fields neither block it nor are overwritten.
func (c *cli) patchFailover(ctx context.Context, route *v1.TenantRoute, failover map[string]any) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"failover": failover}})
	if err != nil {
		return err
	}
	if err := c.k8s.patchRoute(ctx, route.Namespace, route.Name, patch); err != nil {
		return fmt.Errorf("updating TenantRoute %s/%s: %w", route.Namespace, route.Name, err)
	}
	return nil
}
