// Package zonequeue coalesces the record changes of many owners (TenantRoutes) in one
// zone into the provider's batches.
//
// Owners declare what they want (Desire) and return at once; the queue plans every
// owner that changed against one cached listing of the zone and applies all their
// changes together, so that 10,000 TenantRoutes mean a handful of batch requests, not
// 10,000 single-record writes. When an owner's outcome changes, the queue says so
// through its notify callback, so the controller can report it.
package zonequeue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// Outcome is an owner's state in the zone.
type Outcome struct {
	// Synced: the owner's desired records, as last declared, are in place (apart from
	// Conflicts and Failed, which cannot be placed).
	Synced bool
	// Records is how many record sets the owner has in the zone.
	Records int
	// Conflicts are desired records held by someone else, left alone.
	Conflicts []providers.Conflict
	// Failed are changes the provider rejected.
	Failed []providers.Failure
	// Err is why the last attempt did not complete (provider unreachable, throttled,
	// credentials refused); the queue retries with backoff.
	Err error
	// Applied are the changes made for the owner by the flush that produced this outcome.
	Applied []providers.Change
}

// summary is what makes two outcomes different for the controller: an error counts
// by its kind and code, not its text (which carries request ids), so that retries of
// one failure do not look like news.
func (o Outcome) summary() string {
	errKey := ""
	if o.Err != nil {
		errKey = fmt.Sprintf("%t:%s", providers.IsPermanent(o.Err), providers.ErrorCode(o.Err))
	}
	return fmt.Sprintf("%t/%d/%d/%d/%s", o.Synced, o.Records, len(o.Conflicts), len(o.Failed), errKey)
}

// Defaults of Options.
const (
	DefaultQuiet   = time.Second
	DefaultMaxWait = 5 * time.Second
)

// Options tune a queue.
type Options struct {
	// Quiet: a flush starts once no owner has changed its desire for this long...
	Quiet time.Duration
	// MaxWait: ...or once the oldest pending desire has waited this long.
	MaxWait time.Duration
	// Resync lists the zone again and re-plans every owner this often: records changed
	// behind the operator's back are repaired, released names are taken. The first
	// resync comes at a random point of the period's second half, so that the zones
	// of an account, which start together, are not all listed at once.
	Resync time.Duration
	// MaxBackoff caps the wait after a failed flush.
	MaxBackoff time.Duration
	// Log receives a line per flush at V(1), and one per orphan swept.
	Log logr.Logger
	// Orphaned, if set, tells whether records carrying an owner key are this
	// installation's and their owner no longer exists. On start and at every Resync,
	// the queue deletes such records: a crash between a deletion's API calls, or a
	// finalizer removed by hand, must not leave records behind for good.
	Orphaned func(owner string) bool
	// Swept, if set, is told how many records of an orphan were deleted.
	Swept func(owner string, records int)
	// Flushed, if set, is told of every flush that sent changes: how many, how long
	// the provider took to apply them, and its error.
	Flushed func(changes int, took time.Duration, err error)
}

func (o *Options) defaults() {
	if o.Quiet == 0 {
		o.Quiet = DefaultQuiet
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Resync == 0 {
		o.Resync = 5 * time.Minute
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 2 * time.Minute
	}
}

type owner struct {
	desired []providers.Record
	hash    uint64
	dirty   bool
	outcome Outcome
}

// Queue is the apply queue of one zone.
type Queue struct {
	provider providers.Provider
	zone     providers.Zone
	opts     Options
	notify   func(owner string, o Outcome)

	mu     sync.Mutex
	owners map[string]*owner
	// present are the owners that had records in the zone at the last listing (nil
	// before the first). An owner the queue does not know and that is not present
	// has nothing here: its empty desire is answered at once and not kept. Routes
	// declare an empty desire in every zone of their EdgeProviders (that is how
	// records left by an earlier spec go), and keeping those was 10 owners per route
	// over 10 zones.
	present map[string]struct{}
	// unlisted are the empty desires of owners the queue did not know, declared before
	// the zone's first listing: only their keys are kept, and the next flush answers
	// those with nothing here without planning them. An initial sync declares ten
	// such desires per route over 10 zones, and keeping each as an owner, with its
	// plan and outcome in the flush, was half the manager's heap at its peak.
	unlisted    map[string]struct{}
	sweep       bool // the next flush looks for orphans
	firstDirty  time.Time
	lastDesired time.Time
	expedite    bool
	// heldAll: the last flush, streaming, found no full batch and held every owner back.
	heldAll bool
	// flushing: a flush is listing or applying; progressAt: when a flush last applied
	// a change. See Progress.
	flushing   bool
	progressAt time.Time
	wake       chan struct{}
}

// New returns the queue of one zone. provider should be a providers.Cached shared by
// every queue of the account, so that a zone is listed once per resync. notify is
// called, outside any lock, when an owner's outcome changes.
func New(provider providers.Provider, zone providers.Zone, opts Options, notify func(owner string, o Outcome)) *Queue {
	opts.defaults()
	q := &Queue{provider: provider, zone: zone, opts: opts, notify: notify,
		owners: map[string]*owner{}, wake: make(chan struct{}, 1)}
	q.scheduleSweep()
	return q
}

// Zone is the queue's zone.
func (q *Queue) Zone() providers.Zone { return q.zone }

// Progress is when the queue was last seen moving records: now while a flush lists the
// zone or applies changes (a provider's rate limit makes one flush of a large backlog
// last many seconds, and its owners hear of it only at the end), else when a flush
// last applied a change. A queue in backoff after failed flushes stands still; a
// provider that hangs is cut off by its request timeout.
func (q *Queue) Progress() time.Time {
	at, _ := q.Moving()
	return at
}

// Moving is Progress, and whether a flush is under way now: when it ends, every owner
// whose outcome it changed is notified.
func (q *Queue) Moving() (at time.Time, flushing bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.flushing {
		return time.Now(), true
	}
	return q.progressAt, false
}

// Desire declares every record owner wants in the zone (none: delete what it owns) and
// returns the owner's outcome as it stands. A changed desire is applied by a later
// flush; the outcome is then reported through notify.
func (q *Queue) Desire(ownerKey string, desired []providers.Record) Outcome {
	return q.desire(ownerKey, desired, false)
}

// Retract declares that owner wants no record in the zone, when the caller knows it has
// some (it listed them): the desire is kept whatever the queue last saw.
func (q *Queue) Retract(ownerKey string) Outcome {
	return q.desire(ownerKey, nil, true)
}

func (q *Queue) desire(ownerKey string, desired []providers.Record, hasRecords bool) Outcome {
	normalised := make([]providers.Record, len(desired))
	for i, r := range desired {
		normalised[i] = q.provider.Normalize(r)
	}
	slices.SortFunc(normalised, func(a, b providers.Record) int {
		return strings.Compare(a.Name+" "+a.Type, b.Name+" "+b.Type)
	})
	h := hashRecords(normalised)

	q.mu.Lock()
	defer q.mu.Unlock()
	o, ok := q.owners[ownerKey]
	if !ok && len(normalised) == 0 && !hasRecords {
		if q.present == nil {
			if _, kept := q.unlisted[ownerKey]; !kept {
				if q.unlisted == nil {
					q.unlisted = map[string]struct{}{}
				}
				q.unlisted[ownerKey] = struct{}{}
				q.touch()
			}
			return Outcome{}
		}
		if _, has := q.present[ownerKey]; !has {
			return Outcome{Synced: true}
		}
	}
	if !ok {
		o = &owner{}
		q.owners[ownerKey] = o
		delete(q.unlisted, ownerKey) // this desire replaces an earlier empty one
	}
	// An unchanged desire is pending, applied, or being retried already; owners with
	// conflicts or rejected records are re-planned every Resync.
	if ok && o.hash == h {
		return o.outcome
	}
	o.desired, o.hash = normalised, h
	o.outcome.Synced = false
	q.markDirty(o)
	return o.outcome
}

// Expedite flushes every pending owner now, without waiting for the stream of desires
// to pause: a failover has declared all it will. With nothing pending it does nothing:
// kept until the next flush, it would send the first desire of the next burst alone.
func (q *Queue) Expedite() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.firstDirty.IsZero() {
		return
	}
	q.expedite = true
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Owners are the owners the queue knows: those that declared records since it
// started, applied or not.
func (q *Queue) Owners() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]string, 0, len(q.owners))
	for key := range q.owners {
		out = append(out, key)
	}
	return out
}

// Forget drops an owner whose records are gone, or whose deletion was abandoned. Its
// records may still be there (an abandoned deletion): until the zone is listed again
// it counts as present, so that a later empty desire (an EdgeProvider's deletion) is
// kept and deletes them.
func (q *Queue) Forget(ownerKey string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.owners, ownerKey)
	delete(q.unlisted, ownerKey)
	if q.present != nil {
		q.present[ownerKey] = struct{}{}
	}
}

// markDirty schedules o for the next flush; q.mu must be held.
func (q *Queue) markDirty(o *owner) {
	o.dirty = true
	q.touch()
}

// touch schedules a flush for a new desire; q.mu must be held.
func (q *Queue) touch() {
	now := time.Now()
	if q.firstDirty.IsZero() {
		q.firstDirty = now
	}
	q.lastDesired = now
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Run flushes until ctx is done.
func (q *Queue) Run(ctx context.Context) {
	var nextAttempt time.Time // after a failed flush, no new attempt before this
	backoff := time.Duration(0)
	// The queues of an account start together, with its EdgeProvider, and share its
	// rate limit: resyncing in step, every zone of a 100,000-route account was listed
	// at once (Route53: about 670 pages at 5 a second), and a failover that came then
	// waited over two minutes for its writes. Each queue's first resync comes at a
	// random point of the second half of the period, so the listings are spread out;
	// the period after it is the configured one, which keeps them apart.
	resync := time.NewTimer(q.opts.Resync/2 + rand.N(q.opts.Resync/2+1))
	defer resync.Stop()
	for {
		wait := max(q.untilFlush(), time.Until(nextAttempt))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-q.wake:
			timer.Stop()
			continue
		case <-resync.C:
			timer.Stop()
			resync.Reset(q.opts.Resync)
			q.resyncAll()
			continue
		case <-timer.C:
		}
		quiet, due := q.due()
		if !due || time.Now().Before(nextAttempt) {
			continue
		}
		// While desires keep arriving, only full batches go out; the remainder waits
		// for the stream to pause, so that a long stream costs the batch minimum.
		err := q.flush(ctx, !quiet)
		q.mu.Lock()
		heldAll := q.heldAll
		q.heldAll = false
		q.mu.Unlock()
		switch {
		case err == nil && heldAll:
			// Nothing filled a batch: planning every pending owner again at once would
			// only hold them again (the oldest desire is past MaxWait, so the queue is
			// due at once). The next try waits for Quiet: for more desires to fill a
			// batch, or for the stream to pause.
			backoff = q.opts.Quiet
		case err == nil:
			backoff = 0
		case providers.RetryAfter(err) > 0:
			backoff = providers.RetryAfter(err)
		default:
			backoff = min(max(2*backoff, time.Second), q.opts.MaxBackoff)
		}
		nextAttempt = time.Now().Add(backoff)
	}
}

// untilFlush is how long until pending desires are due (a day when none are).
func (q *Queue) untilFlush() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.firstDirty.IsZero() {
		return 24 * time.Hour
	}
	if q.expedite {
		return 0
	}
	now := time.Now()
	quiet := q.lastDesired.Add(q.opts.Quiet).Sub(now)
	maxWait := q.firstDirty.Add(q.opts.MaxWait).Sub(now)
	return max(0, min(quiet, maxWait))
}

// due reports whether desires are pending, and whether they stopped arriving.
func (q *Queue) due() (quiet, due bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.firstDirty.IsZero() {
		return false, false
	}
	// A trickle of desires never pauses for Quiet; what it holds back still goes out
	// once it has waited three times MaxWait.
	quiet = q.expedite || time.Since(q.lastDesired) >= q.opts.Quiet || time.Since(q.firstDirty) >= 3*q.opts.MaxWait
	return quiet, true
}

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

// Flush plans and applies every pending owner now; Run calls it when due.
func (q *Queue) Flush(ctx context.Context) error { return q.flush(ctx, false) }

// flush plans the pending owners against the zone and applies their changes. With
// fullBatchesOnly, only owners whose changes fill whole batches are applied; the
// others stay pending.
func (q *Queue) flush(ctx context.Context, fullBatchesOnly bool) error {
	q.mu.Lock()
	q.flushing = true
	defer func() {
		q.mu.Lock()
		q.flushing = false
		q.mu.Unlock()
	}()
	pendingSince := q.firstDirty
	batch := map[string][]providers.Record{}
	for key, o := range q.owners {
		if o.dirty {
			batch[key] = o.desired
			o.dirty = false
		}
	}
	unlisted := q.unlisted
	q.unlisted = nil
	q.firstDirty = time.Time{}
	q.expedite = false
	sweep := q.sweep
	q.sweep = false
	q.mu.Unlock()
	if len(batch) == 0 && len(unlisted) == 0 && !sweep {
		return nil
	}

	current, err := q.provider.ListRecords(ctx, q.zone)
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
	// Unlisted empty desires of owners with records here become owners of this
	// flush; the others are answered now. After a failed listing all of them are
	// owners, as the error is theirs too.
	if answered := q.adopt(unlisted, present, err != nil, batch); len(answered) > 0 && q.notify != nil {
		for _, key := range answered {
			q.notify(key, Outcome{Synced: true})
		}
	}
	outcomes := make(map[string]*Outcome, len(batch))
	for key := range batch {
		outcomes[key] = &Outcome{}
	}
	if err != nil {
		// What the zone holds is unknown until it is listed again: every empty desire
		// is kept meanwhile.
		q.mu.Lock()
		q.present = nil
		q.mu.Unlock()
		for _, o := range outcomes {
			o.Err = err
		}
		q.finish(batch, outcomes, nil, false)
		if sweep {
			q.mu.Lock()
			q.scheduleSweep() // look again once the zone can be listed
			q.mu.Unlock()
		}
		return err
	}
	var orphans []string
	if sweep {
		orphans = q.orphansIn(current, batch)
		for _, key := range orphans {
			batch[key] = nil // desire nothing: its records are deleted
			outcomes[key] = &Outcome{}
		}
	}

	// Plan owners in a stable order; a name created or updated by one owner in this
	// flush is a conflict for any other.
	keys := make([]string, 0, len(batch))
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
	byOwner := make(map[string][]providers.Record, len(batch))
	for _, r := range current {
		if wanted[r.Name] {
			byName[r.Name] = append(byName[r.Name], r)
		}
		if _, ok := batch[r.Owner]; ok && r.Owner != "" {
			byOwner[r.Owner] = append(byOwner[r.Owner], r)
		}
	}
	claimed := map[string]string{}
	perOwner := map[string][]providers.Change{}
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
	var held []string
	if fullBatchesOnly {
		keys, held = q.fillBatches(keys, perOwner)
		q.hold(held, pendingSince)
		for _, key := range held {
			delete(batch, key)
			delete(outcomes, key)
		}
	}
	var changes []providers.Change
	for _, key := range keys {
		changes = append(changes, perOwner[key]...)
	}
	if len(held) > 0 && len(changes) == 0 {
		q.mu.Lock()
		q.heldAll = true
		q.mu.Unlock()
	}

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
	q.opts.Log.V(1).Info("flushed", "zone", q.zone.Name, "owners", len(keys), "changes", len(changes),
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
	counted := true
	if applyErr == nil {
		// Every change's answer is known: what each owner has now is what it had plus
		// what was applied, without listing (and re-sorting) the zone again.
		for key, out := range outcomes {
			out.Records = len(byOwner[key])
		}
		for _, c := range res.Applied {
			if c.Old != nil {
				if out, ok := outcomes[c.Old.Owner]; ok {
					out.Records--
				}
			}
			if c.New != nil {
				if out, ok := outcomes[c.New.Owner]; ok {
					out.Records++
				}
			}
		}
	} else if after, err := q.provider.ListRecords(ctx, q.zone); err == nil {
		// A batch may have been applied with its answer lost: the zone, listed again,
		// says what is there.
		for _, r := range after {
			if out, ok := outcomes[r.Owner]; ok {
				out.Records++
			}
		}
	} else {
		counted = false
	}
	q.finish(batch, outcomes, res.Applied, counted)
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
			q.sweep = true // not all gone: the next flush tries again
			q.mu.Unlock()
		}
	}
	return applyErr
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

// fillBatches splits owners, in order, into those whose changes fill whole batches
// and those held back for a later flush. Owners without changes are never held.
func (q *Queue) fillBatches(keys []string, perOwner map[string][]providers.Change) (send, held []string) {
	b, ok := q.provider.(providers.Batched)
	if !ok {
		return keys, nil
	}
	limit := b.BatchLimit()
	var total providers.Cost
	costs := map[string]providers.Cost{}
	for _, key := range keys {
		var c providers.Cost
		for _, ch := range perOwner[key] {
			cc := b.ChangeCost(ch)
			c.Records, c.Chars = c.Records+cc.Records, c.Chars+cc.Chars
		}
		costs[key] = c
		total.Records, total.Chars = total.Records+c.Records, total.Chars+c.Chars
	}
	batches := fullBatches(total.Records, limit.Records)
	if limit.Chars > 0 {
		batches = min(batches, fullBatches(total.Chars, limit.Chars))
	}
	var used providers.Cost
	for _, key := range keys {
		c := costs[key]
		next := providers.Cost{Records: used.Records + c.Records, Chars: used.Chars + c.Chars}
		fits := (limit.Records == 0 || next.Records <= batches*limit.Records) && (limit.Chars == 0 || next.Chars <= batches*limit.Chars)
		if c.Records == 0 || fits {
			send = append(send, key)
			used = next
		} else {
			held = append(held, key)
		}
	}
	return send, held
}

func fullBatches(total, limit int) int {
	if limit == 0 {
		return 1 << 30
	}
	return total / limit
}

// hold puts owners back in the queue for the next flush; they keep the age of their
// desires, so that a trickle cannot hold them back forever.
func (q *Queue) hold(keys []string, pendingSince time.Time) {
	if len(keys) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, key := range keys {
		if o, ok := q.owners[key]; ok {
			o.dirty = true
		}
	}
	if q.firstDirty.IsZero() || pendingSince.Before(q.firstDirty) {
		q.firstDirty = pendingSince
	}
}

// finish records the outcomes, keeps owners with an error pending, marks owners that
// lost a name to a deletion of this flush for another try, and notifies changes.
// counted says that each outcome's Records was read from a listing after the apply;
// only then is an owner left with nothing dropped.
func (q *Queue) finish(batch map[string][]providers.Record, outcomes map[string]*Outcome, applied []providers.Change, counted bool) {
	released := map[string]bool{}
	for _, c := range applied {
		if c.Action == providers.Delete {
			released[c.Old.Name] = true
		}
	}
	type note struct {
		owner   string
		outcome Outcome
	}
	var notes []note
	q.mu.Lock()
	for key, out := range outcomes {
		o, ok := q.owners[key]
		if !ok {
			continue
		}
		out.Synced = out.Err == nil && !o.dirty
		if out.Err != nil && out.Records == 0 {
			out.Records = o.outcome.Records // unknown during a failure: the last count stands
		}
		if out.Err != nil {
			// Retried by the next flush, after the backoff.
			q.markDirty(o)
		}
		changed := o.outcome.summary() != out.summary() || len(out.Applied) > 0
		if changed {
			notes = append(notes, note{key, *out})
		}
		// The applied changes are news for the notification only: kept, they held a
		// copy of every owner's last records.
		o.outcome = *out
		o.outcome.Applied = nil
		if counted && len(o.desired) == 0 && !o.dirty && out.Synced && out.Records == 0 && len(out.Conflicts) == 0 && len(out.Failed) == 0 {
			// Nothing wanted and nothing left: known again only if it wants records here.
			delete(q.owners, key)
		}
	}
	// Only a deletion can free a name that another owner waits for: without one, the
	// walk over every owner (each flush, thousands of owners) is skipped.
	for _, o := range q.owners {
		if len(released) == 0 {
			break
		}
		for _, c := range o.outcome.Conflicts {
			if released[c.Desired.Name] {
				q.markDirty(o)
				break
			}
		}
	}
	q.mu.Unlock()
	if q.notify != nil {
		for _, n := range notes {
			q.notify(n.owner, n.outcome)
		}
	}
}

// hashRecords is FNV-1a over each record as "name|type|ttl|proxied|v1,v2\n". Every
// desire is hashed, a failover's 100,000 routes in one pass, so it allocates nothing:
// formatting each record into the hash was 2% of such a failover's allocation.
func hashRecords(rs []providers.Record) uint64 {
	h := fnv64a(fnvOffset64)
	var num [24]byte
	for _, r := range rs {
		h = h.str(r.Name).byte('|').str(r.Type).byte('|')
		h = h.bytes(strconv.AppendInt(num[:0], r.TTL, 10)).byte('|')
		h = h.bytes(strconv.AppendBool(num[:0], r.Proxied)).byte('|')
		for i, v := range r.Values {
			if i > 0 {
				h = h.byte(',')
			}
			h = h.str(v)
		}
		h = h.byte('\n')
	}
	return uint64(h)
}

// fnv64a is the state of an FNV-1a hash (hash/fnv's, without its allocation).
type fnv64a uint64

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func (h fnv64a) byte(b byte) fnv64a { return (h ^ fnv64a(b)) * fnvPrime64 }

func (h fnv64a) str(s string) fnv64a {
	for i := 0; i < len(s); i++ {
		h = h.byte(s[i])
	}
	return h
}

func (h fnv64a) bytes(b []byte) fnv64a {
	for _, c := range b {
		h = h.byte(c)
	}
	return h
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
