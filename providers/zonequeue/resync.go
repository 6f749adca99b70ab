package zonequeue

import (
	"context"
	"errors"
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
	if !q.resyncing {
		q.resyncAsked = time.Now()
	}
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

// errListingDropped ends a resync's listing that writes came to go before.
var errListingDropped = errors.New("the resync's listing gave way to writes")

// mayDefer reports whether the pending resync may wait for writes: a resync's listing
// is hundreds of pages at 100,000 routes, at the account's rate limit, and a
// failover's writes in the zone waited for all of them. Writes are planned on the
// zone's cache meanwhile, which the operator's own writes keep current. A provider
// without a cache re-plans every owner on a resync, which is then the write; a zone
// never listed has no cache; and a resync that has waited half a period goes ahead
// whatever comes, so that a steady stream of desires cannot hold it off for ever and
// the cache (kept two periods from the last resync's listing) does not expire first:
// a write on an expired cache lists the zone itself, and the drift the resync is
// for would go unnoticed. q.mu must be held.
func (q *Queue) mayDefer() bool {
	_, relists := q.provider.(relister)
	return relists && q.present != nil && time.Since(q.resyncAsked) < q.opts.Resync/2
}

// giveBack returns a flush whose resync listing was dropped to the queue, as it was
// taken: its owners are pending again (those with a newer desire already are), and
// the resync and sweep wait for the next flush with nothing else to do.
func (q *Queue) giveBack(p *pending) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key := range p.batch {
		if o := q.owners[key]; o != nil && !o.dirty {
			q.markDirty(o)
		}
	}
	q.keepUnlistedLocked(p.unlisted)
	q.sweep = q.sweep || p.sweep
	q.resyncing = true
	q.touch()
}

// replanDrifted adds to a resync's batch the owners it concerns: those with records
// or desires at a drifted name (every owner when drifted is nil), and those with
// conflicts or rejected records.
func (q *Queue) replanDrifted(p *pending, current []providers.Record, drifted map[string]bool) {
	holders := map[string]bool{}
	for _, r := range current {
		if r.Owner != "" && drifted[r.Name] {
			holders[r.Owner] = true
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, o := range q.owners {
		if _, in := p.batch[key]; in {
			continue
		}
		concerned := drifted == nil || holders[key] || o.issues != nil && (len(o.issues.conflicts) > 0 || len(o.issues.failed) > 0) ||
			slices.ContainsFunc(o.desired, func(r providers.Record) bool { return drifted[r.Name] })
		if concerned {
			p.add(key, o)
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
