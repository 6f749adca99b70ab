package zonequeue

import (
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// resyncAll lists the zone again and re-plans every owner: records someone else
// deleted or changed are repaired, and names someone else released are taken.
func (q *Queue) resyncAll() {
	if inv, ok := q.provider.(interface{ Invalidate(providers.Zone) }); ok {
		inv.Invalidate(q.zone)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, o := range q.owners {
		q.markDirty(o)
	}
	q.scheduleSweep()
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
