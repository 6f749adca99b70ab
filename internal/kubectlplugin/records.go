package kubectlplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/connect"
)

// world is the EdgeProviders and their zones as the providers hold them, each zone
// listed once per invocation, however many routes use it.
type world struct {
	c         *cli
	edges     map[string]*v1.EdgeProvider
	providers map[string]providers.Provider
	connErrs  map[string]error
	zones     map[string]*zoneView // by edge + "/" + zone
}

// zoneView is one zone of one EdgeProvider: its records, or why they cannot be read.
type zoneView struct {
	edge     string
	zone     providers.Zone
	provider providers.Provider
	records  []providers.Record
	err      error
}

func (c *cli) world(ctx context.Context) (*world, error) {
	list, err := c.k8s.edgeProviders(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing EdgeProviders: %w", err)
	}
	w := &world{c: c, edges: map[string]*v1.EdgeProvider{}, providers: map[string]providers.Provider{},
		connErrs: map[string]error{}, zones: map[string]*zoneView{}}
	for i := range list.Items {
		w.edges[list.Items[i].Name] = &list.Items[i]
	}
	return w, nil
}

// zone reads a zone of an EdgeProvider, connecting with the credentials the operator
// uses (the Secret in the operator's namespace).
func (w *world) zone(ctx context.Context, edge, zone string) *zoneView {
	key := edge + "/" + zone
	if zv, ok := w.zones[key]; ok {
		return zv
	}
	zv := &zoneView{edge: edge, zone: providers.Zone{Name: zone}}
	w.zones[key] = zv
	ep := w.edges[edge]
	for _, z := range ep.Spec.Zones {
		if z.Name == zone {
			zv.zone.ID = z.ID
		}
	}
	p, ok := w.providers[edge]
	if !ok && w.connErrs[edge] == nil && ep.Spec.Route53 != nil && ep.Spec.Route53.CredentialsSecretRef == nil {
		// The operator uses its own identity (IRSA, instance role); here the default
		// chain would be the user's, perhaps another account with a zone of that name.
		w.connErrs[edge] = fmt.Errorf("EdgeProvider %s has no credentials Secret: the operator reads it with its own AWS identity, which this plugin does not have", edge)
	}
	if !ok && w.connErrs[edge] == nil {
		var err error
		if p, err = connect.EdgeProvider(ctx, w.c.k8s.secret, w.c.operatorNS, ep); err != nil {
			w.connErrs[edge] = err
		} else {
			w.providers[edge] = p
		}
	}
	if zv.err = w.connErrs[edge]; zv.err != nil {
		return zv
	}
	zv.provider = p
	if zv.zone, zv.err = p.ResolveZone(ctx, zv.zone); zv.err == nil {
		zv.records, zv.err = p.ListRecords(ctx, zv.zone)
	}
	if zv.err != nil {
		zv.err = fmt.Errorf("reading zone %s of %s: %w", zone, edge, zv.err)
	}
	return zv
}

// desired computes the records the operator wants for a route now, as its reconcile
// decides them: the active edge chosen by desired.ActiveEdge from the
// EdgeProviders' health conditions, the granted hostnames in status, the records
// controllers.Desired makes of them, and nothing in the zones of edges the route no
// longer lists. A route the operator has not reconciled yet is assumed granted every
// hostname no other route holds. note says what was decided or assumed.
func (w *world) desired(route *v1.TenantRoute, heldByOthers func(host string) bool) (zones []desired.ZoneRecords, note string) {
	edges := map[string]*v1.EdgeProvider{}
	for _, name := range desired.Edges(route) {
		// An EdgeProvider being deleted deletes its records itself.
		if ep, ok := w.edges[name]; ok && ep.DeletionTimestamp.IsZero() {
			edges[name] = ep
		}
	}
	empty := func(edge string) {
		for _, z := range edges[edge].Spec.Zones {
			zones = append(zones, desired.ZoneRecords{Edge: edge, Zone: z.Name})
		}
	}
	if route.DeletionTimestamp != nil {
		switch {
		case !slices.Contains(route.Finalizers, v1.Finalizer):
			return nil, "being deleted without the operator's finalizer: the operator does nothing"
		case route.Annotations[v1.DeletionPolicyAnnotation] == v1.DeletionPolicyOrphan:
			return nil, "being deleted with deletion-policy Orphan: the records stay, without this installation's marker"
		}
		for _, name := range sortedKeys(edges) {
			empty(name)
		}
		return zones, "being deleted: every record goes"
	}

	active, reason := desired.ActiveEdge(route, edges, desired.EdgeHealth)
	if _, ok := edges[active]; !ok {
		return nil, "no active edge exists: the operator leaves the records as they are"
	}
	var notes []string
	if active != route.Status.ActiveEdge {
		notes = append(notes, fmt.Sprintf("the active edge becomes %s (%s)", active, reason))
	}
	var hostnames []string
	if len(route.Status.Hostnames) == 0 {
		notes = append(notes, "not reconciled yet: assuming every hostname no other route holds is granted")
		for _, h := range route.Spec.Hostnames {
			if !heldByOthers(h) {
				hostnames = append(hostnames, h)
			}
		}
	}
	for _, h := range route.Status.Hostnames {
		// A granted hostname the spec no longer lists is being released: its records go.
		if h.State == v1.ClaimGranted && slices.Contains(route.Spec.Hostnames, h.Hostname) {
			hostnames = append(hostnames, h.Hostname)
		}
	}
	zones = desired.Records(route, hostnames, edges, active)
	for _, name := range desired.Edges(route) {
		if _, ok := edges[name]; ok && !slices.Contains(route.Spec.Edges, name) {
			empty(name) // no longer listed: its records there go
		}
	}
	return zones, strings.Join(notes, "; ")
}

// step is one planned change or conflict, printed as a line.
type step struct {
	symbol string // + create, ~ update, - delete, ! conflict
	text   string
}

// planZone diffs a zone's records against what owner wants there, as the operator's
// apply queue does (providers.MakePlan over the provider's normalised records).
func planZone(zv *zoneView, owner string, desired []providers.Record) []step {
	normalised := make([]providers.Record, len(desired))
	for i, r := range desired {
		normalised[i] = zv.provider.Normalize(r)
	}
	plan := providers.MakePlan(zv.records, normalised, owner)
	var steps []step
	for _, ch := range plan.Changes {
		switch ch.Action {
		case providers.Create:
			steps = append(steps, step{"+", "create " + describe(*ch.New)})
		case providers.Update:
			steps = append(steps, step{"~", fmt.Sprintf("update %s (now %s)", describe(*ch.New), values(*ch.Old))})
		case providers.Delete:
			steps = append(steps, step{"-", "delete " + describe(*ch.Old)})
		}
	}
	for _, cf := range plan.Conflicts {
		var held []string
		for _, h := range cf.Holders {
			owner := h.Owner
			if owner == "" {
				owner = "no owner"
			}
			held = append(held, fmt.Sprintf("%s %s (%s)", h.Type, values(h), owner))
		}
		steps = append(steps, step{"!", fmt.Sprintf("conflict %s: the name is held by %s", describe(cf.Desired), strings.Join(held, ", "))})
	}
	return steps
}

func describe(r providers.Record) string {
	return fmt.Sprintf("%s %s %d %s", r.Name, r.Type, r.TTL, values(r))
}

func values(r providers.Record) string {
	s := strings.Join(r.Values, ",")
	if r.Proxied {
		s += " (proxied)"
	}
	return s
}

// planScope is what plan looks at: one route, the routes of the namespace, or of the
// cluster (with the records of deleted routes), narrowed by a label selector.
type planScope struct {
	name          string
	allNamespaces bool
	selector      string
}

// plan prints the changes the operator would make for the routes in scope, and with
// -A the records of routes that no longer exist. It returns how many changes and
// conflicts (drift the operator cannot repair) it found.
func (c *cli) plan(ctx context.Context, scope planScope) (int, error) {
	w, err := c.world(ctx)
	if err != nil {
		return 0, err
	}
	// Every route, whatever the scope: who holds which hostname, and which owners exist.
	all, err := c.k8s.routes(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing TenantRoutes: %w", err)
	}
	sel, err := labels.Parse(scope.selector)
	if err != nil {
		return 0, fmt.Errorf("--selector: %w", err)
	}
	var routes []v1.TenantRoute
	for _, r := range all.Items {
		switch {
		case scope.name != "":
			if r.Namespace == c.namespace && r.Name == scope.name {
				routes = append(routes, r)
			}
		case (scope.allNamespaces || r.Namespace == c.namespace) && sel.Matches(labels.Set(r.Labels)):
			routes = append(routes, r)
		}
	}
	if scope.name != "" && len(routes) == 0 {
		return 0, fmt.Errorf("TenantRoute %s/%s not found", c.namespace, scope.name)
	}
	// Hostnames granted to each route, for routes not reconciled yet.
	holder := map[string]types.NamespacedName{}
	owners := map[string]bool{}
	for _, r := range all.Items {
		owners[desired.OwnerKey(c.instance, r.Namespace, r.Name)] = true
		for _, h := range r.Status.Hostnames {
			if h.State == v1.ClaimGranted {
				holder[h.Hostname] = types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
			}
		}
	}

	changes, conflicts := 0, 0
	print := func(title string, steps []step) {
		fmt.Fprintln(c.out, title)
		for _, s := range steps {
			printf(c.out, "  %s %s\n", s.symbol, s.text)
			switch s.symbol {
			case "!":
				conflicts++
			case "+", "~", "-":
				changes++
			}
		}
	}
	for i := range routes {
		route := &routes[i]
		key := types.NamespacedName{Namespace: route.Namespace, Name: route.Name}
		owner := desired.OwnerKey(c.instance, route.Namespace, route.Name)
		zones, note := w.desired(route, func(h string) bool { k, ok := holder[h]; return ok && k != key })
		var routeSteps []step
		var errs []string
		for _, zr := range zones {
			zv := w.zone(ctx, zr.Edge, zr.Zone)
			if zv.err != nil {
				errs = append(errs, zv.err.Error())
				continue
			}
			for _, s := range planZone(zv, owner, zr.Records) {
				s.text = fmt.Sprintf("%s/%s: %s", zr.Edge, zr.Zone, s.text)
				routeSteps = append(routeSteps, s)
			}
		}
		if len(routeSteps) == 0 && len(errs) == 0 && note == "" && scope.name == "" {
			continue // several routes: only those with something to say
		}
		title := "TenantRoute " + key.String()
		if note != "" {
			title += " (" + note + ")"
		}
		if len(routeSteps) == 0 && len(errs) == 0 {
			routeSteps = append(routeSteps, step{" ", "no changes"})
		}
		for _, e := range errs {
			routeSteps = append(routeSteps, step{"?", e})
		}
		print(title, routeSteps)
	}

	if scope.allNamespaces {
		// Records of this installation whose TenantRoute no longer exists: the
		// operator's orphan sweep deletes them at the zone's next resync. Every
		// EdgeProvider is searched; with a selector, those of the selected routes.
		scan := sortedKeys(w.edges)
		if scope.selector != "" {
			used := map[string]bool{}
			for _, r := range routes {
				for _, e := range r.Spec.Edges {
					used[e] = w.edges[e] != nil
				}
			}
			scan = slices.DeleteFunc(scan, func(e string) bool { return !used[e] })
		}
		var orphanSteps []step
		for _, edge := range scan {
			for _, z := range w.edges[edge].Spec.Zones {
				zv := w.zone(ctx, edge, z.Name)
				if zv.err != nil {
					continue // listed below
				}
				for _, r := range zv.records {
					if strings.HasPrefix(r.Owner, c.instance+"/") && !owners[r.Owner] {
						orphanSteps = append(orphanSteps, step{"-", fmt.Sprintf("%s/%s: delete %s (owner %s no longer exists)",
							edge, z.Name, describe(r), r.Owner)})
					}
				}
			}
		}
		if len(orphanSteps) > 0 {
			print("Records of deleted TenantRoutes", orphanSteps)
		}
	}

	// Every zone that could not be read, once: the plan is incomplete without them.
	var unreadable []string
	for _, key := range sortedKeys(w.zones) {
		if err := w.zones[key].err; err != nil {
			unreadable = append(unreadable, err.Error())
		}
	}
	if len(unreadable) > 0 {
		fmt.Fprintln(c.out, "Zones that could not be read")
		for _, e := range unreadable {
			printf(c.out, "  ? %s\n", e)
		}
	}

	summary := fmt.Sprintf("%d changes, %d conflicts", changes, conflicts)
	if changes == 0 && conflicts == 0 {
		summary = "No changes: the providers hold what the operator wants."
	}
	if len(unreadable) > 0 {
		summary += fmt.Sprintf("; %d zones could not be read", len(unreadable))
	}
	fmt.Fprintln(c.out, summary)
	if len(unreadable) > 0 {
		return changes + conflicts, fmt.Errorf("%d zones could not be read: the plan is incomplete", len(unreadable))
	}
	return changes + conflicts, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
