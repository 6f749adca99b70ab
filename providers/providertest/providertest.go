// Package providertest is the conformance suite every DNS provider passes, run
// through the provider's real SDK client against its emulator.
package providertest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// Env is one provider wired to a fresh emulator holding the zone example.com.
type Env struct {
	// Provider talks to the emulator with valid credentials.
	Provider providers.Provider
	// WrongCredentials talks to the emulator with credentials it refuses.
	WrongCredentials providers.Provider
	// ZoneID is the emulator's id of example.com.
	ZoneID string
	// AddForeign creates a record directly in the emulator, as someone else would.
	AddForeign func(t *testing.T, r providers.Record)
	// SetFaults injects faults into the emulator's API.
	SetFaults func(emulatorkit.Faults)
	// WriteCalls counts the emulator's write requests so far.
	WriteCalls func() int
	// RetryAfterSent says whether the emulator's injected throttling carries
	// Retry-After (Cloudflare does; Route53 does not and the SDK backs off).
	RetryAfterSent bool
}

// ZoneName is the zone every Env holds.
const ZoneName = "example.com"

const owner = "conformance/default/tenants/acme"

// Run runs the conformance suite; newEnv is called once per test.
func Run(t *testing.T, newEnv func(t *testing.T) *Env) {
	t.Run("ResolveZone", func(t *testing.T) { testResolveZone(t, newEnv(t)) })
	t.Run("CreateUpdateDelete", func(t *testing.T) { testCreateUpdateDelete(t, newEnv(t)) })
	t.Run("SteadyStateMakesNoWrites", func(t *testing.T) { testSteadyState(t, newEnv(t)) })
	t.Run("ForeignRecordsUntouched", func(t *testing.T) { testForeign(t, newEnv(t)) })
	t.Run("OneBadRecordInFiveHundred", func(t *testing.T) { testIsolation(t, newEnv(t)) })
	t.Run("TooManyRequestsStorm", func(t *testing.T) { testStorm(t, newEnv(t)) })
	t.Run("OutageIsTransient", func(t *testing.T) { testOutage(t, newEnv(t)) })
	t.Run("AppliedChangeWithItsAnswerLost", func(t *testing.T) { testLostAnswer(t, newEnv(t), emulatorkit.Faults{LoseAnswers: 1}) })
	t.Run("AppliedChangeWithItsAnswerCut", func(t *testing.T) { testLostAnswer(t, newEnv(t), emulatorkit.Faults{CutAnswers: 1}) })
	t.Run("EveryAnswerLost", func(t *testing.T) { testLostAnswer(t, newEnv(t), emulatorkit.Faults{LoseAnswerRate: 1}) })
	t.Run("WrongCredentialsArePermanent", func(t *testing.T) { testWrongCredentials(t, newEnv(t)) })
}

func zone(t *testing.T, env *Env) providers.Zone {
	t.Helper()
	z, err := env.Provider.ResolveZone(context.Background(), providers.Zone{Name: ZoneName})
	if err != nil {
		t.Fatalf("resolving %s: %v", ZoneName, err)
	}
	return z
}

// Converge plans desired against the provider's records for owner and applies the
// plan, returning the result.
func Converge(t *testing.T, p providers.Provider, z providers.Zone, owner string, desired []providers.Record) (providers.Plan, providers.Result) {
	t.Helper()
	ctx := context.Background()
	current, err := p.ListRecords(ctx, z)
	if err != nil {
		t.Fatalf("listing: %v", err)
	}
	normalised := make([]providers.Record, len(desired))
	for i, d := range desired {
		normalised[i] = p.Normalize(d)
	}
	plan := providers.MakePlan(current, normalised, owner)
	res, err := p.ApplyChanges(ctx, z, plan.Changes)
	if err != nil {
		t.Fatalf("applying %d changes: %v", len(plan.Changes), err)
	}
	return plan, res
}

// owned returns the records of owner in the zone, provider ids dropped.
func owned(t *testing.T, p providers.Provider, z providers.Zone, owner string) []providers.Record {
	t.Helper()
	recs, err := p.ListRecords(context.Background(), z)
	if err != nil {
		t.Fatalf("listing: %v", err)
	}
	var out []providers.Record
	for _, r := range recs {
		if r.Owner == owner {
			r.ProviderIDs = nil
			out = append(out, r)
		}
	}
	return out
}

func assertOwned(t *testing.T, p providers.Provider, z providers.Zone, want []providers.Record) {
	t.Helper()
	got := owned(t, p, z, owner)
	var norm []providers.Record
	for _, w := range want {
		w = p.Normalize(w)
		w.Owner = owner
		norm = append(norm, w)
	}
	sortRecords(got)
	sortRecords(norm)
	if !reflect.DeepEqual(got, norm) {
		t.Fatalf("records in the zone:\n%v\nwant:\n%v", got, norm)
	}
}

func sortRecords(rs []providers.Record) {
	slices.SortFunc(rs, func(a, b providers.Record) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Type, b.Type))
	})
}

func testResolveZone(t *testing.T, env *Env) {
	ctx := context.Background()
	z := zone(t, env)
	if z.ID != env.ZoneID {
		t.Errorf("zone looked up by name has id %q, want %q", z.ID, env.ZoneID)
	}
	if _, err := env.Provider.ResolveZone(ctx, providers.Zone{Name: ZoneName, ID: env.ZoneID}); err != nil {
		t.Errorf("zone with its id: %v", err)
	}
	_, err := env.Provider.ResolveZone(ctx, providers.Zone{Name: "missing.example.org"})
	if err == nil || !providers.IsPermanent(err) {
		t.Errorf("a zone that does not exist: want a permanent error, got %v", err)
	}
	zs, errs := providers.ResolveZones(ctx, env.Provider, []providers.Zone{{Name: "missing.example.org"}, {Name: ZoneName}})
	if errs[0] == nil || !providers.IsPermanent(errs[0]) || errs[1] != nil || zs[1].ID != env.ZoneID {
		t.Errorf("resolving a missing zone and %s together: %+v, %v; want a permanent error and id %q", ZoneName, zs, errs, env.ZoneID)
	}
}

func testCreateUpdateDelete(t *testing.T, env *Env) {
	z := zone(t, env)
	desired := []providers.Record{
		{Name: "a.example.com", Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.1", "192.0.2.2"}},
		{Name: "aaaa.example.com", Type: providers.TypeAAAA, TTL: 60, Values: []string{"2001:db8::1"}},
		{Name: "cname.example.com", Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}},
		{Name: "txt.example.com", Type: providers.TypeTXT, TTL: 60, Values: []string{"hello \"world\"", "v=spf1 -all"}},
	}
	if _, res := Converge(t, env.Provider, z, owner, desired); len(res.Applied) != 4 || len(res.Failed) != 0 {
		t.Fatalf("create: applied %d, failed %v", len(res.Applied), res.Failed)
	}
	assertOwned(t, env.Provider, z, desired)

	updated := []providers.Record{
		{Name: "a.example.com", Type: providers.TypeA, TTL: 300, Values: []string{"192.0.2.2", "192.0.2.3"}},
		{Name: "aaaa.example.com", Type: providers.TypeAAAA, TTL: 60, Values: []string{"2001:db8::2"}},
		{Name: "cname.example.com", Type: providers.TypeCNAME, TTL: 60, Values: []string{"standby.example.net"}},
		{Name: "txt.example.com", Type: providers.TypeTXT, TTL: 120, Values: []string{"v=spf1 -all"}},
	}
	if plan, res := Converge(t, env.Provider, z, owner, updated); len(plan.Changes) != 4 || len(res.Failed) != 0 {
		t.Fatalf("update: %d changes, failed %v", len(plan.Changes), res.Failed)
	}
	assertOwned(t, env.Provider, z, updated)

	// A name changes type: CNAME -> A within one apply.
	retyped := slices.Clone(updated)
	retyped[2] = providers.Record{Name: "cname.example.com", Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.9"}}
	if _, res := Converge(t, env.Provider, z, owner, retyped); len(res.Failed) != 0 {
		t.Fatalf("type change failed: %v", res.Failed)
	}
	assertOwned(t, env.Provider, z, retyped)

	if _, res := Converge(t, env.Provider, z, owner, nil); len(res.Failed) != 0 {
		t.Fatalf("delete failed: %v", res.Failed)
	}
	assertOwned(t, env.Provider, z, nil)
}

func testSteadyState(t *testing.T, env *Env) {
	z := zone(t, env)
	var desired []providers.Record
	for i := range 50 {
		desired = append(desired, providers.Record{Name: fmt.Sprintf("t%d.example.com", i), Type: providers.TypeCNAME, TTL: 60,
			Values: []string{fmt.Sprintf("t%d.example.com.cdn.example.net.", i)}})
	}
	desired = append(desired, providers.Record{Name: "Upper.Example.com.", Type: providers.TypeTXT, TTL: 30, Values: []string{`"quoted"`}})
	Converge(t, env.Provider, z, owner, desired)
	writes := env.WriteCalls()
	plan, _ := Converge(t, env.Provider, z, owner, desired)
	if len(plan.Changes) != 0 {
		t.Errorf("second apply of the same desired state plans %d changes, e.g. %+v", len(plan.Changes), plan.Changes[0])
	}
	if n := env.WriteCalls() - writes; n != 0 {
		t.Errorf("second apply of the same desired state made %d write calls", n)
	}
}

func testForeign(t *testing.T, env *Env) {
	z := zone(t, env)
	foreign := []providers.Record{
		{Name: "www.example.com", Type: providers.TypeA, TTL: 300, Values: []string{"203.0.113.10"}},
		{Name: "acme.example.com", Type: providers.TypeTXT, TTL: 300, Values: []string{"site-verification=abc"}},
		{Name: "taken.example.com", Type: providers.TypeCNAME, TTL: 300, Values: []string{"someone.example.org"}},
	}
	for _, r := range foreign {
		env.AddForeign(t, r)
	}
	before := foreignRecords(t, env.Provider, z)
	desired := []providers.Record{
		{Name: "acme.example.com", Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.1"}},
		{Name: "taken.example.com", Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}},
	}
	plan, res := Converge(t, env.Provider, z, owner, desired)
	if len(plan.Conflicts) != 1 || plan.Conflicts[0].Desired.Name != "taken.example.com" {
		t.Errorf("want one conflict at taken.example.com, got %+v", plan.Conflicts)
	}
	if len(res.Failed) != 0 {
		t.Errorf("failed: %v", res.Failed)
	}
	assertOwned(t, env.Provider, z, desired[:1])
	Converge(t, env.Provider, z, owner, nil)
	if after := foreignRecords(t, env.Provider, z); !reflect.DeepEqual(after, before) {
		t.Errorf("foreign records changed:\nbefore %v\nafter  %v", before, after)
	}
}

func foreignRecords(t *testing.T, p providers.Provider, z providers.Zone) []providers.Record {
	recs, err := p.ListRecords(context.Background(), z)
	if err != nil {
		t.Fatal(err)
	}
	var out []providers.Record
	for _, r := range recs {
		if r.Owner == "" {
			out = append(out, r)
		}
	}
	sortRecords(out)
	return out
}

func testIsolation(t *testing.T, env *Env) {
	z := zone(t, env)
	var desired []providers.Record
	for i := range 500 {
		desired = append(desired, providers.Record{Name: fmt.Sprintf("r%03d.example.com", i), Type: providers.TypeA, TTL: 60,
			Values: []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250)}})
	}
	desired[317].Values = []string{"10.0.1.300"} // not an IPv4 address
	_, res := Converge(t, env.Provider, z, owner, desired)
	if len(res.Applied) != 499 || len(res.Failed) != 1 {
		t.Fatalf("applied %d, failed %d; want 499 and 1", len(res.Applied), len(res.Failed))
	}
	if f := res.Failed[0]; f.Change.New.Name != "r317.example.com" || f.Err == nil {
		t.Errorf("failure reported for %s (%v), want r317.example.com with its error", f.Change.New.Name, f.Err)
	}
	if got := len(owned(t, env.Provider, z, owner)); got != 499 {
		t.Errorf("%d records in the zone, want 499", got)
	}
}

func testStorm(t *testing.T, env *Env) {
	z := zone(t, env)
	const throttled = 4
	retryAfter := time.Second
	env.SetFaults(emulatorkit.Faults{TooManyRequests: throttled, RetryAfter: emulatorkit.Duration{Duration: retryAfter}})
	desired := []providers.Record{{Name: "storm.example.com", Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.4"}}}
	ctx := context.Background()
	start := time.Now()
	// As a controller would: retry transient failures until the apply goes through.
	var lastErr error
	for attempt := 0; attempt < 20; attempt++ {
		current, err := env.Provider.ListRecords(ctx, z)
		if err == nil {
			plan := providers.MakePlan(current, []providers.Record{env.Provider.Normalize(desired[0])}, owner)
			_, err = env.Provider.ApplyChanges(ctx, z, plan.Changes)
		}
		if lastErr = err; err == nil {
			break
		}
		if providers.IsPermanent(err) {
			t.Fatalf("throttling classified permanent: %v", err)
		}
	}
	if lastErr != nil {
		t.Fatalf("apply never succeeded through the storm: %v", lastErr)
	}
	assertOwned(t, env.Provider, z, desired)
	if elapsed := time.Since(start); env.RetryAfterSent && elapsed < throttled*retryAfter {
		t.Errorf("%d answers of 429 with Retry-After %s were waited out in %s", throttled, retryAfter, elapsed)
	}
}

func testOutage(t *testing.T, env *Env) {
	z := zone(t, env)
	env.SetFaults(emulatorkit.Faults{Outage: true})
	defer env.SetFaults(emulatorkit.Faults{})
	_, err := env.Provider.ListRecords(context.Background(), z)
	if err == nil || providers.IsPermanent(err) {
		t.Fatalf("during an outage: want a transient error, got %v", err)
	}
	var pe *providers.Error
	if !errors.As(err, &pe) || pe.Provider == "" {
		t.Errorf("error does not name its provider: %v", err)
	}
}

// A provider commits a change and the answer never arrives (the connection drops):
// the error must be transient, and applying again what a fresh list still needs must
// converge to exactly the desired records: no duplicate from a create sent twice, no
// failure for a delete of what is gone.
func testLostAnswer(t *testing.T, env *Env, lost emulatorkit.Faults) {
	z := zone(t, env)
	before := []providers.Record{
		{Name: "a.example.com", Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.1"}},
		{Name: "gone.example.com", Type: providers.TypeTXT, TTL: 60, Values: []string{"v=1"}},
	}
	Converge(t, env.Provider, z, owner, before)
	desired := []providers.Record{
		{Name: "a.example.com", Type: providers.TypeA, TTL: 60, Values: []string{"192.0.2.2"}},
		{Name: "b.example.com", Type: providers.TypeCNAME, TTL: 60, Values: []string{"edge.example.net"}},
		{Name: "c.example.com", Type: providers.TypeTXT, TTL: 60, Values: []string{"v=2"}},
	}
	ctx := context.Background()
	current, err := env.Provider.ListRecords(ctx, z)
	if err != nil {
		t.Fatal(err)
	}
	normalised := make([]providers.Record, len(desired))
	for i, d := range desired {
		normalised[i] = env.Provider.Normalize(d)
	}
	plan := providers.MakePlan(current, normalised, owner)
	env.SetFaults(lost)
	res, err := env.Provider.ApplyChanges(ctx, z, plan.Changes)
	env.SetFaults(emulatorkit.Faults{})
	// The SDKs resend a write whose connection dropped; the resend finds the change
	// applied ("already exists", "not found"). That is no verdict on the changes.
	if err == nil || providers.IsPermanent(err) || len(res.Failed) > 0 {
		t.Fatalf("a change whose answer was lost: want a transient error, got %v, failed %v", err, res.Failed)
	}
	// As a controller would: list again, plan what is still missing, apply.
	for attempt := 0; ; attempt++ {
		current, err := env.Provider.ListRecords(ctx, z)
		if err != nil {
			t.Fatal(err)
		}
		plan := providers.MakePlan(current, normalised, owner)
		res, err := env.Provider.ApplyChanges(ctx, z, plan.Changes)
		if err == nil && len(res.Failed) == 0 {
			break
		}
		if attempt == 3 || providers.IsPermanent(err) {
			t.Fatalf("applying again after the lost answer: %v, failed %v", err, res.Failed)
		}
	}
	assertOwned(t, env.Provider, z, desired)
}

func testWrongCredentials(t *testing.T, env *Env) {
	_, err := env.WrongCredentials.ListRecords(context.Background(), providers.Zone{Name: ZoneName, ID: env.ZoneID})
	if err == nil || !providers.IsPermanent(err) {
		t.Fatalf("wrong credentials: want a permanent error, got %v", err)
	}
}

// BenchApply applies n new records into the empty zone of env, timed, and reports the
// API calls made against the fewest the batch limit allows (one list, then the total
// cost of the changes divided by the per-request limit in its binding dimension).
func BenchApply(b *testing.B, env *Env, n int, calls func() int, limit providers.Cost, cost func(providers.Change) providers.Cost) {
	ctx := context.Background()
	z, err := env.Provider.ResolveZone(ctx, providers.Zone{Name: ZoneName})
	if err != nil {
		b.Fatal(err)
	}
	desired := make([]providers.Record, n)
	for i := range desired {
		desired[i] = env.Provider.Normalize(providers.Record{Name: fmt.Sprintf("tenant-%05d.example.com", i), Type: providers.TypeCNAME,
			TTL: 60, Values: []string{"edge.example.net"}})
	}
	before := calls()
	start := time.Now()
	current, err := env.Provider.ListRecords(ctx, z)
	if err != nil {
		b.Fatal(err)
	}
	plan := providers.MakePlan(current, desired, owner)
	res, err := env.Provider.ApplyChanges(ctx, z, plan.Changes)
	wall := time.Since(start)
	if err != nil || len(res.Applied) != n {
		b.Fatalf("applied %d of %d: %v", len(res.Applied), n, err)
	}
	var total providers.Cost
	for _, c := range plan.Changes {
		total.Records += cost(c).Records
		total.Chars += cost(c).Chars
	}
	minimum := 1 + ceilDiv(total.Records, limit.Records)
	if limit.Chars > 0 {
		minimum = max(minimum, 1+ceilDiv(total.Chars, limit.Chars))
	}
	made := calls() - before
	b.ReportMetric(float64(made), "calls")
	b.ReportMetric(float64(minimum), "min-calls")
	b.ReportMetric(float64(made)/float64(minimum), "calls/min")
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.Logf("%d records: %d API calls (minimum %d, %.2fx), %.1f s", n, made, minimum, float64(made)/float64(minimum), wall.Seconds())
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
