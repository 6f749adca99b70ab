package cloudflare_test

import (
	"net/http/httptest"
	"testing"

	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/cloudflare"
	"github.com/tenantroute/tenantroute-operator/providers/cloudflare/emulator"
	"github.com/tenantroute/tenantroute-operator/providers/providertest"
)

const token = "conformance-token"

// newEnv starts an emulator with the real rate limit and returns a provider on the
// real cloudflare-go client pointed at it.
func newEnv(t testing.TB) (*providertest.Env, *emulator.Emulator) {
	emu := emulator.New(token)
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	zoneID := emu.AddZone(providertest.ZoneName)
	newProvider := func(tok string) providers.Provider {
		return cloudflare.New(cloudflare.Options{Name: "cloudflare", APIToken: tok, BaseURL: srv.URL + "/client/v4/"})
	}
	return &providertest.Env{
		Provider:         newProvider(token),
		WrongCredentials: newProvider("revoked-token"),
		ZoneID:           zoneID,
		AddForeign: func(t *testing.T, r providers.Record) {
			for _, v := range r.Values {
				if _, err := emu.AddRecord(zoneID, emulator.Record{Name: r.Name, Type: r.Type, Content: v, TTL: r.TTL}); err != nil {
					t.Fatal(err)
				}
			}
		},
		SetFaults:      emu.SetFaults,
		WriteCalls:     func() int { return emu.Counters()["POST /zones/{id}/dns_records/batch"] },
		RetryAfterSent: true,
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
		p := env.Provider.(*cloudflare.Provider)
		providertest.BenchApply(b, env, 20000, func() int { return total(emu.Counters()) }, p.BatchLimit(), p.ChangeCost)
	}
}

func total(counters map[string]int) int {
	n := 0
	for endpoint, c := range counters {
		if endpoint != "GET /zones" { // zone lookup, once per account
			n += c
		}
	}
	return n
}
