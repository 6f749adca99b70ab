package zonequeue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// memProvider is an atomic in-memory zone that counts calls.
type memProvider struct {
	mu      sync.Mutex
	records map[providers.Key]providers.Record
	lists   int
	applies int
	tries   int // applies asked, failed ones included
	changes int
	fail    error
	// listFail fails every listing while set; listTries counts every listing asked.
	listFail  error
	listTries int
}

func newMem() *memProvider { return &memProvider{records: map[providers.Key]providers.Record{}} }

func (m *memProvider) Name() string { return "mem" }
func (m *memProvider) ResolveZone(_ context.Context, z providers.Zone) (providers.Zone, error) {
	return z, nil
}
func (m *memProvider) Normalize(r providers.Record) providers.Record {
	return providers.NormalizeCommon(r)
}
func (m *memProvider) ListRecords(context.Context, providers.Zone) ([]providers.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listTries++
	if m.listFail != nil {
		return nil, m.listFail
	}
	m.lists++
	var out []providers.Record
	for _, r := range m.records {
		out = append(out, r)
	}
	return out, nil
}
func (m *memProvider) ApplyChanges(_ context.Context, _ providers.Zone, changes []providers.Change) (providers.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tries++
	if m.fail != nil {
		return providers.Result{}, m.fail
	}
	m.applies += (len(changes) + 199) / 200
	m.changes += len(changes)
	for _, c := range changes {
		if c.Old != nil {
			delete(m.records, c.Old.Key())
		}
		if c.New != nil {
			m.records[c.New.Key()] = *c.New
		}
	}
	return providers.Result{Applied: changes}, nil
}

func cname(name string) []providers.Record {
	return []providers.Record{{Name: name, Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}}}
}

type notes struct {
	mu  sync.Mutex
	got map[string]Outcome
}

func (n *notes) record(owner string, o Outcome) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got[owner] = o
}

func (n *notes) of(owner string) (Outcome, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	o, ok := n.got[owner]
	return o, ok
}

func setup() (*memProvider, *Queue, *notes) {
	mem := newMem()
	n := &notes{got: map[string]Outcome{}}
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{}, n.record)
	return mem, q, n
}

func TestManyOwnersShareOneListAndFewBatches(t *testing.T) {
	mem, q, n := setup()
	for i := range 1000 {
		if out := q.Desire(fmt.Sprintf("o%04d", i), cname(fmt.Sprintf("t%04d.example.com", i))); out.Synced {
			t.Fatal("synced before any flush")
		}
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if mem.lists != 1 || mem.applies != 5 || mem.changes != 1000 {
		t.Errorf("1000 owners: %d lists, %d batches, %d changes; want 1 (the counts after the apply come from it), 5, 1000", mem.lists, mem.applies, mem.changes)
	}
	out, ok := n.of("o0042")
	if !ok || !out.Synced || out.Records != 1 || len(out.Applied) != 1 {
		t.Errorf("owner outcome %+v (notified %t)", out, ok)
	}
	// The same desire again changes nothing and flushes nothing.
	if out := q.Desire("o0042", cname("t0042.example.com")); !out.Synced {
		t.Errorf("unchanged desire: %+v", out)
	}
	before := mem.applies
	_ = q.Flush(context.Background())
	if mem.applies != before {
		t.Error("a flush with nothing pending wrote")
	}
}

// A queue holds an owner's desire from its declaration until a flush places it, and
// not while it is retried after an error, which the owner was told of: the controller
// skips the reconcile of a route's other answers only while one is still to come.
func TestHoldsADesireUntilItsAnswer(t *testing.T) {
	mem, q, _ := setup()
	if q.Holds("o") {
		t.Fatal("holds an owner that declared nothing")
	}
	q.Desire("o", cname("t.example.com"))
	if !q.Holds("o") {
		t.Fatal("does not hold a desire not applied yet")
	}
	_ = q.Flush(context.Background())
	if q.Holds("o") {
		t.Fatal("holds a desire in place")
	}
	q.Desire("o", cname("u.example.com"))
	mem.mu.Lock()
	mem.fail = errors.New("throttled")
	mem.mu.Unlock()
	_ = q.Flush(context.Background())
	if q.Holds("o") {
		t.Fatal("holds a desire whose flush failed: the owner heard of the error, and no answer is due")
	}
	q.Desire("p", nil)
	if q.Holds("p") {
		t.Fatal("holds an empty desire with nothing to delete")
	}
}

func TestOneNameClaimedByTwoOwnersInOneFlush(t *testing.T) {
	mem, q, n := setup()
	q.Desire("a", cname("shared.example.com"))
	q.Desire("b", cname("shared.example.com"))
	_ = q.Flush(context.Background())
	a, _ := n.of("a")
	b, _ := n.of("b")
	if len(a.Conflicts) != 0 || len(b.Conflicts) != 1 || mem.records[providers.Key{Name: "shared.example.com", Type: "CNAME"}].Owner != "a" {
		t.Fatalf("a: %+v\nb: %+v", a, b)
	}
	// a lets go: b is re-planned without being asked and takes the name.
	q.Desire("a", nil)
	_ = q.Flush(context.Background()) // a deletes
	_ = q.Flush(context.Background()) // b, marked again by the release
	b, _ = n.of("b")
	if len(b.Conflicts) != 0 || b.Records != 1 || mem.records[providers.Key{Name: "shared.example.com", Type: "CNAME"}].Owner != "b" {
		t.Fatalf("after a released the name, b: %+v", b)
	}
}

func TestTransientErrorIsRetriedByRun(t *testing.T) {
	mem, _, n := setup()
	outage := &providers.Error{Provider: "mem", Op: "ApplyChanges", Kind: providers.Transient, Err: errors.New("503")}
	mem.fail = outage
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{Quiet: time.Millisecond, MaxWait: time.Millisecond}, n.record)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	q.Desire("a", cname("a.example.com"))
	waitFor(t, func() bool { o, _ := n.of("a"); return errors.Is(o.Err, outage) })
	mem.mu.Lock()
	mem.fail = nil
	mem.mu.Unlock()
	waitFor(t, func() bool { o, _ := n.of("a"); return o.Synced && o.Err == nil && o.Records == 1 })
}

// A refusal that asks to wait a millisecond (Retry-After-Ms: 1, Retry-After: 0.001)
// does not have the zone tried again a thousand times a second: the account's request
// budget is every zone's, a failover's writes included.
func TestATinyRetryAfterDoesNotSkipTheBackoff(t *testing.T) {
	mem, _, n := setup()
	mem.fail = &providers.Error{Provider: "mem", Op: "ApplyChanges", Kind: providers.Transient, Refused: true,
		RetryAfter: time.Millisecond, Err: errors.New("429")}
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{Quiet: time.Millisecond, MaxWait: time.Millisecond}, n.record)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	q.Desire("a", cname("a.example.com"))
	time.Sleep(2500 * time.Millisecond) // the backoff's first two steps: 1 s, then 2 s
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.tries > 3 {
		t.Errorf("%d writes in 2.5 s to a provider asking to wait 1 ms, want the backoff's 2 or 3", mem.tries)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type batchedMem struct{ *memProvider }

func (batchedMem) BatchLimit() providers.Cost                 { return providers.Cost{Records: 200} }
func (batchedMem) ChangeCost(providers.Change) providers.Cost { return providers.Cost{Records: 1} }

func TestWhileDesiresArriveOnlyFullBatchesGoOut(t *testing.T) {
	mem := newMem()
	q := New(batchedMem{mem}, providers.Zone{Name: "example.com", ID: "z"}, Options{}, nil)
	for i := range 450 {
		q.Desire(fmt.Sprintf("o%04d", i), cname(fmt.Sprintf("t%04d.example.com", i)))
	}
	if err := q.flush(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if mem.changes != 400 || mem.applies != 2 {
		t.Fatalf("busy flush applied %d changes in %d batches, want 400 in 2", mem.changes, mem.applies)
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if mem.changes != 450 || mem.applies != 3 {
		t.Fatalf("quiet flush: %d changes in %d batches, want 450 in 3", mem.changes, mem.applies)
	}
}

// BenchmarkFlushFailover10000: every owner of a zone of 10,000 records changes its
// target at once, as in a failover; the plan must stay linear in the zone size.
//
//	go test -run '^$' -bench Flush -benchtime 3x ./providers/zonequeue/
func BenchmarkFlushFailover10000(b *testing.B) {
	mem := newMem()
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{}, nil)
	target := func(i, edge int) []providers.Record {
		return []providers.Record{{Name: fmt.Sprintf("t%05d.example.com", i), Type: providers.TypeCNAME, TTL: 60,
			Values: []string{fmt.Sprintf("edge%d.example.net", edge)}}}
	}
	for i := range 10000 {
		q.Desire(fmt.Sprintf("o%05d", i), target(i, 0))
	}
	if err := q.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for n := range b.N {
		for i := range 10000 {
			q.Desire(fmt.Sprintf("o%05d", i), target(i, n+1))
		}
		if err := q.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if mem.changes != 10000*(b.N+1) {
		b.Fatalf("%d changes applied", mem.changes)
	}
}

func TestResyncRepairsRecordsChangedBehindTheOperatorsBack(t *testing.T) {
	mem, q, n := setup()
	q.Desire("a", cname("a.example.com"))
	_ = q.Flush(context.Background())
	mem.mu.Lock()
	delete(mem.records, providers.Key{Name: "a.example.com", Type: providers.TypeCNAME})
	mem.mu.Unlock()
	// The same desire again is not news...
	if out := q.Desire("a", cname("a.example.com")); !out.Synced {
		t.Fatalf("unchanged desire: %+v", out)
	}
	// ...but the periodic resync re-plans every owner against a fresh listing.
	q.resyncAll()
	_ = q.Flush(context.Background())
	if _, ok := mem.records[providers.Key{Name: "a.example.com", Type: providers.TypeCNAME}]; !ok {
		t.Fatal("the deleted record was not recreated by the resync")
	}
	if out, _ := n.of("a"); out.Records != 1 || !out.Synced {
		t.Errorf("outcome after the repair: %+v", out)
	}
}

func TestHeldBackOwnersGoOutAfterThreeMaxWaits(t *testing.T) {
	_, q, _ := setup()
	q.Desire("a", cname("a.example.com"))
	q.mu.Lock()
	q.lastDesired = time.Now()                                     // the stream has not paused...
	q.firstDirty = time.Now().Add(-3*q.opts.MaxWait - time.Second) // ...but this desire is old
	q.mu.Unlock()
	if quiet, due := q.due(); !due || !quiet {
		t.Errorf("an old desire under a trickle: due %t, full flush %t; want both", due, quiet)
	}
}

// A route declares an empty desire in every zone of its EdgeProviders so that records
// left by an earlier spec go. In a zone where the owner has no record, that desire is
// answered at once and not kept (10 zones would otherwise keep 10 owners per route);
// where it has records, before the zone was first listed as well, they are deleted.
func TestEmptyDesiresAreKeptOnlyWhereTheOwnerHasRecords(t *testing.T) {
	mem, q, _ := setup()
	q.Desire("a", cname("a.example.com"))
	q.Desire("b", cname("b.example.com"))
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	// A restarted operator: a new queue that has not listed the zone yet.
	n := &notes{got: map[string]Outcome{}}
	q2 := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{}, n.record)
	if out := q2.Desire("a", nil); out.Synced {
		t.Fatalf("before the first listing, an empty desire was answered synced: %+v", out)
	}
	if out := q2.Desire("never", nil); out.Synced {
		t.Fatalf("before the first listing, an unknown owner's empty desire was answered synced: %+v", out)
	}
	if err := q2.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, left := mem.records[providers.Key{Name: "a.example.com", Type: "CNAME"}]; left {
		t.Fatal("a's record was not deleted")
	}
	if out, _ := n.of("a"); !out.Synced || out.Records != 0 {
		t.Errorf("a after its deletion: %+v", out)
	}
	if owners := q2.Owners(); len(owners) != 0 {
		t.Errorf("owners kept with nothing wanted and nothing left: %v", owners)
	}

	// Listed now: an owner without records here is answered at once, not kept, and
	// costs no flush.
	before := mem.changes
	for i := range 1000 {
		if out := q2.Desire(fmt.Sprintf("elsewhere%d", i), nil); !out.Synced || out.Records != 0 {
			t.Fatalf("an owner without records here: %+v", out)
		}
	}
	if owners := q2.Owners(); len(owners) != 0 {
		t.Errorf("%d owners kept for empty desires", len(owners))
	}
	_ = q2.Flush(context.Background())
	if mem.changes != before {
		t.Error("empty desires of owners without records wrote")
	}

	// b had a record at the listing and was never declared to this queue: its empty
	// desire is kept and its record deleted.
	if out := q2.Desire("b", nil); out.Synced {
		t.Fatalf("b has a record here, yet its empty desire was answered synced: %+v", out)
	}
	_ = q2.Flush(context.Background())
	if _, left := mem.records[providers.Key{Name: "b.example.com", Type: "CNAME"}]; left {
		t.Fatal("b's record was not deleted")
	}
}

// What the queue last listed stops counting when it may be wrong: an owner forgotten
// with its records still there (an abandoned deletion) and every owner after a failed
// listing keep their empty desires, and their records go.
func TestEmptyDesiresAreKeptWhenTheListingMayBeStale(t *testing.T) {
	mem, q, _ := setup()
	q.Desire("seed", cname("seed.example.com"))
	_ = q.Flush(context.Background()) // listed: present = {}
	q.Desire("abandoned", cname("abandoned.example.com"))
	_ = q.Flush(context.Background())
	q.Forget("abandoned") // its deletion gave up while the zone was unreachable
	if out := q.Desire("abandoned", nil); out.Synced {
		t.Fatalf("a forgotten owner with records: %+v", out)
	}
	_ = q.Flush(context.Background())
	if _, left := mem.records[providers.Key{Name: "abandoned.example.com", Type: "CNAME"}]; left {
		t.Fatal("the forgotten owner's record was not deleted")
	}

	// A record the queue did not see being made (another replica of the queue, before a
	// leader change), then a listing that fails: nothing is answered from the old listing.
	mem.mu.Lock()
	mem.records[providers.Key{Name: "late.example.com", Type: "CNAME"}] = providers.Record{Name: "late.example.com", Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}, Owner: "late"}
	mem.listFail = errors.New("zone unreachable")
	mem.mu.Unlock()
	q.Desire("seed", cname("seed2.example.com"))
	if err := q.Flush(context.Background()); err == nil {
		t.Fatal("a flush with a failing listing succeeded")
	}
	if out := q.Desire("late", nil); out.Synced {
		t.Fatalf("after a failed listing, an empty desire was answered from the listing before: %+v", out)
	}
	mem.mu.Lock()
	mem.listFail = nil
	mem.mu.Unlock()
	_ = q.Flush(context.Background())
	if _, left := mem.records[providers.Key{Name: "late.example.com", Type: "CNAME"}]; left {
		t.Fatal("late's record was not deleted")
	}
}

// TestAStreamDoesNotReplanInALoop: while desires trickle in without filling a batch,
// the oldest past MaxWait makes the queue due at once; a flush then holds every owner
// back, and the queue used to plan them all again immediately, over and over (the
// flushes were most of the manager's CPU in a 10,000-route sync). It now tries again
// after Quiet, and everything goes out once the stream pauses.
func TestAStreamDoesNotReplanInALoop(t *testing.T) {
	mem := newMem()
	q := New(batchedMem{mem}, providers.Zone{Name: "example.com", ID: "z"},
		Options{Quiet: 300 * time.Millisecond, MaxWait: 50 * time.Millisecond, Resync: time.Hour}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	const n = 75
	for i := range n { // 1.5 s of desires, 20 ms apart: never quiet, never a full batch
		q.Desire(fmt.Sprintf("o%04d", i), cname(fmt.Sprintf("t%04d.example.com", i)))
		time.Sleep(20 * time.Millisecond)
	}
	mem.mu.Lock()
	lists := mem.lists
	mem.mu.Unlock()
	// 1.5 s of stream: one try per Quiet after the first MaxWait, at most about 6.
	if lists > 12 {
		t.Fatalf("%d plans of the pending owners during a 1.5 s stream, want at most 12", lists)
	}
	waitFor(t, func() bool {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		return mem.changes == n
	})
}

// gatedMem holds every ApplyChanges until the gate opens.
type gatedMem struct {
	*memProvider
	entered chan struct{}
	gate    chan struct{}
}

func (g gatedMem) ApplyChanges(ctx context.Context, z providers.Zone, changes []providers.Change) (providers.Result, error) {
	g.entered <- struct{}{}
	<-g.gate
	return g.memProvider.ApplyChanges(ctx, z, changes)
}

// Progress says a queue moves while a flush is with the provider, and when it last
// applied something once it stands still, failed flushes not counting.
func TestProgressFollowsTheFlushes(t *testing.T) {
	g := gatedMem{memProvider: newMem(), entered: make(chan struct{}), gate: make(chan struct{})}
	q := New(g, providers.Zone{Name: "example.com", ID: "z"}, Options{}, func(string, Outcome) {})
	if at := q.Progress(); !at.IsZero() {
		t.Fatalf("a queue that never flushed moved at %s", at)
	}
	q.Desire("a", cname("a.example.com"))
	done := make(chan error)
	go func() { done <- q.Flush(context.Background()) }()
	<-g.entered
	time.Sleep(50 * time.Millisecond)
	if at := q.Progress(); time.Since(at) > 10*time.Millisecond {
		t.Errorf("during a flush, Progress is %s old", time.Since(at))
	}
	close(g.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	applied := q.Progress()
	time.Sleep(50 * time.Millisecond)
	if at := q.Progress(); at != applied || time.Since(at) < 50*time.Millisecond {
		t.Errorf("after the flush, Progress moved to %s (applied at %s)", at, applied)
	}

	g.fail = errors.New("503")
	q.Desire("b", cname("b.example.com"))
	go func() { done <- q.Flush(context.Background()) }()
	<-g.entered
	if err := <-done; err == nil {
		t.Fatal("the flush did not fail")
	}
	if at := q.Progress(); at != applied {
		t.Errorf("a failed flush moved Progress from %s to %s", applied, at)
	}
}

// Before a zone's first listing, every route declares an empty desire in it (an initial
// sync: nine such zones per route for one with records). Those are kept as keys, not
// planned as owners: the flush answers the owners without records at once, plans only
// those with records, and a desire with records declared after an empty one wins.
func TestEmptyDesiresBeforeTheFirstListing(t *testing.T) {
	mem, q, n := setup()
	mem.records[providers.Key{Name: "old.example.com", Type: "CNAME"}] = providers.Record{Name: "old.example.com",
		Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}, Owner: "moved"}
	for i := range 1000 {
		if out := q.Desire(fmt.Sprintf("elsewhere%d", i), nil); out.Synced {
			t.Fatalf("before the first listing, an empty desire was answered synced: %+v", out)
		}
	}
	q.Desire("moved", nil)
	q.Desire("changed", nil)
	q.Desire("changed", cname("changed.example.com"))
	if owners := q.Owners(); len(owners) != 1 || owners[0] != "changed" {
		t.Fatalf("%d owners before the first listing (%v...), want only the one that declared records", len(owners), owners[:min(3, len(owners))])
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if out, ok := n.of(fmt.Sprintf("elsewhere%d", i)); !ok || !out.Synced || out.Records != 0 || out.Err != nil {
			t.Fatalf("elsewhere%d after the first listing: %+v (notified %t)", i, out, ok)
		}
	}
	if _, left := mem.records[providers.Key{Name: "old.example.com", Type: "CNAME"}]; left {
		t.Error("the record of an owner whose empty desire came before the first listing was not deleted")
	}
	if _, made := mem.records[providers.Key{Name: "changed.example.com", Type: "CNAME"}]; !made {
		t.Error("a desire with records declared after an empty one was not applied")
	}
	if out, _ := n.of("changed"); !out.Synced || out.Records != 1 {
		t.Errorf("changed: %+v", out)
	}
	if mem.changes != 2 {
		t.Errorf("%d changes applied, want 2 (one deletion, one creation)", mem.changes)
	}
}

// When the first listing fails, the unlisted empty desires are told its error, as
// unlisted still: they are not made owners with the error as their outcome, which
// the routes of every other zone would take for a failure of their own records. The
// next flush lists the zone again for them, and nothing is answered without a listing.
func TestUnlistedEmptyDesiresShareAFailedListing(t *testing.T) {
	mem, q, n := setup()
	mem.records[providers.Key{Name: "old.example.com", Type: "CNAME"}] = providers.Record{Name: "old.example.com",
		Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}, Owner: "moved"}
	mem.listFail = errors.New("zone unreachable")
	q.Desire("a", nil)
	q.Desire("moved", nil)
	if err := q.Flush(context.Background()); err == nil {
		t.Fatal("a flush with a failing listing succeeded")
	}
	for _, key := range []string{"a", "moved"} {
		if out, ok := n.of(key); !ok || !out.Unlisted || out.Synced || out.Err == nil {
			t.Fatalf("%s after a failed listing: %+v (notified %t), want unlisted with the error", key, out, ok)
		}
	}
	if owners := q.Owners(); len(owners) != 0 {
		t.Fatalf("a failed listing made owners of empty desires: %v", owners)
	}
	if out := q.Desire("late", nil); !out.Unlisted || out.Err == nil {
		t.Fatalf("an empty desire declared after the failed listing: %+v, want unlisted with the error", out)
	}
	mem.mu.Lock()
	mem.listFail = nil
	mem.mu.Unlock()
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a", "late"} {
		if out, _ := n.of(key); !out.Synced || out.Unlisted || out.Err != nil {
			t.Errorf("%s once the zone is listed: %+v", key, out)
		}
	}
	if out, _ := n.of("moved"); !out.Synced || out.Err != nil || len(out.Applied) != 1 {
		t.Errorf("moved once the zone is listed: %+v, want its leftover deleted", out)
	}
	if _, left := mem.records[providers.Key{Name: "old.example.com", Type: "CNAME"}]; left {
		t.Error("the leftover of an empty desire kept through a failed listing was not deleted")
	}
	if out := q.Desire("after", nil); !out.Synced || out.Err != nil {
		t.Errorf("an empty desire once the zone is listed: %+v", out)
	}
	if owners := q.Owners(); len(owners) != 0 {
		t.Errorf("owners kept with nothing wanted and nothing left: %v", owners)
	}
}

// A zone that cannot be listed says so once when it stops being readable and once when
// it is again, however many listings fail in between: the EdgeProvider's status is
// written on each, and a retry every few seconds must not write it each time. The
// first listing's result is told too: a new queue cannot know what the status says.
func TestReadableIsToldOfChangesOnly(t *testing.T) {
	mem := newMem()
	var told []error
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{Readable: func(err error) { told = append(told, err) }}, nil)
	if tried, err := q.Listed(); tried || err != nil {
		t.Fatalf("Listed before any listing: %t, %v", tried, err)
	}
	q.Desire("a", cname("a.example.com"))
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tried, err := q.Listed(); !tried || err != nil || len(told) != 1 || told[0] != nil {
		t.Fatalf("after a first listing that succeeded: Listed %t, %v; told %v", tried, err, told)
	}
	mem.listFail = errors.New("zone unreachable")
	for range 3 {
		q.resyncAll()
		if err := q.Flush(context.Background()); err == nil {
			t.Fatal("a flush with a failing listing succeeded")
		}
		if tried, err := q.Listed(); !tried || err == nil || err.Error() != "zone unreachable" {
			t.Fatalf("Listed while the listing fails: %t, %v", tried, err)
		}
	}
	if len(told) != 2 || told[1] == nil {
		t.Fatalf("a successful listing then three failed ones told %v, want nil then the error once", told)
	}
	mem.mu.Lock()
	mem.listFail = nil
	mem.mu.Unlock()
	for range 2 {
		q.resyncAll()
		if err := q.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Listed(); len(told) != 3 || told[2] != nil || err != nil {
		t.Fatalf("listings that succeed again: told %v (Listed: %v), want nil once more", told, err)
	}
}

// A resync whose listing fails is retried with the queue's backoff even when the zone
// holds no owner and no sweep is asked for (sweeping off): it waited for the next
// period, up to 10 minutes in which the zone was reported unreadable after it
// answered again.
func TestAFailedResyncIsRetriedWithNothingPending(t *testing.T) {
	mem := newMem()
	readable := make(chan error, 8)
	// The operator's provider: it relists, so a resync with no owner still lists.
	q := New(providers.NewCached(mem, time.Hour), providers.Zone{Name: "example.com", ID: "z"}, Options{Resync: time.Hour,
		MaxBackoff: 50 * time.Millisecond, Quiet: time.Millisecond, MaxWait: 10 * time.Millisecond,
		Readable: func(err error) { readable <- err }}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	told := func() error {
		t.Helper()
		select {
		case err := <-readable:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("the queue did not list the zone within 5 s (backoff 50 ms)")
			return nil
		}
	}
	q.resyncAll()
	if err := told(); err != nil {
		t.Fatalf("the first listing: %v", err)
	}
	mem.mu.Lock()
	mem.listFail = errors.New("zone unreachable")
	mem.mu.Unlock()
	q.resyncAll()
	if err := told(); err == nil {
		t.Fatal("the failed resync told nil")
	}
	mem.mu.Lock()
	mem.listFail = nil
	mem.mu.Unlock()
	if err := told(); err != nil {
		t.Fatalf("the retry of the failed resync: %v", err)
	}
}

// A zone whose listing has been refused for good (access denied) for
// MaxRefusedBackoff is tried again at MaxRefusedBackoff, not MaxBackoff, and the log
// says so once, not at every try; before that, and for a failure that may pass, the
// short backoff holds. A zone refused for hours logged the same error every 30 s,
// each try a request at the account's rate limit.
func TestAZoneRefusedForGoodIsTriedSlowlyAndLoggedOnce(t *testing.T) {
	mem := newMem()
	n := &notes{got: map[string]Outcome{}}
	var mu sync.Mutex
	var errorsLogged []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(args, `"error"`) && strings.Contains(args, "cannot be listed; retrying") {
			errorsLogged = append(errorsLogged, args)
		}
	}, funcr.Options{})
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{Resync: time.Hour, Log: log,
		MaxBackoff: 20 * time.Millisecond, MaxRefusedBackoff: 400 * time.Millisecond,
		Quiet: time.Millisecond, MaxWait: 10 * time.Millisecond}, n.record)
	tries := func(d time.Duration) int {
		mem.mu.Lock()
		before := mem.listTries
		mem.mu.Unlock()
		time.Sleep(d)
		mem.mu.Lock()
		defer mem.mu.Unlock()
		return mem.listTries - before
	}
	setFail := func(err error) {
		mem.mu.Lock()
		mem.listFail = err
		mem.mu.Unlock()
	}
	logged := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(errorsLogged)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	setFail(&providers.Error{Provider: "mem", Op: "ListRecords", Kind: providers.Permanent, Code: "AccessDenied",
		Err: errors.New("not authorized to perform route53:ListResourceRecordSets")})
	q.Desire("o", cname("o.example.com"))
	go q.Run(ctx)
	// A refusal that passes within MaxRefusedBackoff (a policy propagating) is met
	// at the short backoff.
	if n := tries(300 * time.Millisecond); n < 5 {
		t.Errorf("a zone refused for 300 ms was listed %d times, want 5 or more (backoff 20 ms)", n)
	}
	time.Sleep(200 * time.Millisecond)
	if n := tries(1200 * time.Millisecond); n < 2 || n > 5 {
		t.Errorf("a zone refused for good was listed %d times in 1.2 s, want 2-5 (one try per 400 ms)", n)
	}
	if n := logged(); n != 1 {
		t.Errorf("the refusal was logged %d times as an error, want once", n)
	}

	setFail(&providers.Error{Provider: "mem", Op: "ListRecords", Kind: providers.Transient, Code: "ServiceUnavailable",
		Err: errors.New("503")})
	time.Sleep(500 * time.Millisecond) // the try in progress waits out its backoff
	if n := tries(time.Second); n < 10 {
		t.Errorf("a zone failing for a passing reason was listed %d times in 1 s, want 10 or more (backoff 20 ms)", n)
	}
	if n := logged(); n != 2 {
		t.Errorf("a new failure gave %d error lines in all, want 2 (one per failure)", n)
	}

	setFail(nil)
	waitFor(t, func() bool { o, _ := n.of("o"); return o.Synced })
}

// An Expedite that finds nothing pending (a failover that moved nothing in this zone)
// must not rush the next burst: its first desire went out alone in a batch of its own
// before, one more Route53 call per zone in every failover that followed.
func TestExpediteWithNothingPendingLeavesTheNextBurstWhole(t *testing.T) {
	mem := newMem()
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{Quiet: 50 * time.Millisecond}, nil)
	q.Expedite()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	for i := range 200 {
		q.Desire(fmt.Sprintf("o%04d", i), cname(fmt.Sprintf("t%04d.example.com", i)))
	}
	waitFor(t, func() bool { mem.mu.Lock(); defer mem.mu.Unlock(); return mem.changes == 200 })
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if mem.applies != 1 {
		t.Errorf("the burst of 200 went out in %d batches, want 1", mem.applies)
	}
}

// timedMem notes when each listing started.
type timedMem struct {
	*memProvider
	start time.Time
	at    chan time.Duration
}

func (m timedMem) ListRecords(ctx context.Context, z providers.Zone) ([]providers.Record, error) {
	select {
	case m.at <- time.Since(m.start):
	default:
	}
	return m.memProvider.ListRecords(ctx, z)
}

// The zones of an account start together and share its rate limit: their resyncs are
// spread over the second half of the first period instead of listing every zone at
// the same moment (which, at 100,000 routes, held a failover's Route53 writes behind
// two minutes of listings), and come every period after that.
func TestZonesResyncOutOfStep(t *testing.T) {
	const zones, resync = 10, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	listings := make([]chan time.Duration, zones)
	for i := range zones {
		listings[i] = make(chan time.Duration, 8)
		p := timedMem{memProvider: newMem(), start: start, at: listings[i]}
		zone := fmt.Sprintf("z%d.example.com", i)
		q := New(p, providers.Zone{Name: zone, ID: fmt.Sprint(i)}, Options{Resync: resync, Quiet: 10 * time.Millisecond}, func(string, Outcome) {})
		q.Desire("o", cname("a."+zone))
		go q.Run(ctx)
	}
	next := func(i int) time.Duration {
		select {
		case at := <-listings[i]:
			return at
		case <-time.After(5 * resync):
			t.Fatalf("zone %d was not listed again within %s", i, 5*resync)
			return 0
		}
	}
	first, second := make([]time.Duration, zones), make([]time.Duration, zones)
	for i := range zones {
		next(i) // the first flush's
		first[i] = next(i)
		second[i] = next(i)
	}
	const slack = 300 * time.Millisecond // a loaded machine
	for i := range zones {
		if first[i] < resync/2 || first[i] > resync+slack {
			t.Errorf("zone %d: first resync after %s, want within [%s, %s]", i, first[i], resync/2, resync)
		}
		if gap := second[i] - first[i]; gap < resync-slack/3 || gap > resync+slack {
			t.Errorf("zone %d: resyncs %s apart, want the period (%s)", i, gap, resync)
		}
	}
	// Ten uniform draws over half a second all within 50 ms of each other: about one
	// chance in 200,000.
	if spread := slices.Max(first) - slices.Min(first); spread < resync/20 {
		t.Errorf("the zones' first resyncs all came within %s: %v", spread, first)
	}
}

// applyHook runs before each ApplyChanges of the provider it wraps.
type applyHook struct {
	batchedMem
	before func(changes []providers.Change) error
}

func (h applyHook) ApplyChanges(ctx context.Context, z providers.Zone, changes []providers.Change) (providers.Result, error) {
	if err := h.before(changes); err != nil {
		return providers.Result{}, err
	}
	return h.batchedMem.ApplyChanges(ctx, z, changes)
}

// A flush reports each owner once the request carrying its records is answered, not
// once the zone's last request is: at 100,000 routes a zone's flush is dozens of
// requests at the account's pace, and no route could be Ready before all of them. A
// failed request leaves the owners not yet sent pending with its error, and the
// requests use no more calls than one apply would.
func TestOwnersAreReportedRequestByRequest(t *testing.T) {
	mem := newMem()
	n := &notes{got: map[string]Outcome{}}
	var reportedBefore []int // owners reported when each request went out
	calls := 0
	hook := applyHook{batchedMem: batchedMem{mem}}
	hook.before = func(changes []providers.Change) error {
		n.mu.Lock()
		reportedBefore = append(reportedBefore, len(n.got))
		n.mu.Unlock()
		calls++
		if calls == 3 {
			return errors.New("throttled")
		}
		return nil
	}
	q := New(hook, providers.Zone{Name: "example.com", ID: "z"}, Options{}, n.record)
	for i := range 450 {
		q.Desire(fmt.Sprintf("o%04d", i), cname(fmt.Sprintf("t%04d.example.com", i)))
	}
	if err := q.Flush(context.Background()); err == nil {
		t.Fatal("the third request failed, the flush did not say so")
	}
	if want := []int{0, 200, 400}; !slices.Equal(reportedBefore, want) {
		t.Fatalf("owners reported before each request: %v, want %v", reportedBefore, want)
	}
	synced, failed := 0, 0
	for i := range 450 {
		out, ok := n.of(fmt.Sprintf("o%04d", i))
		switch {
		case !ok:
			t.Fatalf("o%04d was not reported", i)
		case out.Synced && out.Records == 1:
			synced++
		case out.Err != nil && !out.Synced:
			failed++
		}
	}
	if synced != 400 || failed != 50 {
		t.Fatalf("%d owners synced and %d failed, want 400 and 50", synced, failed)
	}
	if mem.changes != 400 {
		t.Fatalf("%d changes applied, want 400", mem.changes)
	}
	// The failed owners are pending again, and go out with the next flush.
	q.mu.Lock()
	dirty := 0
	for _, o := range q.owners {
		if o.dirty {
			dirty++
		}
	}
	q.mu.Unlock()
	if dirty != 50 {
		t.Fatalf("%d owners pending after the failure, want 50", dirty)
	}
}

// A request's worth of pending desires goes out at once, while the stream of desires
// goes on: waiting for it to pause (Quiet) or for MaxWait held the first records, and
// so the first Ready, of a 10,000-route sync until its last route was planned. What
// does not fill a request still waits for the pause.
func TestAFullRequestGoesOutWithoutWaitingForThePause(t *testing.T) {
	mem := newMem()
	var mu sync.Mutex
	var sizes []int // changes of each request sent during the stream
	streaming := true
	hook := applyHook{batchedMem: batchedMem{mem}, before: func(changes []providers.Change) error {
		mu.Lock()
		defer mu.Unlock()
		if streaming {
			sizes = append(sizes, len(changes))
		}
		return nil
	}}
	q := New(hook, providers.Zone{Name: "example.com", ID: "z"},
		Options{Quiet: time.Second, MaxWait: time.Minute, Resync: time.Hour}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	const n = 450 // two full requests of 200, and 50 for the pause
	for i := range n {
		q.Desire(fmt.Sprintf("o%04d", i), cname(fmt.Sprintf("t%04d.example.com", i)))
		time.Sleep(5 * time.Millisecond) // 2.25 s of stream, never quiet
	}
	mu.Lock()
	streaming = false
	during := slices.Clone(sizes)
	mu.Unlock()
	if len(during) == 0 || slices.ContainsFunc(during, func(s int) bool { return s != 200 }) {
		t.Fatalf("requests sent while desires streamed: %v, want full ones (200 changes), at least one", during)
	}
	waitFor(t, func() bool {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		return mem.changes == n
	})
}

// A released owner's records stay as they are without its marker: no later desire of
// another owner, no sweep and no retract of this installation changes them. Asked again
// once done, the release is answered at once.
func TestAReleasedOwnersRecordsStayUnmarked(t *testing.T) {
	mem, q, n := setup()
	q.Desire("o", cname("a.example.com"))
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out := q.Release("o"); out.Synced {
		t.Fatalf("released before any flush: %+v", out)
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, _ := n.of("o"); !out.Synced || out.Records != 0 || out.Err != nil {
		t.Errorf("outcome of the release: %+v", out)
	}
	rec, ok := mem.records[providers.Key{Name: "a.example.com", Type: providers.TypeCNAME}]
	if !ok || rec.Owner != "" || !slices.Equal(rec.Values, []string{"edge.example.net"}) {
		t.Fatalf("record after the release: %+v (present %t), want it unmarked and unchanged", rec, ok)
	}
	for range 3 {
		if out := q.Release("o"); !out.Synced || out.Records != 0 {
			t.Fatalf("release asked again once done: %+v", out)
		}
		if err := q.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// The name is nobody's now: a new owner wanting it has a conflict, and the old
	// owner's empty desire deletes nothing.
	if out := q.Desire("o", nil); !out.Synced {
		t.Errorf("empty desire after the release: %+v", out)
	}
	q.Desire("p", cname("a.example.com"))
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, _ := n.of("p"); len(out.Conflicts) != 1 {
		t.Errorf("another owner's desire for the released name: %+v, want a conflict", out)
	}
	if rec := mem.records[providers.Key{Name: "a.example.com", Type: providers.TypeCNAME}]; rec.Owner != "" {
		t.Errorf("released record taken by %q", rec.Owner)
	}
}

// A release declared before the zone was ever listed waits for the listing and
// releases what it finds, never deletes it.
func TestAReleaseBeforeTheFirstListingDeletesNothing(t *testing.T) {
	mem := newMem()
	rec := cname("a.example.com")[0]
	rec.Owner = "o"
	mem.records[rec.Key()] = rec
	n := &notes{got: map[string]Outcome{}}
	q := New(mem, providers.Zone{Name: "example.com", ID: "z"}, Options{}, n.record)
	q.Release("o")
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, ok := mem.records[rec.Key()]
	if !ok || got.Owner != "" {
		t.Errorf("record after a release before the first listing: %+v (present %t), want it kept unmarked", got, ok)
	}
	if out, _ := n.of("o"); !out.Synced || out.Records != 0 {
		t.Errorf("outcome: %+v", out)
	}
}
