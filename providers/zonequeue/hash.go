package zonequeue

import (
	"strconv"

	"github.com/tenantroute/tenantroute-operator/providers"
)

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
