package zonequeue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// A resync through the zone cache re-plans only the owners of what someone else
// changed (and those with conflicts): a record deleted behind the operator's back is
// repaired, one edited is put back, a foreign record at a wanted name is a conflict,
// and the 97 untouched owners are not planned again.
func TestResyncReplansOnlyWhatDrifted(t *testing.T) {
	mem := newMem()
	cached := providers.NewCached(mem, 0)
	var planned []int
	log := funcr.New(func(_, args string) {
		// A flush's "planned" line says how many owners it planned.
		if i := strings.Index(args, `"owners"=`); i >= 0 && strings.Contains(args, `"msg"="planned"`) {
			n, _ := strconv.Atoi(strings.FieldsFunc(args[i+len(`"owners"=`):], func(r rune) bool { return r < '0' || r > '9' })[0])
			planned = append(planned, n)
		}
	}, funcr.Options{Verbosity: 1})
	n := &notes{got: map[string]Outcome{}}
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
	mem.mu.Lock()
	mem.records[providers.Key{Name: "taken.example.com", Type: providers.TypeCNAME}] = providers.Record{Name: "taken.example.com",
		Type: providers.TypeCNAME, TTL: 300, Values: []string{"someone.example.org"}}
	mem.mu.Unlock()

	planned = nil
	q.resyncAll()
	if err := q.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// o100 (new, and now a conflict), o001 and o002 drifted; nothing else.
	if sum(planned) != 3 {
		t.Fatalf("the resync planned %v owners, want the 3 it concerns", planned)
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
