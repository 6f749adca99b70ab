package zonequeue

import (
	"context"
	"slices"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// relister is a provider that lists a zone again and says where it drifted
// (providers.Cached).
type relister interface {
	Relist(ctx context.Context, zone providers.Zone) ([]providers.Record, map[string]bool, error)
}

// resyncAll has the next flush list the zone again and re-plan the owners of what
// someone else changed: records deleted or changed behind the operator's back are
// repaired, names released are taken, and owners with conflicts or rejected records
// try again. With a provider that cannot tell where the zone drifted, every owner is
// re-planned.
func (q *Queue) resyncAll() {
	_, relists := q.provider.(relister)
	if !relists {
		if inv, ok := q.provider.(interface{ Invalidate(providers.Zone) }); ok {
			inv.Invalidate(q.zone)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.resyncing = true
	if relists {
		q.touch() // the flush decides whom to re-plan once it has listed
	} else {
		for _, o := range q.owners {
			q.markDirty(o)
		}
	}
	q.scheduleSweep()
}

// replanDrifted adds to a resync's batch the owners it concerns: those with records
// or desires at a drifted name (every owner when drifted is nil), and those with
// conflicts or rejected records.
func (q *Queue) replanDrifted(batch map[string][]providers.Record, current []providers.Record, drifted map[string]bool) {
	holders := map[string]bool{}
	for _, r := range current {
		if r.Owner != "" && drifted[r.Name] {
			holders[r.Owner] = true
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, o := range q.owners {
		if _, in := batch[key]; in {
			continue
		}
		concerned := drifted == nil || holders[key] || o.issues != nil && (len(o.issues.conflicts) > 0 || len(o.issues.failed) > 0) ||
			slices.ContainsFunc(o.desired, func(r providers.Record) bool { return drifted[r.Name] })
		if concerned {
			batch[key] = o.desired
			o.dirty = false
		}
	}
}

// scheduleSweep makes the next flush, due now, look for orphans. q.mu is held or q
// is not shared yet.
func (q *Queue) scheduleSweep() {
	if q.opts.Orphaned == nil {
		return
	}
	q.sweep = true
	if q.firstDirty.IsZero() {
		q.firstDirty = time.Now()
	}
}

// orphansIn returns the owners of records in the zone that the queue does not know,
// that are not in this flush, and that Orphaned says are gone.
func (q *Queue) orphansIn(current []providers.Record, batch map[string][]providers.Record) []string {
	q.mu.Lock()
	known := map[string]bool{}
	for key := range q.owners {
		known[key] = true
	}
	q.mu.Unlock()
	seen := map[string]bool{}
	var orphans []string
	for _, r := range current {
		if r.Owner == "" || seen[r.Owner] || known[r.Owner] {
			continue
		}
		seen[r.Owner] = true
		if _, inFlush := batch[r.Owner]; !inFlush && q.opts.Orphaned(r.Owner) {
			orphans = append(orphans, r.Owner)
		}
	}
	return orphans
}

// reportSweep logs and counts the records of orphans this flush deleted; an orphan
// not wholly gone is looked for again by the next flush.
func (q *Queue) reportSweep(orphans []string, outcomes map[string]*Outcome) {
	for _, key := range orphans {
		if out, ok := outcomes[key]; ok && len(out.Applied) > 0 {
			q.opts.Log.Info("deleted the records of an owner that no longer exists", "zone", q.zone.Name,
				"owner", key, "records", len(out.Applied), "left", out.Records)
			if q.opts.Swept != nil {
				q.opts.Swept(key, len(out.Applied))
			}
		}
		if out, ok := outcomes[key]; !ok || out.Err != nil || out.Records > 0 {
			q.mu.Lock()
			q.sweep = true
			q.mu.Unlock()
		}
	}
}
