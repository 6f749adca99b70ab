package providers

import (
	"context"
	"errors"
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
	return p.records, nil
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
