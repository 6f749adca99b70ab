package providers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type countingProvider struct {
	Provider
	lists   atomic.Int32
	records []Record
	fail    error
}

func (p *countingProvider) ListRecords(context.Context, Zone) ([]Record, error) {
	p.lists.Add(1)
	time.Sleep(10 * time.Millisecond) // long enough for concurrent callers to pile up
	return slices.Clone(p.records), nil
}

func (p *countingProvider) ApplyChanges(_ context.Context, _ Zone, changes []Change) (Result, error) {
	if p.fail != nil {
		return Result{}, p.fail
	}
	return Result{Applied: changes}, nil
}

func TestCachedListsAZoneOncePerResync(t *testing.T) {
	p := &countingProvider{records: []Record{{Name: "a.example.com", Type: TypeA, Values: []string{"192.0.2.1"}}}}
	c := NewCached(p, time.Hour)
	z := Zone{Name: "example.com", ID: "z1"}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			if recs, err := c.ListRecords(context.Background(), z); err != nil || len(recs) != 1 {
				t.Errorf("got %d records, %v", len(recs), err)
			}
		})
	}
	wg.Wait()
	if n := p.lists.Load(); n != 1 {
		t.Fatalf("100 concurrent callers made %d list calls", n)
	}

	// Writes through the cache keep it current without listing again.
	b := Record{Name: "b.example.com", Type: TypeA, Values: []string{"192.0.2.2"}}
	if _, err := c.ApplyChanges(context.Background(), z, []Change{{Action: Create, New: &b},
		{Action: Delete, Old: &p.records[0]}}); err != nil {
		t.Fatal(err)
	}
	recs, _ := c.ListRecords(context.Background(), z)
	if len(recs) != 1 || recs[0].Name != "b.example.com" || p.lists.Load() != 1 {
		t.Fatalf("after writes: %v with %d list calls", recs, p.lists.Load())
	}

	// An apply the provider refused (429, 503) applied nothing: the zone is still
	// known. After a 10-minute outage, listing every zone again before the first
	// write would cost more calls than the writes.
	p.fail = &Error{Provider: "p", Op: "ApplyChanges", Code: "503", Refused: true, Err: errors.New("service unavailable")}
	_, _ = c.ApplyChanges(context.Background(), z, []Change{{Action: Create, New: &b}})
	_, _ = c.ListRecords(context.Background(), z)
	if n := p.lists.Load(); n != 1 {
		t.Errorf("after a refused apply: %d list calls, want 1", n)
	}

	// An apply with an unknown outcome forgets the zone.
	p.fail = errors.New("connection reset")
	_, _ = c.ApplyChanges(context.Background(), z, []Change{{Action: Create, New: &b}})
	_, _ = c.ListRecords(context.Background(), z)
	if n := p.lists.Load(); n != 2 {
		t.Errorf("after a failed apply: %d list calls, want 2", n)
	}
}

func TestCachedResync(t *testing.T) {
	p := &countingProvider{}
	c := NewCached(p, time.Minute)
	clock := time.Unix(1000, 0)
	c.now = func() time.Time { return clock }
	z := Zone{Name: "example.com", ID: "z1"}
	_, _ = c.ListRecords(context.Background(), z)
	clock = clock.Add(59 * time.Second)
	_, _ = c.ListRecords(context.Background(), z)
	clock = clock.Add(time.Second)
	_, _ = c.ListRecords(context.Background(), z)
	if n := p.lists.Load(); n != 2 {
		t.Errorf("%d list calls, want 2 (one per resync period)", n)
	}
}

// TestCachedSnapshotMergesChanges: after applies, the cached zone reads exactly as a
// fresh sort of its records would (the merge keeps order, replaces updated records,
// drops deleted ones, adds new ones), and a snapshot a caller still holds is never
// modified.
func TestCachedSnapshotMergesChanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	name := func() string { return fmt.Sprintf("h%03d.example.com", rng.IntN(300)) }
	types := []string{TypeA, TypeCNAME, TypeTXT}
	var initial []Record
	seen := map[Key]bool{}
	for range 200 {
		r := Record{Name: name(), Type: types[rng.IntN(3)], Values: []string{"v0"}}
		if !seen[r.Key()] {
			seen[r.Key()] = true
			initial = append(initial, r)
		}
	}
	p := &countingProvider{records: initial}
	c := NewCached(p, time.Hour)
	z := Zone{Name: "example.com", ID: "z1"}
	want := map[Key]Record{}
	for _, r := range initial {
		want[r.Key()] = r
	}
	held, _ := c.ListRecords(context.Background(), z)
	heldCopy := slices.Clone(held)
	for round := range 50 {
		var changes []Change
		for range 1 + rng.IntN(20) {
			r := Record{Name: name(), Type: types[rng.IntN(3)], Values: []string{fmt.Sprint("v", round)}}
			old, exists := want[r.Key()]
			switch {
			case exists && rng.IntN(2) == 0:
				changes = append(changes, Change{Action: Delete, Old: &old})
				delete(want, r.Key())
			case exists:
				changes = append(changes, Change{Action: Update, Old: &old, New: &r})
				want[r.Key()] = r
			default:
				changes = append(changes, Change{Action: Create, New: &r})
				want[r.Key()] = r
			}
		}
		if _, err := c.ApplyChanges(context.Background(), z, changes); err != nil {
			t.Fatal(err)
		}
		got, _ := c.ListRecords(context.Background(), z)
		var expect []Record
		for _, r := range want {
			expect = append(expect, r)
		}
		slices.SortFunc(expect, compareRecords)
		if len(got) != len(expect) {
			t.Fatalf("round %d: %d records, want %d", round, len(got), len(expect))
		}
		for i := range got {
			if !got[i].Equal(expect[i]) {
				t.Fatalf("round %d, record %d: %+v, want %+v", round, i, got[i], expect[i])
			}
		}
	}
	if !slices.EqualFunc(held, heldCopy, Record.Equal) || p.lists.Load() != 1 {
		t.Fatalf("a held snapshot was modified, or the zone listed again (%d lists)", p.lists.Load())
	}
}

// BenchmarkCachedApplyThenList: a flush of 100 changes into a zone of 30,000 records,
// then the list the next plan reads, merged into the sorted snapshot.
func BenchmarkCachedApplyThenList(b *testing.B) {
	var recs []Record
	for i := range 30_000 {
		recs = append(recs, Record{Name: fmt.Sprintf("t%06d.example.com", i*7%30_000), Type: TypeCNAME, Values: []string{"edge.example.net"}})
	}
	p := &countingProvider{records: recs}
	c := NewCached(p, time.Hour)
	z := Zone{Name: "example.com", ID: "z1"}
	if _, err := c.ListRecords(context.Background(), z); err != nil {
		b.Fatal(err)
	}
	changes := make([]Change, 100)
	b.ResetTimer()
	for i := range b.N {
		for j := range changes {
			old := recs[(i*100+j)%len(recs)]
			upd := old
			upd.Values = []string{fmt.Sprint("edge", i)}
			changes[j] = Change{Action: Update, Old: &old, New: &upd}
		}
		_, _ = c.ApplyChanges(context.Background(), z, changes)
		_, _ = c.ListRecords(context.Background(), z)
	}
}

// A listing that names a key twice keeps the last, as the provider's answer would be
// read by key, and the provider's own slice is left as it was.
func TestCachedListingKeepsTheLastOfAKey(t *testing.T) {
	listed := []Record{
		{Name: "b.example.com", Type: TypeCNAME, Values: []string{"first"}},
		{Name: "a.example.com", Type: TypeCNAME, Values: []string{"x"}},
		{Name: "b.example.com", Type: TypeCNAME, Values: []string{"second"}},
		{Name: "b.example.com", Type: TypeTXT, Values: []string{"t"}},
	}
	before := slices.Clone(listed)
	c := NewCached(&countingProvider{records: listed}, time.Hour)
	z := Zone{Name: "example.com", ID: "z1"}
	got, err := c.ListRecords(context.Background(), z)
	if err != nil {
		t.Fatal(err)
	}
	want := []Record{listed[1], listed[2], listed[3]}
	if !slices.EqualFunc(got, want, Record.Equal) {
		t.Errorf("cached zone: %+v\nwant %+v", got, want)
	}
	if !slices.EqualFunc(listed, before, Record.Equal) {
		t.Errorf("the provider's listing was reordered: %+v", listed)
	}
	// A delete and a create of one key in one apply: the create holds.
	old, upd := got[1], Record{Name: "b.example.com", Type: TypeCNAME, Values: []string{"third"}}
	if _, err := c.ApplyChanges(context.Background(), z, []Change{{Action: Delete, Old: &old}, {Action: Create, New: &upd}}); err != nil {
		t.Fatal(err)
	}
	got, _ = c.ListRecords(context.Background(), z)
	if len(got) != 3 || !got[1].Equal(upd) {
		t.Errorf("after a delete and a create of one key: %+v", got)
	}
}

// Relist says where the zone drifted from the cache: names whose records someone
// else added, deleted or changed; the operator's own applies are not drift.
func TestRelistReportsWhereTheZoneDrifted(t *testing.T) {
	p := &countingProvider{records: []Record{
		{Name: "a.example.com", Type: TypeCNAME, TTL: 60, Values: []string{"x.example.net"}, Owner: "o"},
		{Name: "b.example.com", Type: TypeCNAME, TTL: 60, Values: []string{"x.example.net"}, Owner: "o"},
		{Name: "c.example.com", Type: TypeA, TTL: 60, Values: []string{"192.0.2.1"}},
	}}
	c := NewCached(p, time.Hour)
	zone := Zone{Name: "example.com", ID: "z"}
	if _, drifted, err := c.Relist(context.Background(), zone); err != nil || drifted != nil {
		t.Fatalf("first listing: drifted %v, %v; want nil (everything)", drifted, err)
	}
	mine := Record{Name: "e.example.com", Type: TypeCNAME, TTL: 60, Values: []string{"x.example.net"}, Owner: "o"}
	if _, err := c.ApplyChanges(context.Background(), zone, []Change{{Action: Create, New: &mine}}); err != nil {
		t.Fatal(err)
	}
	p.records = []Record{
		{Name: "a.example.com", Type: TypeCNAME, TTL: 60, Values: []string{"x.example.net"}, Owner: "o"},  // as it was
		{Name: "b.example.com", Type: TypeCNAME, TTL: 300, Values: []string{"x.example.net"}, Owner: "o"}, // edited
		{Name: "d.example.com", Type: TypeTXT, TTL: 60, Values: []string{"someone else's"}},               // added
		mine, // the operator's own
	} // c.example.com deleted
	_, drifted, err := c.Relist(context.Background(), zone)
	if err != nil {
		t.Fatal(err)
	}
	if len(drifted) != 3 || !drifted["b.example.com"] || !drifted["c.example.com"] || !drifted["d.example.com"] {
		t.Fatalf("drifted %v, want b, c and d", drifted)
	}
}

// A flush applies its changes request by request; the cache makes its new copy of the
// zone when the zone is next read, not once per request, and a copy handed out before
// stays as it was. Applies that touch one key in turn leave the last state.
func TestCachedMergesAppliesWhenRead(t *testing.T) {
	a := Record{Name: "a.example.com", Type: TypeA, Values: []string{"192.0.2.1"}}
	p := &countingProvider{records: []Record{a}}
	c := NewCached(p, time.Hour)
	z := Zone{Name: "example.com", ID: "z1"}
	before, err := c.ListRecords(context.Background(), z)
	if err != nil {
		t.Fatal(err)
	}
	a2 := Record{Name: "a.example.com", Type: TypeA, Values: []string{"192.0.2.9"}}
	for i := range 50 {
		r := Record{Name: fmt.Sprintf("r%02d.example.com", i), Type: TypeA, Values: []string{"192.0.2.2"}}
		changes := []Change{{Action: Create, New: &r}}
		switch i {
		case 10:
			changes = append(changes, Change{Action: Delete, Old: &a})
		case 20:
			changes = append(changes, Change{Action: Create, New: &a2})
		}
		if _, err := c.ApplyChanges(context.Background(), z, changes); err != nil {
			t.Fatal(err)
		}
	}
	c.mu.Lock()
	zr := c.zones[z.ID]
	unmerged, pending := len(zr.snapshot), len(zr.applied)
	c.mu.Unlock()
	if unmerged != 1 || pending != 51 {
		t.Fatalf("after 50 applies the cache holds a copy of %d records and %d pending, want 1 and 51: a copy per apply", unmerged, pending)
	}
	if len(before) != 1 || !before[0].Equal(a) {
		t.Fatalf("a listing handed out before the applies changed: %v", before)
	}
	after, _ := c.ListRecords(context.Background(), z)
	if len(after) != 51 || !after[0].Equal(a2) || after[1].Name != "r00.example.com" || p.lists.Load() != 1 {
		t.Fatalf("read after the applies: %d records, first %v, %d list calls", len(after), after[0], p.lists.Load())
	}
	if !slices.IsSortedFunc(after, compareRecords) {
		t.Fatal("the merged zone is not sorted")
	}
}

// gatedLister reads the zone when a listing is asked and answers it when released: an
// apply between the two is missing from the answer, as from a real listing under way.
type gatedLister struct {
	Provider
	mu       sync.Mutex
	records  map[Key]Record
	lists    int
	listed   chan struct{}
	release  chan struct{}
	applyErr error
}

func (p *gatedLister) Name() string { return "gated" }

func (p *gatedLister) ListRecords(context.Context, Zone) ([]Record, error) {
	p.mu.Lock()
	p.lists++
	var out []Record
	for _, r := range p.records {
		out = append(out, r)
	}
	p.mu.Unlock()
	p.listed <- struct{}{}
	<-p.release
	return out, nil
}

func (p *gatedLister) ApplyChanges(_ context.Context, _ Zone, changes []Change) (Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range changes {
		if c.Old != nil {
			delete(p.records, c.Old.Key())
		}
		if c.New != nil {
			p.records[c.New.Key()] = *c.New
		}
	}
	return Result{Applied: changes}, p.applyErr
}

// A listing read before an apply and answered after it does not replace what the
// apply did: the cache would believe a created record absent (and create it again,
// refused) or a deleted one present (and delete it again, refused, until a resync).
func TestAListingUnderWayDoesNotUndoAnApply(t *testing.T) {
	z := Zone{Name: "example.com", ID: "z1"}
	old := Record{Name: "old.example.com", Type: TypeA, Values: []string{"192.0.2.1"}}
	created := Record{Name: "new.example.com", Type: TypeA, Values: []string{"192.0.2.2"}}
	for _, how := range []string{"ListRecords", "Relist"} {
		t.Run(how, func(t *testing.T) {
			p := &gatedLister{records: map[Key]Record{old.Key(): old}, listed: make(chan struct{}), release: make(chan struct{})}
			c := NewCached(p, time.Hour)
			ctx := context.Background()
			done := make(chan error)
			go func() {
				var err error
				if how == "Relist" {
					_, _, err = c.Relist(ctx, z)
				} else {
					_, err = c.ListRecords(ctx, z)
				}
				done <- err
			}()
			<-p.listed
			if _, err := c.ApplyChanges(ctx, z, []Change{{Action: Create, New: &created}, {Action: Delete, Old: &old}}); err != nil {
				t.Fatal(err)
			}
			close(p.release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			recs, err := c.ListRecords(ctx, z)
			if err != nil || len(recs) != 1 || recs[0].Name != created.Name || p.lists != 1 {
				t.Fatalf("after an apply during the listing, the cache holds %v (%v, %d listings), want only %s", recs, err, p.lists, created.Name)
			}
		})
	}

	// An apply of unknown outcome meanwhile: the listing is not cached.
	p := &gatedLister{records: map[Key]Record{old.Key(): old}, listed: make(chan struct{}), release: make(chan struct{}),
		applyErr: errors.New("connection reset")}
	c := NewCached(p, time.Hour)
	first := make(chan error)
	go func() { _, err := c.ListRecords(context.Background(), z); first <- err }()
	<-p.listed
	_, _ = c.ApplyChanges(context.Background(), z, []Change{{Action: Create, New: &created}})
	close(p.release)
	if err := <-first; err == nil || IsPermanent(err) {
		t.Fatalf("a listing made while a write of unknown outcome was: %v, want a transient error", err)
	}
	go func() {
		for range p.listed { // the listing asked again
		}
	}()
	recs, _ := c.ListRecords(context.Background(), z)
	if len(recs) != 2 || p.lists != 2 {
		t.Fatalf("after an uncertain apply during the listing: %v from %d listings, want both records from a second", recs, p.lists)
	}
}
