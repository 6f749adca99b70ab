package zonequeue

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// The hash is hash/fnv's FNV-1a over the records' text, computed without allocating:
// a desire that differs in any field hashes differently, an equal one the same.
func TestHashRecordsIsFNVOfTheRecordsText(t *testing.T) {
	reference := func(rs []providers.Record) uint64 {
		h := fnv.New64a()
		for _, r := range rs {
			fmt.Fprintf(h, "%s|%s|%d|%t|%s\n", r.Name, r.Type, r.TTL, r.Proxied, strings.Join(r.Values, ","))
		}
		return h.Sum64()
	}
	base := providers.Record{Name: "a.example.com", Type: "A", TTL: 60, Values: []string{"192.0.2.1", "192.0.2.2"}}
	variants := map[string][]providers.Record{
		"none":    nil,
		"base":    {base},
		"name":    {{Name: "b.example.com", Type: "A", TTL: 60, Values: base.Values}},
		"type":    {{Name: base.Name, Type: "AAAA", TTL: 60, Values: base.Values}},
		"ttl":     {{Name: base.Name, Type: "A", TTL: 300, Values: base.Values}},
		"ttl<0":   {{Name: base.Name, Type: "A", TTL: -1, Values: base.Values}},
		"proxied": {{Name: base.Name, Type: "A", TTL: 60, Proxied: true, Values: base.Values}},
		"values":  {{Name: base.Name, Type: "A", TTL: 60, Values: []string{"192.0.2.1"}}},
		"order":   {{Name: base.Name, Type: "A", TTL: 60, Values: []string{"192.0.2.2", "192.0.2.1"}}},
		"two":     {base, {Name: "b.example.com", Type: "CNAME", TTL: 1, Proxied: true, Values: []string{"edge.example.net"}}},
	}
	seen := map[uint64]string{}
	for name, rs := range variants {
		got := hashRecords(rs)
		if want := reference(rs); got != want {
			t.Errorf("%s: hash %x, hash/fnv over the same text %x", name, got, want)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s hash alike", name, other)
		}
		seen[got] = name
	}
	if n := testing.AllocsPerRun(100, func() { hashRecords(variants["two"]) }); n != 0 {
		t.Errorf("hashRecords allocates %v times per call, want 0", n)
	}
}
