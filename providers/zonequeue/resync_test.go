package zonequeue

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// A resync through the zone cache re-plans only the owners of what someone else
// changed (and those with conflicts): a record deleted behind the operator's back is
// repaired, one edited is put back, a foreign record at a wanted name is a conflict,
// and the 97 untouched owners are not planned again.
func TestResyncReplansOnlyWhatDrifted(t *testing.T) {
	mem := newMem()
	cached := providers.NewCached(mem, time.Hour)
	var planned []int
	log := funcr.New(func(_, args string) {
		// A flush's "planned" line says how many owners it planned.
		if i := strings.Index(args, `"owners"=`); i >= 0 && strings.Contains(args, `"msg"="planned"`) {
			n, _ := strconv.Atoi(strings.FieldsFunc(args[i+len(`"owners"=`):], func(r rune) bool { return r < '0' || r > '9' })[0])
			planned = append(planned, n)
		}
	}, funcr.Options{Verbosity: 1})
	n := &notes{got: map[string]Outcome{}}
	// Someone else's record at a name an owner will want.
	mem.records[providers.Key{Name: "taken.example.com", Type: providers.TypeCNAME}] = providers.Record{Name: "taken.example.com",
		Type: providers.TypeCNAME, TTL: 300, Values: []string{"someone.example.org"}}
	q := New(cached, providers.Zone{Name: "example.com", ID: "z"}, Options{Log: log}, n.record)
	for i := range 100 {
		q.Desire(fmt.Sprintf("o%03d", i), cname(fmt.Sprintf("h%03d.example.com", i)))
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem.mu.Lock()
	delete(mem.records, providers.Key{Name: "h001.example.com", Type: providers.TypeCNAME})
	edited := mem.records[providers.Key{Name: "h002.example.com", Type: providers.TypeCNAME}]
	edited.Values = []string{"elsewhere.example.org"}
	mem.records[edited.Key()] = edited
	mem.mu.Unlock()
	q.Desire("o100", cname("taken.example.com"))

	// The pending desire goes first, planned on the cache (a conflict); then the
	// resync: o100 (in conflict), o001 and o002 drifted; nothing else.
	planned = nil
	q.resyncAll()
	for range 2 {
		if err := q.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(planned, []int{1, 3}) {
		t.Fatalf("the desire and the resync planned %v owners, want [1 3]", planned)
	}
	mem.mu.Lock()
	_, repaired := mem.records[providers.Key{Name: "h001.example.com", Type: providers.TypeCNAME}]
	restored := mem.records[providers.Key{Name: "h002.example.com", Type: providers.TypeCNAME}].Values
	mem.mu.Unlock()
	if !repaired || len(restored) != 1 || restored[0] != "edge.example.net" {
		t.Errorf("after the resync: h001 repaired %t, h002 points at %v", repaired, restored)
	}
	if out, _ := n.of("o100"); len(out.Conflicts) != 1 {
		t.Errorf("o100: %+v, want a conflict with the foreign record", out)
	}

	// The next resync, with nothing changed, plans only the owner in conflict.
	planned = nil
	q.resyncAll()
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sum(planned) != 1 {
		t.Fatalf("a resync of an untouched zone planned %v owners, want the one in conflict", planned)
	}
}

func sum(ns []int) (total int) {
	for _, n := range ns {
		total += n
	}
	return total
}

// A sweep while desires stream in: the orphan's deletions fall in the request the
// last owners would share, which waits for more desires. The orphan is looked for
// again by the next flush (it was not swept yet), and is swept once the stream pauses.
func TestAnOrphanHeldBackByAStreamIsSweptLater(t *testing.T) {
	mem := newMem()
	mem.records[providers.Key{Name: "zz-gone.example.com", Type: providers.TypeCNAME}] = providers.Record{
		Name: "zz-gone.example.com", Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}, Owner: "zz-gone"}
	q := New(batchedMem{mem}, providers.Zone{Name: "example.com", ID: "z"},
		Options{Orphaned: func(owner string) bool { return owner == "zz-gone" }}, nil)
	for i := range 250 { // one full request of 200, then 50 and the orphan's deletion
		q.Desire(fmt.Sprintf("o%04d", i), cname(fmt.Sprintf("t%04d.example.com", i)))
	}
	if err := q.flush(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if _, left := mem.records[providers.Key{Name: "zz-gone.example.com", Type: providers.TypeCNAME}]; !left {
		t.Fatal("the orphan was swept in the request held back")
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, left := mem.records[providers.Key{Name: "zz-gone.example.com", Type: providers.TypeCNAME}]; left {
		t.Error("the orphan is still there once the stream paused")
	}
}

// stalledMem's listings, once stall is set, block until their context ends or
// release is closed: a resync's hundreds of pages at a rate limit that other zones'
// writes go before.
type stalledMem struct {
	*memProvider
	stall   atomic.Bool
	stalled chan struct{} // a listing blocked
	release chan struct{}
}

func (m *stalledMem) ListRecords(ctx context.Context, z providers.Zone) ([]providers.Record, error) {
	if m.stall.Load() {
		select {
		case m.stalled <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-m.release:
		}
	}
	return m.memProvider.ListRecords(ctx, z)
}

// A desire that comes while the zone is listed again for a resync does not wait for
// the listing: at 100,000 routes a zone's resync is 70 Route53 pages, which yield to
// the writes of other zones, and a failover's writes in the zone being resynced
// waited for all of them (113 s for the records to move, against 55 s without a
// resync). The listing is dropped, the writes go out planned on the zone's cache, and
// the resync comes after them; no owner is told of an error.
func TestWritesDoNotWaitForAResyncsListing(t *testing.T) {
	mem := &stalledMem{memProvider: newMem(), stalled: make(chan struct{}, 1), release: make(chan struct{})}
	n := &notes{got: map[string]Outcome{}}
	q := New(providers.NewCached(mem, 2*time.Hour), providers.Zone{Name: "example.com", ID: "z"},
		Options{Resync: time.Hour, Quiet: 10 * time.Millisecond, MaxWait: 50 * time.Millisecond}, n.record)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	for i := range 10 {
		q.Desire(fmt.Sprintf("o%d", i), cname(fmt.Sprintf("h%d.example.com", i)))
	}
	waitFor(t, func() bool { o, _ := n.of("o9"); return o.Synced })

	mem.stall.Store(true)
	q.resyncAll()
	select {
	case <-mem.stalled:
	case <-time.After(5 * time.Second):
		t.Fatal("the resync did not list the zone")
	}
	q.Desire("new", cname("new.example.com"))
	waitFor(t, func() bool { o, _ := n.of("new"); return o.Synced })
	mem.mu.Lock()
	_, written := mem.records[providers.Key{Name: "new.example.com", Type: providers.TypeCNAME}]
	lists := mem.lists
	mem.mu.Unlock()
	if !written {
		t.Fatal("the new owner is reported synced without its record")
	}
	for i := range 10 {
		if o, _ := n.of(fmt.Sprintf("o%d", i)); o.Err != nil || !o.Synced {
			t.Errorf("o%d after the dropped listing: %+v", i, o)
		}
	}

	// The resync still comes, once the writes are out.
	close(mem.release)
	waitFor(t, func() bool { mem.mu.Lock(); defer mem.mu.Unlock(); return mem.lists > lists })
}

// Desires that never stop do not hold a resync off for ever: once it has waited half
// a period, its listing is no longer dropped, and the writes wait for it.
func TestAResyncWaitsForWritesAtMostHalfAPeriod(t *testing.T) {
	const period = 2 * time.Second // a quarter of it for a few writes, on a loaded machine too
	mem := &stalledMem{memProvider: newMem(), stalled: make(chan struct{}, 1), release: make(chan struct{})}
	n := &notes{got: map[string]Outcome{}}
	q := New(providers.NewCached(mem, time.Hour), providers.Zone{Name: "example.com", ID: "z"},
		Options{Resync: period, Quiet: 10 * time.Millisecond, MaxWait: 50 * time.Millisecond}, n.record)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	q.Desire("o", cname("o.example.com"))
	waitFor(t, func() bool { o, _ := n.of("o"); return o.Synced })

	mem.stall.Store(true)
	q.resyncAll()
	<-mem.stalled
	written := 0
	for ; time.Since(q.resyncAskedAt()) < period/4; written++ {
		key := fmt.Sprintf("s%d", written)
		q.Desire(key, cname(key+".example.com"))
		waitFor(t, func() bool { o, _ := n.of(key); return o.Synced })
	}
	if written < 2 {
		t.Fatalf("%d desires written in a quarter of a period", written)
	}
	time.Sleep(period/2 + 50*time.Millisecond - time.Since(q.resyncAskedAt()))
	q.Desire("late", cname("late.example.com"))
	time.Sleep(300 * time.Millisecond)
	if o, _ := n.of("late"); o.Synced {
		t.Fatal("a desire dropped the listing of a resync that had waited half a period")
	}
	close(mem.release)
	waitFor(t, func() bool { o, _ := n.of("late"); return o.Synced })
}

func (q *Queue) resyncAskedAt() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.resyncAsked
}
