package zonequeue

import (
	"context"
	"errors"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// Flush plans and applies every pending owner now; Run calls it when due.
func (q *Queue) Flush(ctx context.Context) error { return q.flush(ctx, false) }

// pending is what one flush takes from the queue.
type pending struct {
	since    time.Time                     // when the oldest of its desires arrived
	batch    map[string][]providers.Record // the desires to plan, by owner
	release  map[string]bool               // owners of the batch whose records are released
	unlisted map[string]struct{}           // empty desires declared before the first listing
	sweep    bool                          // look for orphans
	resync   bool                          // the listing is a resync's
	dropped  bool                          // a desire came before the resync's listing began
}

// add puts owner key's desire, or its release, in the batch.
func (p *pending) add(key string, o *owner) {
	p.batch[key] = o.desired
	if o.release {
		if p.release == nil {
			p.release = map[string]bool{}
		}
		p.release[key] = true
	}
}

// flush plans the pending owners against the zone and applies their changes. With
// fullBatchesOnly, only owners whose changes fill whole requests are applied; the
// others stay pending. Its phases: take what is pending, list the zone, plan the
// owners in order, sending each request's worth of changes as it fills, count what
// each owner holds, report.
func (q *Queue) flush(ctx context.Context, fullBatchesOnly bool) error {
	p := q.take()
	defer func() {
		q.mu.Lock()
		q.flushing, q.dropListing = false, nil
		q.mu.Unlock()
	}()
	if len(p.batch) == 0 && len(p.unlisted) == 0 && !p.sweep && !p.resync {
		return nil
	}

	current, err := q.list(ctx, p)
	if errors.Is(err, errListingDropped) {
		q.giveBack(p)
		return nil
	}
	if err != nil {
		q.listFailed(p, err)
		return err
	}
	var orphans []string
	if p.sweep {
		orphans = q.orphansIn(current, p.batch)
		for _, key := range orphans {
			p.batch[key] = nil // desire nothing: its records are deleted
		}
	}

	f := &sending{q: q, ctx: ctx, planner: newPlanner(current, p.batch, p.release), released: map[string]bool{},
		orphans: map[string]bool{}, swept: map[string]*Outcome{}}
	for _, key := range orphans {
		f.orphans[key] = true
	}
	lim := q.limits()
	// Each run of owners that fills one request is applied, counted and reported
	// before the next is planned: an owner's records are reported once they are in,
	// not once the zone's last request is (at 100,000 routes a zone's flush is 50
	// requests at the account's pace, and no route could say Ready before all were
	// sent), and the flush holds one request's plans at a time. Owners without
	// changes are reported with the next run.
	var run, idle []planned
	var used providers.Cost
	keys := f.planner.keys()
	for _, key := range keys {
		changes, conflicts := f.planner.plan(key)
		o := planned{key: key, changes: changes, out: &Outcome{Conflicts: conflicts}}
		if len(changes) == 0 {
			idle = append(idle, o)
			continue
		}
		c := lim.cost(changes)
		next := providers.Cost{Records: used.Records + c.Records, Chars: used.Chars + c.Chars}
		if len(run) > 0 && lim.over(next) {
			f.report(idle)
			f.send(run, fullBatchesOnly)
			run, idle, next = nil, nil, c
		}
		run = append(run, o)
		used = next
	}
	f.report(idle)
	held := 0
	if fullBatchesOnly && lim.batched != nil && len(run) > 0 {
		// While desires stream in, the request the last owners would share is not full:
		// they wait for the next flush, which more desires may fill.
		keys := make([]string, len(run))
		for i, o := range run {
			keys[i] = o.key
		}
		q.hold(keys, p.since)
		held = len(keys)
		if !f.sent {
			q.mu.Lock()
			q.heldAll = true
			q.mu.Unlock()
		}
	} else if len(run) > 0 {
		f.send(run, fullBatchesOnly)
	}
	q.opts.Log.V(1).Info("planned", "zone", q.zone.Name, "owners", len(keys), "held", held, "error", f.err)
	q.reportSweep(orphans, f.swept)
	return f.err
}

// planned is one owner's plan in a flush, and its outcome.
type planned struct {
	key     string
	changes []providers.Change
	out     *Outcome
}

// sending applies a flush's runs one after the other.
type sending struct {
	q       *Queue
	ctx     context.Context
	planner *planner
	// released are the names deleted by the runs applied so far: a name deleted by an
	// earlier run frees the owners of later ones that wait for it.
	released map[string]bool
	orphans  map[string]bool
	// swept are the outcomes of the orphans reported, for reportSweep; one held back
	// with the last request of a stream has none, and is looked for again.
	swept map[string]*Outcome
	sent  bool  // a request was sent
	err   error // the first failed request's error
}

// send applies one run's changes, counts what its owners hold and reports them.
// After a failed request, the owners not sent yet share its error and are retried
// with it, after the backoff.
func (f *sending) send(run []planned, fullBatchesOnly bool) {
	outs := make(map[string]*Outcome, len(run))
	var changes []providers.Change
	for _, o := range run {
		outs[o.key] = o.out
		changes = append(changes, o.changes...)
		if f.orphans[o.key] {
			f.swept[o.key] = o.out
		}
	}
	if f.err != nil {
		for _, out := range outs {
			out.Err = f.err
		}
		f.q.finish(outs, f.released, false)
		return
	}
	f.sent = true
	res, err := f.q.apply(f.ctx, changes, outs, len(run), fullBatchesOnly)
	for _, c := range res.Applied {
		if c.Action == providers.Delete {
			f.released[c.Old.Name] = true
		}
	}
	counted := f.q.count(f.ctx, outs, f.planner, res.Applied, err)
	f.q.finish(outs, f.released, counted)
	f.err = err
}

// report counts and reports owners that had nothing to change.
func (f *sending) report(idle []planned) {
	if len(idle) == 0 {
		return
	}
	outs := make(map[string]*Outcome, len(idle))
	for _, o := range idle {
		o.out.Records = f.planner.records(o.key)
		outs[o.key] = o.out
		if f.orphans[o.key] {
			f.swept[o.key] = o.out
		}
	}
	f.q.finish(outs, f.released, true)
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
			p.add(key, o)
			o.dirty = false
		}
	}
	q.unlisted = nil
	q.firstDirty = time.Time{}
	q.expedite = false
	q.pendingCost, q.full = providers.Cost{}, false
	q.sweep, q.resyncing = false, false
	if p.resync && len(p.batch) > 0 && q.mayDefer() {
		// Writes first, planned on the cache; the resync comes with the next flush.
		p.resync, q.resyncing = false, true
		q.touch()
	}
	if p.resync && q.mayDefer() {
		// A desire that comes between now and the start of the listing drops it too:
		// else it waited for the whole listing.
		q.dropListing = func() { p.dropped = true }
	}
	return p
}

// list reads the zone and notes which owners have records in it. Unlisted empty
// desires of owners with records here join the flush; the others are answered now.
// A failed listing is the caller's to report (listFailed).
func (q *Queue) list(ctx context.Context, p *pending) ([]providers.Record, error) {
	var current []providers.Record
	var err error
	if r, ok := q.provider.(relister); ok && p.resync {
		// A resync's listing is hundreds of pages at 100,000 routes; the writes of
		// other zones (a failover) go first, and a desire in this zone drops it (see
		// mayDefer).
		lctx, drop := context.WithCancelCause(providers.Background(ctx))
		defer drop(nil)
		q.mu.Lock()
		q.dropListing = nil
		if p.dropped {
			q.mu.Unlock()
			return nil, errListingDropped
		}
		if q.mayDefer() {
			q.dropListing = func() { drop(errListingDropped) }
		}
		q.mu.Unlock()
		var drifted map[string]bool
		current, drifted, err = r.Relist(lctx, q.zone)
		q.mu.Lock()
		q.dropListing = nil
		q.mu.Unlock()
		switch {
		case err != nil && errors.Is(context.Cause(lctx), errListingDropped):
			return nil, errListingDropped
		case err == nil:
			q.replanDrifted(p, current, drifted)
		}
	} else {
		current, err = q.provider.ListRecords(ctx, q.zone)
	}
	if err != nil {
		return nil, err
	}
	present := map[string]struct{}{}
	for _, r := range current {
		if r.Owner != "" {
			present[r.Owner] = struct{}{}
		}
	}
	q.mu.Lock()
	recovered := q.listErr != nil
	changed := recovered || q.present == nil // or the first listing
	q.present, q.listErr = present, nil
	q.mu.Unlock()
	if recovered {
		q.opts.Log.Info("the zone can be listed again", "zone", q.zone.Name)
	}
	if changed && q.opts.Readable != nil {
		q.opts.Readable(nil)
	}
	if answered := q.adopt(p.unlisted, present, p.batch); len(answered) > 0 && q.notify != nil {
		for _, key := range answered {
			q.notify(key, Outcome{Synced: true})
		}
	}
	return current, nil
}

// listFailed gives every owner of the flush the listing's error; they are retried.
// What the zone holds is unknown until it is listed again: every empty desire is kept
// meanwhile. The unlisted ones stay unanswered and are told why, as unlisted still:
// only an owner waiting for this zone to be read (an edge being removed, a hostname
// let go, a route being deleted) has records here that the error concerns. Turning
// them into owners would hand the error to every route of the account, most of which
// never had a record here.
func (q *Queue) listFailed(p *pending, err error) {
	// The routes with records here hear of it through their outcomes; a zone where
	// none has records (only empty desires wait for it) has no other voice.
	q.mu.Lock()
	changed := q.listErr == nil // was readable, or the first listing
	repeated := !changed && sameFailure(q.listErr, err)
	q.present, q.listErr = nil, err
	if changed {
		q.unreadableSince = time.Now()
	}
	kept := q.keepUnlistedLocked(p.unlisted)
	q.mu.Unlock()
	// Once per failure, and again when it changes: a zone refused for hours logged
	// the same error at every retry. The retries are counted in the provider's error
	// metric, and the EdgeProvider's ZonesReady says the zone cannot be listed.
	if repeated {
		q.opts.Log.V(1).Info("the zone still cannot be listed", "zone", q.zone.Name, "error", err.Error())
	} else {
		q.opts.Log.Error(err, "the zone cannot be listed; retrying with backoff", "zone", q.zone.Name,
			"owners", len(p.batch), "waiting", len(p.unlisted))
	}
	if changed && q.opts.Readable != nil {
		q.opts.Readable(err)
	}
	outcomes := make(map[string]*Outcome, len(p.batch))
	for key := range p.batch {
		outcomes[key] = &Outcome{Err: err}
	}
	q.finish(outcomes, nil, false)
	if q.notify != nil {
		for _, key := range kept {
			q.notify(key, Outcome{Unlisted: true, Err: err})
		}
	}
	q.mu.Lock()
	if p.sweep {
		q.scheduleSweep() // look again once the zone can be listed
	}
	if p.resync {
		// Retried with the flush's backoff like any failure, owners or not: a zone
		// that only resyncs (no sweep on start, nothing pending) would else stay
		// unread, and its EdgeProvider say so, until the next period.
		q.resyncing = true
		q.touch()
	}
	q.mu.Unlock()
}

// adopt turns the unlisted empty desires of owners with records in the zone into
// owners planned by this flush, and returns the others, which have nothing here. An
// owner that declared records since is left to its newer desire.
func (q *Queue) adopt(unlisted, present map[string]struct{}, batch map[string][]providers.Record) (answered []string) {
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
		if _, has := present[key]; !has {
			answered = append(answered, key)
			continue
		}
		q.owners[key] = &owner{hash: empty}
		batch[key] = nil
	}
	return answered
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

// sameFailure reports whether two listing errors are the same failure for a reader of
// the log: the same kind and provider code. The texts differ by request ids.
func sameFailure(a, b error) bool {
	return providers.IsPermanent(a) == providers.IsPermanent(b) && providers.ErrorCode(a) == providers.ErrorCode(b)
}
