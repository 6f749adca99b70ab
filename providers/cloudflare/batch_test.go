package cloudflare

import (
	"encoding/json"
	"reflect"
	"testing"

	cf "github.com/cloudflare/cloudflare-go/v7"
	"github.com/cloudflare/cloudflare-go/v7/dns"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// sdkBatch is the request body of a batch as the SDK's parameter types encode it: how
// the provider built it before it built the body itself. Tests link the SDK's root
// package; the provider does not.
func sdkBatch(t *testing.T, batch []providers.Change) []byte {
	t.Helper()
	var deletes []dns.RecordBatchParamsDelete
	var patches []dns.BatchPatchUnionParam
	var posts []dns.RecordBatchParamsPostUnion
	for _, c := range batch {
		o := operations(c)
		for _, id := range o.deletes {
			deletes = append(deletes, dns.RecordBatchParamsDelete{ID: cf.F(id)})
		}
		for _, op := range o.patches {
			r := *c.New
			name, ttl, content, proxied, note := cf.F(r.Name), cf.F(dns.TTL(r.TTL)), cf.F(r.Values[op.value]), cf.F(r.Proxied), cf.F(comment(r.Owner))
			var patch dns.BatchPatchUnionParam
			switch r.Type {
			case providers.TypeA:
				patch = dns.BatchPatchARecordParam{ID: cf.F(op.id), ARecordParam: dns.ARecordParam{
					Name: name, TTL: ttl, Type: cf.F(dns.ARecordTypeA), Content: content, Proxied: proxied, Comment: note}}
			case providers.TypeAAAA:
				patch = dns.BatchPatchAAAARecordParam{ID: cf.F(op.id), AAAARecordParam: dns.AAAARecordParam{
					Name: name, TTL: ttl, Type: cf.F(dns.AAAARecordTypeAAAA), Content: content, Proxied: proxied, Comment: note}}
			case providers.TypeCNAME:
				patch = dns.BatchPatchCNAMERecordParam{ID: cf.F(op.id), CNAMERecordParam: dns.CNAMERecordParam{
					Name: name, TTL: ttl, Type: cf.F(dns.CNAMERecordTypeCNAME), Content: content, Proxied: proxied, Comment: note}}
			case providers.TypeTXT:
				patch = dns.BatchPatchTXTRecordParam{ID: cf.F(op.id), TXTRecordParam: dns.TXTRecordParam{
					Name: name, TTL: ttl, Type: cf.F(dns.TXTRecordTypeTXT), Content: content, Comment: note}}
			}
			patches = append(patches, patch)
		}
		for _, op := range o.posts {
			r := c.New
			posts = append(posts, dns.RecordBatchParamsPost{
				Name: cf.F(r.Name), Type: cf.F(dns.RecordBatchParamsPostsType(r.Type)), TTL: cf.F(dns.TTL(r.TTL)),
				Content: cf.F(r.Values[op.value]), Proxied: cf.F(r.Proxied), Comment: cf.F(comment(r.Owner)),
			})
		}
	}
	params := dns.RecordBatchParams{ZoneID: cf.F("z")}
	if len(deletes) > 0 {
		params.Deletes = cf.F(deletes)
	}
	if len(patches) > 0 {
		params.Patches = cf.F(patches)
	}
	if len(posts) > 0 {
		params.Posts = cf.F(posts)
	}
	b, err := params.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBatchBodyIsTheSDKs(t *testing.T) {
	rec := func(name, typ string, ttl int64, proxied bool, owner string, values, ids []string) *providers.Record {
		return &providers.Record{Name: name, Type: typ, TTL: ttl, Proxied: proxied, Owner: owner, Values: values, ProviderIDs: ids}
	}
	batches := map[string][]providers.Change{
		"creates": {
			{Action: providers.Create, New: rec("a.example.com", providers.TypeCNAME, 60, false, "tenants/a", []string{"edge.example.net"}, nil)},
			{Action: providers.Create, New: rec("b.example.com", providers.TypeA, 1, true, "tenants/b", []string{"192.0.2.1", "192.0.2.2"}, nil)},
			{Action: providers.Create, New: rec("_c.example.com", providers.TypeTXT, 300, false, "", []string{"proof"}, nil)},
		},
		"updates of every patchable type": {
			{Action: providers.Update, Old: rec("a.example.com", providers.TypeCNAME, 60, false, "tenants/a", []string{"old.example.net"}, []string{"id1"}),
				New: rec("a.example.com", providers.TypeCNAME, 120, true, "tenants/a", []string{"new.example.net"}, nil)},
			{Action: providers.Update, Old: rec("t.example.com", providers.TypeTXT, 60, false, "tenants/t", []string{"v1"}, []string{"id2"}),
				New: rec("t.example.com", providers.TypeTXT, 60, false, "tenants/t", []string{"v2"}, nil)},
			{Action: providers.Update, Old: rec("x.example.com", providers.TypeAAAA, 60, false, "tenants/x", []string{"2001:db8::1", "2001:db8::2"}, []string{"id3", "id4"}),
				New: rec("x.example.com", providers.TypeAAAA, 60, false, "tenants/x", []string{"2001:db8::2", "2001:db8::3", "2001:db8::4"}, nil)},
			{Action: providers.Update, Old: rec("y.example.com", providers.TypeA, 60, false, "tenants/y", []string{"192.0.2.7", "192.0.2.8"}, []string{"id5", "id6"}),
				New: rec("y.example.com", providers.TypeA, 60, false, "tenants/y", []string{"192.0.2.9"}, nil)},
		},
		"deletes": {
			{Action: providers.Delete, Old: rec("gone.example.com", providers.TypeCNAME, 60, false, "tenants/g", []string{"edge.example.net"}, []string{"id7"})},
		},
	}
	for name, batch := range batches {
		t.Run(name, func(t *testing.T) {
			body, _, err := batchOf(batch)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(ours, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(sdkBatch(t, batch), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("batch body\n got %s\nwant %s", ours, sdkBatch(t, batch))
			}
		})
	}
	// A type the batch cannot patch is refused, as the SDK has no parameter for it.
	mx := []providers.Change{{Action: providers.Update, Old: rec("m.example.com", "MX", 60, false, "o", []string{"10 a"}, []string{"id"}),
		New: rec("m.example.com", "MX", 60, false, "o", []string{"20 a"}, nil)}}
	if _, _, err := batchOf(mx); err == nil {
		t.Error("a patch of an MX record was built")
	}
}
