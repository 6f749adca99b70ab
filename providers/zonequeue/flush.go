package zonequeue

import (
	"context"
	"slices"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// Flush plans and applies every pending owner now; Run calls it when due.
func (q *Queue) Flush(ctx context.Context) error { return q.flush(ctx, false) }

// pending is what one flush takes from the queue.
type pending struct {
	since    time.Time                     // when the oldest of its desires arrived
	batch    map[string][]providers.Record // the desires to plan, by owner
	unlisted map[string]struct{}           // empty desires declared before the first listing
	sweep    bool                          // look for orphans
	resync   bool                          // the listing is a resync's
}

// flush plans the pending owners against the zone and applies their changes. With
// fullBatchesOnly, only owners whose changes fill whole batches are applied; the
// others stay pending. Its phases: take what is pending, list the zone, plan each
// owner, send the changes, count what each owner holds, report.
func (q *Queue) flush(ctx context.Context, fullBatchesOnly bool) error {
	p := q.take()
	defer func() {
		q.mu.Lock()
		q.flushing = false
		q.mu.Unlock()
	}()
	if len(p.batch) == 0 && len(p.unlisted) == 0 && !p.sweep && !p.resync {
		return nil
	}

	current, err := q.list(ctx, p)
	outcomes := make(map[string]*Outcome, len(p.batch))
	for key := range p.batch {
		outcomes[key] = &Outcome{}
	}
	if err != nil {
		q.listFailed(p, outcomes, err)
		return err
	}
	var orphans []string
	if p.sweep {
		orphans = q.orphansIn(current, p.batch)
		for _, key := range orphans {
			p.batch[key] = nil // desire nothing: its records are deleted
			outcomes[key] = &Outcome{}
		}
	}

	keys, perOwner, byOwner := planOwners(current, p.batch, outcomes)
	var held []string
	if fullBatchesOnly {
		keys, held = q.fillBatches(keys, perOwner)
		q.hold(held, p.since)
		for _, key := range held {
			delete(p.batch, key)
			delete(outcomes, key)
		}
	}
	if len(held) > 0 && !hasChanges(keys, perOwner) {
		q.mu.Lock()
		q.heldAll = true
		q.mu.Unlock()
	}

	// Each run of owners that fills one request is applied, counted and reported
	// before the next is sent: an owner's records are reported once they are in, not
	// once the zone's last request is (at 100,000 routes a zone's flush is 50 requests
	// at the account's pace, and no route could say Ready before all were sent).
	var applied []providers.Change
	var applyErr error
	for _, run := range q.runs(keys, perOwner) {
		outs := make(map[string]*Outcome, len(run))
		batch := make(map[string][]providers.Record, len(run))
		var changes []providers.Change
		for _, key := range run {
			outs[key], batch[key] = outcomes[key], p.batch[key]
			changes = append(changes, perOwner[key]...)
		}
		if applyErr != nil {
			// A request failed: the owners not sent yet share its error and are retried
			// with it, after the backoff.
			for _, out := range outs {
				out.Err = applyErr
			}
			q.finish(batch, outs, applied, false)
			continue
		}
		res, err := q.apply(ctx, changes, outs, len(run), fullBatchesOnly)
		applied = append(applied, res.Applied...)
		counted := q.count(ctx, outs, byOwner, res.Applied, err)
		// finish sees every change applied so far: a name deleted by an earlier run
		// frees the owners of later ones that wait for it.
		q.finish(batch, outs, applied, counted)
		applyErr = err
	}
	q.reportSweep(orphans, outcomes)
	return applyErr
}

func hasChanges(keys []string, perOwner map[string][]providers.Change) bool {
	for _, key := range keys {
		if len(perOwner[key]) > 0 {
			return true
		}
	}
	return false
}

// take moves what is pending out of the queue into a flush, and marks the queue as
// flushing.
func (q *Queue) take() *pending {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.flushing = true
	p := &pending{since: q.firstDirty, batch: map[string][]providers.Record{}, unlisted: q.unlisted, sweep: q.sweep, resync: q.resyncing}
	for key, o := range q.owners {
		if o.dirty {
			p.batch[key] = o.desired
			o.dirty = false
		}
	}
	q.unlisted = nil
	q.firstDirty = time.Time{}
	q.expedite = false
	q.sweep, q.resyncing = false, false
	return p
}

// list reads the zone and notes which owners have records in it. Unlisted empty
// desires of owners with records here join the flush; the others are answered now.
// After a failed listing all of them join, as the error is theirs too.
func (q *Queue) list(ctx context.Context, p *pending) ([]providers.Record, error) {
	var current []providers.Record
	var err error
	if r, ok := q.provider.(relister); ok && p.resync {
		// A resync's listing is hundreds of pages at 100,000 routes; the writes of
		// other zones (a failover) go first.
		var drifted map[string]bool
		if current, drifted, err = r.Relist(providers.Background(ctx), q.zone); err == nil {
			q.replanDrifted(p.batch, current, drifted)
		}
	} else {
		current, err = q.provider.ListRecords(ctx, q.zone)
	}
	present := map[string]struct{}{}
	if err == nil {
		for _, r := range current {
			if r.Owner != "" {
				present[r.Owner] = struct{}{}
			}
		}
		q.mu.Lock()
		q.present = present
		q.mu.Unlock()
	}
	if answered := q.adopt(p.unlisted, present, err != nil, p.batch); len(answered) > 0 && q.notify != nil {
		for _, key := range answered {
			q.notify(key, Outcome{Synced: true})
		}
	}
	return current, err
}

// listFailed gives every owner of the flush the listing's error; they are retried.
// What the zone holds is unknown until it is listed again: every empty desire is kept
// meanwhile.
func (q *Queue) listFailed(p *pending, outcomes map[string]*Outcome, err error) {
	q.mu.Lock()
	q.present = nil
	q.mu.Unlock()
	for _, o := range outcomes {
		o.Err = err
	}
	q.finish(p.batch, outcomes, nil, false)
	q.mu.Lock()
	if p.sweep {
		q.scheduleSweep() // look again once the zone can be listed
	}
	if p.resync {
		q.resyncing = true
	}
	q.mu.Unlock()
}

// adopt turns the unlisted empty desires of owners with records in the zone (all of
// them when all is set) into owners planned by this flush, and returns the others,
// which have nothing here. An owner that declared records since is left to its
// newer desire.
func (q *Queue) adopt(unlisted, present map[string]struct{}, all bool, batch map[string][]providers.Record) (answered []string) {
	if len(unlisted) == 0 {
		return nil
	}
	empty := hashRecords(nil)
	q.mu.Lock()
	defer q.mu.Unlock()
	for key := range unlisted {
		if _, declared := q.owners[key]; declared {
			continue
		}
		if _, has := present[key]; !has && !all {
			answered = append(answered, key)
			continue
		}
		q.owners[key] = &owner{hash: empty}
		batch[key] = nil
	}
	return answered
}

// planOwners plans each owner of batch against the zone's records, in a stable order;
// a name created or updated by one owner in this flush is a conflict for any other.
// It returns the owners in that order, each one's changes, and each one's records
// before the flush.
func planOwners(current []providers.Record, batch map[string][]providers.Record, outcomes map[string]*Outcome) (keys []string, perOwner map[string][]providers.Change, byOwner map[string][]providers.Record) {
	keys = make([]string, 0, len(batch))
	for key := range batch {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	// MakePlan only looks at an owner's own records and at the records at its desired
	// names; handing it just those keeps a flush of n owners in a zone of n records
	// linear rather than quadratic (10,000 owners: 0.1 s rather than 95 s).
	// Only the records of this flush's owners and names are indexed: a flush of a few
	// hundred owners in a zone of thousands of records builds small maps (indexing the
	// whole zone, with the maps' growth, was a fifth of the manager's CPU in a
	// 10,000-route sync).
	wanted := map[string]bool{}
	for _, desired := range batch {
		for _, d := range desired {
			wanted[d.Name] = true
		}
	}
	byName := make(map[string][]providers.Record, len(wanted))
	byOwner = make(map[string][]providers.Record, len(batch))
	for _, r := range current {
		if wanted[r.Name] {
			byName[r.Name] = append(byName[r.Name], r)
		}
		if _, ok := batch[r.Owner]; ok && r.Owner != "" {
			byOwner[r.Owner] = append(byOwner[r.Owner], r)
		}
	}
	claimed := map[string]string{}
	perOwner = map[string][]providers.Change{}
	for _, key := range keys {
		relevant := slices.Clone(byOwner[key])
		seen := map[string]bool{}
		for _, d := range batch[key] {
			if !seen[d.Name] {
				seen[d.Name] = true
				for _, r := range byName[d.Name] {
					if r.Owner != key {
						relevant = append(relevant, r)
					}
				}
			}
		}
		plan := providers.MakePlan(relevant, batch[key], key)
		out := outcomes[key]
		out.Conflicts = plan.Conflicts
		for _, c := range plan.Changes {
			if c.New != nil {
				if holder, ok := claimed[c.New.Name]; ok && holder != key {
					out.Conflicts = append(out.Conflicts, providers.Conflict{Desired: *c.New})
					continue
				}
				claimed[c.New.Name] = key
			}
			perOwner[key] = append(perOwner[key], c)
		}
	}
	return keys, perOwner, byOwner
}

// apply sends the changes of the flush's owners and gives each owner the answers to
// its own; an owner with a change left unanswered gets the apply's error.
func (q *Queue) apply(ctx context.Context, changes []providers.Change, outcomes map[string]*Outcome, owners int, fullBatchesOnly bool) (providers.Result, error) {
	started := time.Now()
	res, applyErr := q.provider.ApplyChanges(ctx, q.zone, changes)
	if len(res.Applied) > 0 {
		q.mu.Lock()
		q.progressAt = time.Now()
		q.mu.Unlock()
	}
	if q.opts.Flushed != nil && len(changes) > 0 {
		q.opts.Flushed(len(changes), time.Since(started), applyErr)
	}
	q.opts.Log.V(1).Info("flushed", "zone", q.zone.Name, "owners", owners, "changes", len(changes),
		"applied", len(res.Applied), "failed", len(res.Failed), "fullBatchesOnly", fullBatchesOnly, "error", applyErr)
	done := map[string]int{}
	for _, c := range res.Applied {
		key := c.Owner()
		outcomes[key].Applied = append(outcomes[key].Applied, c)
		done[key]++
	}
	for _, f := range res.Failed {
		key := f.Change.Owner()
		outcomes[key].Failed = append(outcomes[key].Failed, f)
		done[key]++
	}
	planned := map[string]int{}
	for _, c := range changes {
		planned[c.Owner()]++
	}
	for key, out := range outcomes {
		if done[key] < planned[key] {
			out.Err = applyErr
		}
	}
	return res, applyErr
}
