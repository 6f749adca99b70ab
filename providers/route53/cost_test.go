package route53

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// wireCost counts a change from the wire changes it sends, as ChangeCost did before it
// stopped building them.
func wireCost(c providers.Change, upsertRegistry bool) providers.Cost {
	var cost providers.Cost
	for _, wc := range wireChanges(c, upsertRegistry) {
		weight := 1
		if wc.Action == types.ChangeActionUpsert {
			weight = 2
		}
		for _, rr := range wc.ResourceRecordSet.ResourceRecords {
			cost.Records += weight
			cost.Chars += weight * len(aws.ToString(rr.Value))
		}
	}
	return cost
}

// TestChangeCostIsWhatIsSent: the cost counted without building the wire changes
// equals the cost of the wire changes, for every action, with the registry record
// created or upserted, and for TXT values that need escaping and splitting into
// 255-byte strings.
func TestChangeCostIsWhatIsSent(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	value := func() string {
		var b strings.Builder
		for range rng.IntN(700) {
			b.WriteByte(`ab"\c.`[rng.IntN(6)])
		}
		return b.String()
	}
	for i := range 2000 {
		typ := []string{providers.TypeA, providers.TypeCNAME, providers.TypeTXT}[i%3]
		r := providers.Record{Name: fmt.Sprintf("h%d.example.com", i), Type: typ, TTL: 60, Owner: value()}
		for range 1 + rng.IntN(3) {
			r.Values = append(r.Values, value())
		}
		old := r
		old.Values = []string{value()}
		unowned := r // a release: the set stays, its registry record goes
		unowned.Owner = ""
		for _, c := range []providers.Change{{Action: providers.Create, New: &r}, {Action: providers.Update, Old: &old, New: &r},
			{Action: providers.Update, Old: &r, New: &unowned}, {Action: providers.Delete, Old: &r}} {
			for _, upsert := range []bool{false, true} {
				if got, want := changeCost(c, upsert), wireCost(c, upsert); got != want {
					t.Fatalf("%s of %+v (registry upserted: %v): cost %+v, want %+v (what is sent)", c.Action, r, upsert, got, want)
				}
			}
		}
	}
	for _, v := range []string{"", `"`, strings.Repeat("x", 255), strings.Repeat("x", 256), strings.Repeat(`\`, 300), strings.Repeat("y", 510)} {
		if got, want := providers.QuotedTXTLen(v), len(providers.QuoteTXT(v)); got != want {
			t.Fatalf("QuotedTXTLen(%d bytes) = %d, want %d", len(v), got, want)
		}
	}
}
