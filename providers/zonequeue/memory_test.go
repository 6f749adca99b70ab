package zonequeue

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/tenantroute/tenantroute-operator/providers"
)

func addresses(name string, values ...string) []providers.Record {
	return []providers.Record{{Name: name, Type: providers.TypeA, TTL: 60, Values: values}}
}

// ownTarget is the CNAME of owner i to a target of its own.
func ownTarget(i int, edge string) []providers.Record {
	return []providers.Record{{Name: fmt.Sprintf("t%04d.example.com", i), Type: providers.TypeCNAME, TTL: 60,
		Values: []string{fmt.Sprintf("t%04d.%s.example.net", i, edge)}}}
}

// Half the owners of the zone point at one edge's addresses, the other half at targets
// of their own (an edge with a hostname template), interleaved: the edge's list is
// held once however the unshared ones stream past it, and sharing it changes no
// record.
func TestOwnersPointingAtOneEdgeShareItsValues(t *testing.T) {
	mem, q, _ := setup()
	const owners = 1000
	for i := range owners {
		key := fmt.Sprintf("o%04d", i)
		if i%2 == 0 {
			q.Desire(key, addresses(fmt.Sprintf("t%04d.example.com", i), "192.0.2.2", "192.0.2.1"))
		} else {
			q.Desire(key, ownTarget(i, "cdn"))
		}
	}
	shared := func() (lists map[*string]int) {
		lists = map[*string]int{}
		for i := 0; i < owners; i += 2 {
			v := q.owners[fmt.Sprintf("o%04d", i)].desired[0].Values
			if !slices.Equal(v, []string{"192.0.2.1", "192.0.2.2"}) {
				t.Fatalf("o%04d desires %v", i, v)
			}
			lists[unsafe.SliceData(v)]++
		}
		return lists
	}
	if lists := shared(); len(lists) != 1 {
		t.Errorf("%d owners with one edge's addresses hold %d copies of them, want 1", owners/2, len(lists))
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < owners; i += 2 {
		r := mem.records[providers.Key{Name: fmt.Sprintf("t%04d.example.com", i), Type: providers.TypeA}]
		if !slices.Equal(r.Values, []string{"192.0.2.1", "192.0.2.2"}) || r.Owner != fmt.Sprintf("o%04d", i) {
			t.Fatalf("record of o%04d: %+v", i, r)
		}
	}

	// The edge's addresses change: every owner desires the new ones, which are shared
	// in turn, and applied.
	for i := 0; i < owners; i += 2 {
		q.Desire(fmt.Sprintf("o%04d", i), addresses(fmt.Sprintf("t%04d.example.com", i), "192.0.2.9"))
		q.Desire(fmt.Sprintf("o%04d", i+1), ownTarget(i+1, "cdn2"))
	}
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	lists := map[*string]int{}
	for i := 0; i < owners; i += 2 {
		key := fmt.Sprintf("o%04d", i)
		v := q.owners[key].desired[0].Values
		lists[unsafe.SliceData(v)]++
		r := mem.records[providers.Key{Name: fmt.Sprintf("t%04d.example.com", i), Type: providers.TypeA}]
		if !slices.Equal(v, []string{"192.0.2.9"}) || !slices.Equal(r.Values, []string{"192.0.2.9"}) {
			t.Fatalf("%s desires %v, has %v", key, v, r.Values)
		}
	}
	if len(lists) != 1 {
		t.Errorf("after the edge's change %d copies of its addresses, want 1", len(lists))
	}
}

// BenchmarkHeldPerOwner reports what a queue holds for each owner with records: the
// Route53 shape of a route, an A and an AAAA record set at one edge's addresses.
//
//	go test -run '^$' -bench HeldPerOwner ./providers/zonequeue/
func BenchmarkHeldPerOwner(b *testing.B) {
	const owners = 100000
	names := make([]string, owners)
	keys := make([]string, owners)
	for i := range owners {
		names[i], keys[i] = fmt.Sprintf("tenant-%06d.example.com", i), fmt.Sprintf("default/tenant-%06d", i)
	}
	for b.Loop() {
		q := New(newMem(), providers.Zone{Name: "example.com", ID: "z"}, Options{}, nil)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range owners {
			q.Desire(keys[i], []providers.Record{
				{Name: names[i], Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.2", "192.0.2.1"}},
				{Name: names[i], Type: providers.TypeAAAA, TTL: 60, Values: []string{"2001:db8::1"}},
			})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/owners, "B/owner")
		runtime.KeepAlive(q)
	}
}
