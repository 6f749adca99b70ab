package route53_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/providertest"
	"github.com/tenantroute/tenantroute-operator/providers/route53"
	"github.com/tenantroute/tenantroute-operator/providers/route53/emulator"
)

const (
	accessKeyID     = "AKIACONFORMANCE"
	secretAccessKey = "conformance-secret"
)

// newEnv starts an emulator with the real rate limit and returns a provider on the
// real aws-sdk-go-v2 client pointed at it.
func newEnv(t testing.TB) (*providertest.Env, *emulator.Emulator) {
	emu := emulator.New(accessKeyID, secretAccessKey)
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	zoneID := emu.AddZone(providertest.ZoneName)
	newProvider := func(secret string) providers.Provider {
		p, err := route53.New(context.Background(), route53.Options{
			Name: "route53", Endpoint: srv.URL, AccessKeyID: accessKeyID, SecretAccessKey: secret,
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return &providertest.Env{
		Provider:         newProvider(secretAccessKey),
		WrongCredentials: newProvider("wrong-secret"),
		ZoneID:           zoneID,
		AddForeign: func(t *testing.T, r providers.Record) {
			rs := emulator.RecordSet{Name: r.Name, Type: r.Type, TTL: r.TTL}
			for _, v := range r.Values {
				if r.Type == providers.TypeTXT {
					v = providers.QuoteTXT(v)
				}
				rs.Values = append(rs.Values, v)
			}
			if err := emu.AddRecordSet(zoneID, rs); err != nil {
				t.Fatal(err)
			}
		},
		SetFaults:  emu.SetFaults,
		WriteCalls: func() int { return emu.Counters()["POST /2013-04-01/hostedzone/{Id}/rrset"] },
	}, emu
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) *providertest.Env {
		env, _ := newEnv(t)
		return env
	})
}

// BenchmarkApply20000Records: go test -run '^$' -bench Apply20000 -benchtime 1x ./providers/...
func BenchmarkApply20000Records(b *testing.B) {
	for range b.N {
		env, emu := newEnv(b)
		calls := func() int {
			n := 0
			for endpoint, c := range emu.Counters() {
				if endpoint != "GET /2013-04-01/hostedzonesbyname" { // zone lookup, once per account
					n += c
				}
			}
			return n
		}
		p := env.Provider.(*route53.Provider)
		providertest.BenchApply(b, env, 20000, calls, p.BatchLimit(), p.ChangeCost)
	}
}

// TestARegistryRecordLeftBehindDoesNotBlockACreate: someone deleted a set by hand and
// left its registry record, as written or edited; the name is free, and a create
// there takes it.
func TestARegistryRecordLeftBehindDoesNotBlockACreate(t *testing.T) {
	for name, value := range map[string]string{
		"as written": "heritage=tenantroute,owner=gone",
		"edited":     "kept by hand",
	} {
		t.Run(name, func(t *testing.T) { testRegistryRecordLeftBehind(t, value) })
	}
}

func testRegistryRecordLeftBehind(t *testing.T, value string) {
	env, emu := newEnv(t)
	ctx := context.Background()
	z, err := env.Provider.ResolveZone(ctx, providers.Zone{Name: providertest.ZoneName})
	if err != nil {
		t.Fatal(err)
	}
	name := "left." + providertest.ZoneName
	if err := emu.AddRecordSet(env.ZoneID, emulator.RecordSet{
		Name: "_tenantroute-a." + name, Type: providers.TypeTXT, TTL: 300,
		Values: []string{providers.QuoteTXT(value)},
	}); err != nil {
		t.Fatal(err)
	}
	want := providers.Record{Name: name, Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.7"}}
	_, res := providertest.Converge(t, env.Provider, z, "tenant-a", []providers.Record{want})
	if len(res.Failed) > 0 {
		t.Fatalf("the create was rejected: %v", res.Failed[0].Err)
	}
	recs, err := env.Provider.ListRecords(ctx, z)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Key() == want.Key() {
			if r.Owner != "tenant-a" {
				t.Fatalf("%s is owned by %q, want tenant-a", name, r.Owner)
			}
			return
		}
	}
	t.Fatalf("%s was not created: %v", name, recs)
}

// TestCreatesAreCountedOnce: a create's registry record is most of its characters;
// sent as a CREATE it counts once against a batch's 32,000 characters, not twice as an
// UPSERT would, so 1,000 creates with 80-byte owners take 4 requests (118 characters
// each), not 8 (227 each).
func TestCreatesAreCountedOnce(t *testing.T) {
	env, _ := newEnv(t)
	z, err := env.Provider.ResolveZone(context.Background(), providers.Zone{Name: providertest.ZoneName})
	if err != nil {
		t.Fatal(err)
	}
	owner := strings.Repeat("o", 80)
	var desired []providers.Record
	for i := range 1000 {
		desired = append(desired, providers.Record{
			Name: fmt.Sprintf("h%04d.%s", i, providertest.ZoneName), Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.1"},
		})
	}
	before := env.WriteCalls()
	_, res := providertest.Converge(t, env.Provider, z, owner, desired)
	if len(res.Applied) != 1000 || len(res.Failed) > 0 {
		t.Fatalf("applied %d, failed %d of 1000", len(res.Applied), len(res.Failed))
	}
	// 1,000 x (9 for the address + 2+27+80 for the quoted registry value) = 118,000
	// characters: 4 requests of at most 32,000.
	if got := env.WriteCalls() - before; got != 4 {
		t.Fatalf("1000 creates took %d requests, want 4", got)
	}
}

// TestZonesResolveInFewRequests: an account's zones looked up by name come from
// ListHostedZonesByName pages, one request for zones that sit together in Route53's
// order however many others the account has, and a request more for each group that
// lies beyond the page before. A zone not where the pages say it would be is looked
// up on its own before it is called missing (a permanent error); a zone given with
// its id is checked by that id.
func TestZonesResolveInFewRequests(t *testing.T) {
	env, emu := newEnv(t)
	for i := range 250 {
		emu.AddZone(fmt.Sprintf("z%03d.other.test", i)) // sorted between the groups below
	}
	want := map[string]string{}
	var zones []providers.Zone
	for i := range 10 {
		for _, suffix := range []string{"tenants.app.test", "tenants.zz.test"} {
			name := fmt.Sprintf("r%d.%s", i, suffix)
			want[name] = emu.AddZone(name)
			zones = append(zones, providers.Zone{Name: name})
		}
	}
	zones = append(zones, providers.Zone{Name: "missing.app.test"}, providers.Zone{Name: "r1.tenants.zz.test", ID: want["r1.tenants.zz.test"]},
		providers.Zone{Name: "missing.zz.test"}, providers.Zone{Name: "a.zzz"})
	lookups := func() int { return emu.Counters()["GET /2013-04-01/hostedzonesbyname"] }
	before := lookups()
	got, errs := providers.ResolveZones(context.Background(), env.Provider, zones)
	// app.test's 10 and the missing one in one page; other.test's 250 lie between
	// them and zz.test's group, which takes a second page; a.zzz, after them all, is
	// on that page too (it is not truncated). The three missing take one each more.
	if n := lookups() - before; n != 2+3 {
		t.Errorf("%d ListHostedZonesByName requests for 2 groups of zones and 3 missing ones, want 5", n)
	}
	for i, z := range zones {
		switch {
		case strings.HasPrefix(z.Name, "missing.") || z.Name == "a.zzz":
			if errs[i] == nil || !providers.IsPermanent(errs[i]) {
				t.Errorf("%s, not in the account: %v, want a permanent error", z.Name, errs[i])
			}
		case errs[i] != nil:
			t.Errorf("%s: %v", z.Name, errs[i])
		case got[i].Name != z.Name || got[i].ID != want[z.Name]:
			t.Errorf("zone %d resolved to %+v, want %s with id %s", i, got[i], z.Name, want[z.Name])
		}
	}
}

// TestZonePagesThatMisleadEndInLookups: an API whose ListHostedZonesByName pages say
// "truncated" with no zone, or list only names before the one asked for, neither
// loops nor finds a zone: the resolution ends within a request a zone or two, every
// zone a permanent error (the lookup of its own finds nothing either).
func TestZonePagesThatMisleadEndInLookups(t *testing.T) {
	for name, page := range map[string]string{
		"truncated and empty": ``,
		"names before the one asked for": `<HostedZone><Id>/hostedzone/Z1</Id><Name>aaa.test.</Name><CallerReference>x</CallerReference>` +
			`<Config><PrivateZone>false</PrivateZone></Config><ResourceRecordSetCount>2</ResourceRecordSetCount></HostedZone>`,
	} {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				w.Header().Set("Content-Type", "text/xml")
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+
					`<ListHostedZonesByNameResponse xmlns="https://route53.amazonaws.com/doc/2013-04-01/">`+
					`<HostedZones>%s</HostedZones><DNSName>%s</DNSName><IsTruncated>true</IsTruncated><MaxItems>100</MaxItems>`+
					`</ListHostedZonesByNameResponse>`, page, r.URL.Query().Get("dnsname"))
			}))
			t.Cleanup(srv.Close)
			p, err := route53.New(context.Background(), route53.Options{
				Name: "route53", Endpoint: srv.URL, AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey, RateLimit: 1000, RateWindow: time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			var zones []providers.Zone
			for i := range 5 {
				zones = append(zones, providers.Zone{Name: fmt.Sprintf("z%d.tenants.test", i)})
			}
			done := make(chan []error, 1)
			go func() { _, errs := providers.ResolveZones(context.Background(), p, zones); done <- errs }()
			select {
			case errs := <-done:
				for i, err := range errs {
					if err == nil || !providers.IsPermanent(err) {
						t.Errorf("%s: %v, want a permanent error", zones[i].Name, err)
					}
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("resolving did not end: %d requests so far", requests.Load())
			}
			if n := requests.Load(); n > 2*int64(len(zones))+1 {
				t.Errorf("%d requests for %d zones, want at most %d", n, len(zones), 2*len(zones)+1)
			}
		})
	}
}

// An answer's error code goes into statuses and conditions (a zone's listError, a
// deletion's blocker): one the size of the answer, from a broken or hostile endpoint,
// is cut to an identifier's length, and stays valid UTF-8.
func TestAnErrorCodeTheSizeOfTheAnswerIsBounded(t *testing.T) {
	code := strings.Repeat("Throttlé", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/xml")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><ErrorResponse xmlns="https://route53.amazonaws.com/doc/2013-04-01/">`+
			`<Error><Type>Sender</Type><Code>%s</Code><Message>refused</Message></Error><RequestId>r</RequestId></ErrorResponse>`, code)
	}))
	t.Cleanup(srv.Close)
	p, err := route53.New(context.Background(), route53.Options{
		Name: "route53", Endpoint: srv.URL, AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey, RateLimit: 1000, RateWindow: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.ListRecords(context.Background(), providers.Zone{Name: "tenants.test", ID: "Z1"})
	got := providers.ErrorCode(err)
	if err == nil || !providers.IsPermanent(err) || got == "" || len(got) > 64 || !utf8.ValidString(got) || !strings.HasPrefix(code, got) {
		t.Fatalf("listing answered with a %d-byte code: permanent %t, code of %d bytes (valid UTF-8 %t, a prefix %t)",
			len(code), providers.IsPermanent(err), len(got), utf8.ValidString(got), strings.HasPrefix(code, got))
	}
}

// A batch refused change by change is told in a few of its reasons, not all: Route53
// gives one per change, up to 1,000, and the error reaches the routes' statuses.
func TestARefusedBatchQuotesAFewOfItsReasons(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body strings.Builder
		body.WriteString(`<?xml version="1.0" encoding="UTF-8"?><InvalidChangeBatch xmlns="https://route53.amazonaws.com/doc/2013-04-01/"><Messages>`)
		for i := range 1000 {
			fmt.Fprintf(&body, `<Message>Tried to create resource record set [name='t%04d.tenants.test.', type='CNAME'] but it already exists</Message>`, i)
		}
		fmt.Fprintf(&body, `<Message>%s</Message></Messages><RequestId>r</RequestId></InvalidChangeBatch>`, strings.Repeat("é", 5000))
		w.Header().Set("Content-Type", "text/xml")
		w.Header().Set("Content-Length", fmt.Sprint(body.Len()))
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, body.String())
	}))
	t.Cleanup(srv.Close)
	p, err := route53.New(context.Background(), route53.Options{
		Name: "route53", Endpoint: srv.URL, AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey, RateLimit: 1000, RateWindow: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := providers.Record{Name: "t0000.tenants.test", Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}}
	res, err := p.ApplyChanges(context.Background(), providers.Zone{Name: "tenants.test", ID: "Z1"},
		[]providers.Change{{Action: providers.Create, New: &rec}})
	if err == nil && len(res.Failed) == 1 {
		err = res.Failed[0].Err
	}
	if err == nil {
		t.Fatalf("a refused batch was taken: %+v", res)
	}
	msg := err.Error()
	// The SDK decodes a share of the reasons that varies from run to run (all 1,001,
	// or the first 100 or 200): the count said is of those it gave.
	if len(msg) > 2048 || !utf8.ValidString(msg) || !strings.Contains(msg, "t0000.tenants.test") ||
		!regexp.MustCompile(`; and [0-9]+ more$`).MatchString(msg) || strings.Contains(msg, "t0005.tenants.test") {
		t.Fatalf("a batch refused with 1,001 reasons gave a %d-byte error (valid UTF-8 %t): %.300s", len(msg), utf8.ValidString(msg), msg[max(0, len(msg)-300):])
	}
}

// A listing is what plans are made against: a record missing from it is created
// beside whatever holds the name, and an owner missing from it is taken for gone. An
// answer that cannot be the whole zone is an error, never an empty or partial zone:
// a 200 with an empty or foreign body (a broken gateway), a zone without its SOA,
// and pages that do not move forward (the SDK's paginator followed them forever).
func TestAListingThatCannotBeWholeIsAnError(t *testing.T) {
	const apex = `<ResourceRecordSet><Name>example.com.</Name><Type>SOA</Type><TTL>900</TTL><ResourceRecords><ResourceRecord><Value>ns.example.com. h.example.com. 1 7200 900 1209600 86400</Value></ResourceRecord></ResourceRecords></ResourceRecordSet>`
	const a = `<ResourceRecordSet><Name>a.example.com.</Name><Type>A</Type><TTL>60</TTL><ResourceRecords><ResourceRecord><Value>192.0.2.1</Value></ResourceRecord></ResourceRecords></ResourceRecordSet>`
	listing := func(sets, tail string) string {
		return `<?xml version="1.0" encoding="UTF-8"?><ListResourceRecordSetsResponse xmlns="https://route53.amazonaws.com/doc/2013-04-01/">` +
			`<ResourceRecordSets>` + sets + `</ResourceRecordSets>` + tail + `<MaxItems>300</MaxItems></ListResourceRecordSetsResponse>`
	}
	for name, answer := range map[string]string{
		"an empty body":                   "",
		"a zone without its SOA":          listing(a, `<IsTruncated>false</IsTruncated>`),
		"truncated, with no next name":    listing(apex, `<IsTruncated>true</IsTruncated>`),
		"truncated, always the same next": listing(apex, `<IsTruncated>true</IsTruncated><NextRecordName>a.example.com.</NextRecordName><NextRecordType>A</NextRecordType>`),
	} {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				w.Header().Set("Content-Type", "text/xml")
				io.WriteString(w, answer)
			}))
			t.Cleanup(srv.Close)
			p, err := route53.New(context.Background(), route53.Options{
				Name: "route53", Endpoint: srv.URL, AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey, RateLimit: 1000, RateWindow: time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := p.ListRecords(ctx, providers.Zone{Name: "example.com", ID: "Z1"})
			if err == nil || ctx.Err() != nil {
				t.Fatalf("listed %d records (error %v, after %d requests)", len(got), err, requests.Load())
			}
			if providers.IsPermanent(err) {
				t.Errorf("%v is permanent; an answer to try again", err)
			}
			if n := requests.Load(); n > 2 {
				t.Errorf("%d requests for one listing: %v", n, err)
			}
		})
	}
	// The check costs nothing to a whole zone: a listing with its SOA is read as it is.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/xml")
		io.WriteString(w, listing(apex+a, `<IsTruncated>false</IsTruncated>`))
	}))
	t.Cleanup(srv.Close)
	p, err := route53.New(context.Background(), route53.Options{Name: "route53", Endpoint: srv.URL, AccessKeyID: accessKeyID, SecretAccessKey: secretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.ListRecords(context.Background(), providers.Zone{Name: "example.com", ID: "Z1"}); err != nil || len(got) != 2 {
		t.Errorf("a whole zone: %v, %v", got, err)
	}
}
