package route53_test

import (
	"context"
	"net/http/httptest"
	"testing"

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
