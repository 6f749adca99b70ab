package controllers

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/clip"
	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
)

// edgeState is a route's record state in one EdgeProvider, folded over its zones.
type edgeState struct {
	edge     string
	removing bool // no longer in spec.edges: its records are being deleted
	records  int
	pending  bool
	// connecting: the EdgeProvider has not been connected since the operator started.
	connecting bool
	// awaiting: records the route wants could not be handed to a queue, the account or
	// the zone not being ready; the route is reconciled ahead of fan-outs once it is.
	awaiting  bool
	errs      []string
	rejected  []string
	conflicts []string
	// movedAt: when the queue holding its pending records that moved least recently
	// last moved (zonequeue.Queue.Progress); set tells it was seen.
	movedAt  time.Time
	movedSet bool
	// idle: a queue holding some of its pending records was not flushing.
	idle bool
	// listing: it waits for a zone's first listing (a deletion there may be due).
	listing bool
}

// moved notes the progress of a queue holding some of its pending records, and
// whether it is flushing now.
func (s *edgeState) moved(at time.Time, flushing bool) {
	if !s.movedSet || at.Before(s.movedAt) {
		s.movedAt, s.movedSet = at, true
	}
	s.idle = s.idle || !flushing
}

// lastMoved is when the least recently moving queue holding any of the pending
// records of states last moved; zero if none was seen.
func lastMoved(states []*edgeState) time.Time {
	var at time.Time
	set := false
	for _, s := range states {
		if s.movedSet && (!set || s.movedAt.Before(at)) {
			at, set = s.movedAt, true
		}
	}
	return at
}

// awaitsListing tells whether states wait for a zone's first listing.
func awaitsListing(states []*edgeState) bool {
	return slices.ContainsFunc(states, func(s *edgeState) bool { return s.listing })
}

// inFlight tells whether every queue holding pending records of states is flushing
// now, so that each will say how its flush went for them when it ends.
func inFlight(states []*edgeState) bool {
	seen := false
	for _, s := range states {
		if s.movedSet {
			if s.idle {
				return false
			}
			seen = true
		}
	}
	return seen
}

// maxQuoted bounds a provider's error as a route's status quotes it: the text is the
// provider's answer, and a Route53 refusal of a 1,000-change batch quotes every change.
// A condition message over 32,768 bytes makes the API server refuse the whole status:
// at 100,000 routes, 32 routes' statuses were refused so.
const maxQuoted = 1024

func (s *edgeState) add(zone string, o zonequeue.Outcome) {
	s.records += o.Records
	if !o.Synced {
		s.pending = true
	}
	if o.Err != nil {
		s.errs = append(s.errs, clip.String(fmt.Sprintf("zone %s: %v", zone, o.Err), maxQuoted))
	}
	for _, f := range o.Failed {
		s.rejected = append(s.rejected, clip.String(fmt.Sprintf("%s %s: %v", f.Change.Name(), f.Change.Type(), f.Err), maxQuoted))
	}
	for _, c := range o.Conflicts {
		holder := "a record the operator does not own"
		if len(c.Holders) > 0 && c.Holders[0].Owner != "" {
			holder = "a record of another owner"
		}
		s.conflicts = append(s.conflicts, fmt.Sprintf("%s is held by %s in %s", c.Desired.Name, holder, s.edge))
	}
}

func (s *edgeState) state() (v1.RecordState, string) {
	switch {
	case len(s.errs) > 0:
		return v1.RecordsError, strings.Join(s.errs, "; ")
	case len(s.rejected) > 0:
		return v1.RecordsError, "rejected by the provider: " + strings.Join(s.rejected, "; ")
	case s.connecting:
		return v1.RecordsPending, "connecting to the provider"
	case s.pending:
		return v1.RecordsPending, "changes are being applied"
	}
	return v1.RecordsSynced, ""
}

// declareRecords hands the route's desired records to the apply queue of every zone
// and folds the outcomes per EdgeProvider. EdgeProviders the route no longer lists
// but has records in get an empty desire, which deletes them.
// Without an active edge nothing is declared: the records stay as they are rather
// than being removed. onPending, if set, is told of each zone where records are
// desired and not applied yet.
func (r *TenantRouteReconciler) declareRecords(route *v1.TenantRoute, owner string, plan *routePlan,
	onPending func(edge, zone, owner string)) []*edgeState {
	// A route whose deletion completed gets no record again, even from a planner that
	// read it before it was deleted (a failover plans thousands of routes from one
	// snapshot): its records would be orphans nobody deletes.
	r.retiredMu.RLock()
	defer r.retiredMu.RUnlock()
	if g, ok := r.retired[owner]; ok && g.uid == route.UID {
		return nil
	}
	zones, edges := plan.zones, plan.edges
	byEdge := map[string]*edgeState{}
	var states []*edgeState
	state := func(edge string) *edgeState {
		s, ok := byEdge[edge]
		if !ok {
			s = &edgeState{edge: edge, removing: !slices.Contains(route.Spec.Edges, edge)}
			byEdge[edge] = s
			states = append(states, s)
		}
		return s
	}
	for _, name := range route.Spec.Edges {
		s := state(name)
		if _, ok := edges[name]; !ok {
			s.errs = append(s.errs, fmt.Sprintf("EdgeProvider %s not found or being deleted: remove it from spec.edges", name))
		}
	}
	if _, ok := edges[plan.active]; !ok {
		for _, s := range states {
			s.errs = append(s.errs, "no active edge exists: records are left as they are")
		}
		return states
	}
	for _, zr := range zones {
		// A failover waits for the records it moves, not for the empty desires in a
		// route's other zones (which only clean up after a spec change): keeping those
		// would be nine entries per route over 10 zones. A route letting hostnames go
		// waits for every zone it may hold them in, even one its EdgeProvider no
		// longer maps them to: each name goes to the next claimant once its records
		// are gone.
		out, ok := r.desire(state(zr.Edge), zr.Zone, owner, zr.Records, len(plan.releasing) > 0)
		if ok && !out.Synced && onPending != nil && len(zr.Records) > 0 {
			onPending(zr.Edge, zr.Zone, owner)
		}
	}
	for _, p := range route.Status.Providers {
		if slices.Contains(route.Spec.Edges, p.Edge) {
			continue
		}
		s := state(p.Edge)
		if acct := r.Accounts.Get(p.Edge); acct != nil {
			queues := acct.Queues()
			for zone := range queues {
				r.desire(s, zone, owner, nil, true)
			}
			if ep, ok := edges[p.Edge]; ok {
				for _, z := range ep.Spec.Zones {
					// A zone another EdgeProvider manages holds nothing of this one's.
					if _, resolved := queues[z.Name]; !resolved && r.Accounts.conflict(p.Edge, z.Name) == "" {
						r.desire(s, z.Name, owner, nil, true) // waits for it
					}
				}
			}
		} else if _, exists := edges[p.Edge]; exists {
			s.errs = append(s.errs, fmt.Sprintf("EdgeProvider %s is not ready", p.Edge))
		}
	}
	return states
}

// desire hands records to a zone's queue and folds the outcome into s; ok is false
// when the zone has no queue. With cleanup, an empty desire is answered only once
// the zone was read: the records it deletes are what the route waits for.
func (r *TenantRouteReconciler) desire(s *edgeState, zone, owner string, records []providers.Record, cleanup bool) (zonequeue.Outcome, bool) {
	acct := r.Accounts.Get(s.edge)
	if acct == nil && !r.Accounts.Tried(s.edge) {
		// Not connected yet since the operator started: the route is reconciled again
		// once it is, and meanwhile says nothing that the next moment would undo.
		s.pending, s.connecting = true, true
		s.awaiting = s.awaiting || len(records) > 0 // desire is called for every zone of the edge
		return zonequeue.Outcome{}, false
	}
	if acct == nil {
		s.awaiting = s.awaiting || len(records) > 0
		if !slices.ContainsFunc(s.errs, func(e string) bool { return strings.Contains(e, "not ready") }) {
			s.errs = append(s.errs, fmt.Sprintf("EdgeProvider %s is not ready (see its CredentialsReady and ZonesReady conditions)", s.edge))
		}
		return zonequeue.Outcome{}, false
	}
	q, ok := acct.Queue(zone)
	if !ok {
		// Not resolved yet. A route with records for it waits; so does a route letting
		// an edge or a hostname go, since the zone may hold records of it: the name
		// must not go to its next claimant before they are deleted.
		if len(records) > 0 || cleanup {
			s.awaiting = true
			s.errs = append(s.errs, fmt.Sprintf("zone %s of EdgeProvider %s is not ready (see its ZonesReady condition)", zone, s.edge))
		}
		return zonequeue.Outcome{}, false
	}
	out := q.Desire(owner, records)
	if out.Unlisted && !cleanup {
		// A zone of an edge the route keeps, where it wants no record, not read yet,
		// and the route lets no hostname go: records it holds there are leftovers,
		// which the first listing finds and deletes (with a RecordsChanged event).
		// Ready says the route's own records are in place, and does not wait for
		// that: at Route53's 5 requests a second, the first listings of 10 zones held
		// every route of the account for 2 s. An edge being removed, or a hostname
		// being released (its name goes to the next claimant once its records are
		// gone), does wait.
		return out, true
	}
	s.add(zone, out)
	s.listing = s.listing || out.Unlisted
	if !out.Synced {
		s.moved(q.Moving())
	}
	return out, true
}
