// Package zonequeue coalesces the record changes of many owners (TenantRoutes) in one
// zone into the provider's batches.
//
// Owners declare what they want (Desire) and return at once; the queue plans every
// owner that changed against one cached listing of the zone and applies all their
// changes together, so that 10,000 TenantRoutes mean a handful of batch requests, not
// 10,000 single-record writes. When an owner's outcome changes, the queue says so
// through its notify callback, so the controller can report it.
//
// The files follow a desire through the queue: queue.go takes desires (Desire,
// Retract, Forget), run.go decides when a flush starts, flush.go runs its phases
// (take, list, plan, apply), batches.go says what fills a request and holds back what would not fill one while
// desires stream in, report.go counts and notifies each owner's outcome, and
// resync.go lists the zone again and sweeps the records of owners that are gone.
package zonequeue

import (
	"slices"
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
	// Unlisted: the desire is empty and the zone has not been read yet, so whether the
	// owner has records in it to delete is not known; the first listing answers it
	// through notify. With Err, the last listing failed: the next flush tries again.
	Unlisted bool
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
	// MaxWait: ...or once the oldest pending desire has waited this long. Pending
	// desires that fill a request go out at once, whatever these say.
	MaxWait time.Duration
	// Resync lists the zone again and re-plans every owner this often: records changed
	// behind the operator's back are repaired, released names are taken. The first
	// resync comes at a random point of the period's second half, so that the zones
	// of an account, which start together, are not all listed at once.
	Resync time.Duration
	// MaxBackoff caps the wait after a failed flush (default 30 s). It bounds how
	// long after a provider's outage the queue notices it answers again: at two
	// minutes, a 10-minute Route53 outage was over for up to two minutes before the
	// records moved. Each try is one write (with the SDK's own retries), so the
	// shorter cap costs a zone two tries a minute while its provider is down.
	MaxBackoff time.Duration
	// MaxRefusedBackoff caps it instead once the zone's listing has failed this long
	// (default 5 minutes) and its last failure is one retrying does not fix (access
	// denied, zone gone): every try then costs a request at the account's rate limit,
	// for nothing. A refusal that passes (an IAM policy propagating, the token
	// service of the default credentials down) is still met within MaxBackoff for
	// its first minutes. The EdgeProvider says ZoneUnreadable meanwhile.
	MaxRefusedBackoff time.Duration
	// Log receives a line per flush at V(1), one per orphan swept, and one when the
	// zone's listing fails, fails differently or recovers (each retry at V(1)).
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
	// Readable, if set, is told of the first listing's result (nil or its error) and
	// then of every change: the error of a failed listing after a successful one, nil
	// after a successful listing that follows a failed one. A zone that cannot be
	// listed holds up only the routes waiting for it to be read, so without it nothing
	// on the EdgeProvider would say so. Listed says the same at any time.
	Readable func(err error)
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
		o.MaxBackoff = 30 * time.Second
	}
	if o.MaxRefusedBackoff == 0 {
		o.MaxRefusedBackoff = 5 * time.Minute
	}
}

// owner is what a queue keeps of each owner for as long as it has records or desires in
// the zone: 200,000 of them at 100,000 routes over two providers, so it is kept small.
type owner struct {
	desired []providers.Record
	hash    uint64
	dirty   bool
	synced  bool
	// release: the owner's records stay in the zone without its marker (Release).
	release bool
	records int32
	// issues are the last outcome's conflicts, rejected changes and error, nil when it
	// had none: most owners never have any, and an Outcome inline was 96 bytes an owner.
	issues *issues
}

type issues struct {
	conflicts []providers.Conflict
	failed    []providers.Failure
	err       error
}

// outcome is the owner's last outcome, without its applied changes.
func (o *owner) outcome() Outcome {
	out := Outcome{Synced: o.synced, Records: int(o.records)}
	if o.issues != nil {
		out.Conflicts, out.Failed, out.Err = o.issues.conflicts, o.issues.failed, o.issues.err
	}
	return out
}

// setOutcome keeps out, without its applied changes: they are news for the
// notification only, and kept they held a copy of every owner's last records.
func (o *owner) setOutcome(out Outcome) {
	o.synced, o.records, o.issues = out.Synced, int32(out.Records), nil
	if len(out.Conflicts) > 0 || len(out.Failed) > 0 || out.Err != nil {
		o.issues = &issues{conflicts: out.Conflicts, failed: out.Failed, err: out.Err}
	}
}

// conflicts are the desired records another owner holds, as of the last outcome.
func (o *owner) conflicts() []providers.Conflict {
	if o.issues == nil {
		return nil
	}
	return o.issues.conflicts
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
	unlisted map[string]struct{}
	// listErr is why the zone's last listing failed, told to the unlisted desires
	// while it cannot be read; nil once it is.
	listErr error
	// unreadableSince is when listErr turned non-nil.
	unreadableSince time.Time
	sweep           bool // the next flush looks for orphans
	resyncing       bool // the next flush lists the zone again for a resync
	// resyncAsked is when the pending resync was asked for; dropListing ends the
	// resync's listing in progress, nil when none can be dropped. See mayDefer.
	resyncAsked time.Time
	dropListing func()
	firstDirty  time.Time
	lastDesired time.Time
	expedite    bool
	// pendingCost estimates what the pending owners' changes take of requests, each
	// desire counted as created; full: it fills a request, and the queue flushes
	// whole requests without waiting for the stream of desires to pause.
	pendingCost providers.Cost
	full        bool
	// heldAll: the last flush, streaming, found no full batch and held every owner back.
	heldAll bool
	// recentValues are the value lists of the last desires kept, shared by the desires
	// with the same values (see shareValues).
	recentValues [recentValueLists]valueList
	remembered   int
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

// Listed tells whether the queue has tried to list the zone yet, and why its last
// listing failed (nil if it succeeded).
func (q *Queue) Listed() (tried bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.present != nil || q.listErr != nil, q.listErr
}

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
	return q.desire(ownerKey, desired, false, false)
}

// Retract declares that owner wants no record in the zone, when the caller knows it has
// some (it listed them): the desire is kept whatever the queue last saw.
func (q *Queue) Retract(ownerKey string) Outcome {
	return q.desire(ownerKey, nil, true, false)
}

// Release declares that owner's records stay in the zone as they are but are no longer
// its own: a later flush writes them without the owner's marker, after which no
// owner, no orphan sweep and no other queue of this installation changes them. The
// owner holds no record once that is applied (Outcome.Records 0), as after a retract.
// A later desire of the owner replaces the release.
func (q *Queue) Release(ownerKey string) Outcome {
	return q.desire(ownerKey, nil, false, true)
}

func (q *Queue) desire(ownerKey string, desired []providers.Record, hasRecords, release bool) Outcome {
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
		switch {
		case q.present == nil && release:
			// Not listed yet: the release waits for the listing as an owner of its own
			// (an unlisted empty desire would delete the records it finds).
		case q.present == nil:
			if _, kept := q.unlisted[ownerKey]; !kept {
				if q.unlisted == nil {
					q.unlisted = map[string]struct{}{}
				}
				q.unlisted[ownerKey] = struct{}{}
				q.touch()
			}
			return Outcome{Unlisted: true, Err: q.listErr}
		default:
			if _, has := q.present[ownerKey]; !has {
				return Outcome{Synced: true}
			}
		}
	}
	if !ok {
		o = &owner{}
		q.owners[ownerKey] = o
		delete(q.unlisted, ownerKey) // this desire replaces an earlier empty one
	}
	// An unchanged desire is pending, applied, or being retried already; owners with
	// conflicts or rejected records are re-planned every Resync.
	if ok && o.hash == h && o.release == release {
		return o.outcome()
	}
	o.desired, o.hash, o.release = q.shareValues(normalised), h, release
	o.synced = false
	q.markDirty(o)
	return o.outcome()
}

// keepUnlistedLocked puts unlisted desires back in the queue, but for owners that
// declared records since, and returns those it kept. q.mu must be held.
func (q *Queue) keepUnlistedLocked(unlisted map[string]struct{}) (kept []string) {
	for key := range unlisted {
		if _, known := q.owners[key]; known {
			continue
		}
		if q.unlisted == nil {
			q.unlisted = map[string]struct{}{}
		}
		q.unlisted[key] = struct{}{}
		kept = append(kept, key)
	}
	if len(kept) > 0 {
		q.touch()
	}
	return kept
}

// recentValueLists is how many distinct value lists a queue remembers for sharing:
// the routes of a zone point at the few edges of their regions.
const recentValueLists = 8

// valueList is a value list remembered for sharing, how often it was shared, and when
// it was remembered (a count of lists remembered).
type valueList struct {
	values []string
	hits   int
	at     int
}

// shareValues gives records whose values equal those of a recent desire that desire's
// list, so that the thousands of routes of a zone that point at one edge hold one copy
// of its addresses (normalising an address makes a new string each time). A list that
// is not shared replaces the least shared one, the oldest of those: per-route targets
// (a hostname template) churn through the slots of lists never shared while the
// edges' lists stay, and counts are halved now and then, so that the list of an edge
// whose addresses changed goes too. Values of kept desires are never changed in
// place: Normalize and Clone copy them. q.mu must be held.
func (q *Queue) shareValues(records []providers.Record) []providers.Record {
	for i := range records {
		values := records[i].Values
		if len(values) == 0 {
			continue
		}
		least := 0
		for j := range q.recentValues {
			l := &q.recentValues[j]
			if slices.Equal(l.values, values) {
				records[i].Values = l.values
				if l.hits++; l.hits >= 1<<10 {
					for k := range q.recentValues {
						q.recentValues[k].hits /= 2
					}
				}
				least = -1
				break
			}
			if m := &q.recentValues[least]; l.hits < m.hits || l.hits == m.hits && l.at < m.at {
				least = j
			}
		}
		if least >= 0 {
			q.remembered++
			q.recentValues[least] = valueList{values: values, at: q.remembered}
		}
	}
	return records
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

// Holds tells whether the owner's desire here is not in place yet and has met no
// error, conflict or rejection: the queue notifies the owner when that changes.
func (q *Queue) Holds(ownerKey string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	o, ok := q.owners[ownerKey]
	return ok && !o.synced && o.issues == nil
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
	if !o.dirty {
		lim := q.limits()
		q.addPending(lim, o)
		// Waiting for a stream of desires to pause buys nothing once a request's worth
		// is pending: at the start of a 10,000-route sync it held every zone's first
		// request, and so every route's Ready, until the last route was planned.
		q.full = q.full || lim.over(q.pendingCost)
	}
	o.dirty = true
	if q.dropListing != nil && q.mayDefer() {
		q.dropListing()
		q.dropListing = nil
	}
	q.touch()
}

// addPending counts o's desire in pendingCost, as created (a deletion as one record:
// its records are not known here); q.mu must be held.
func (q *Queue) addPending(lim limits, o *owner) {
	if lim.batched == nil {
		return
	}
	if len(o.desired) == 0 {
		q.pendingCost.Records++
		return
	}
	for i := range o.desired {
		c := lim.batched.ChangeCost(providers.Change{Action: providers.Create, New: &o.desired[i]})
		q.pendingCost.Records += c.Records
		q.pendingCost.Chars += c.Chars
	}
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
