package providers

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

const me = "tenantroute/default/tenants/acme"

func rec(name, typ string, ttl int64, owner string, values ...string) Record {
	return Record{Name: name, Type: typ, TTL: ttl, Values: values, Owner: owner}
}

func TestMakePlan(t *testing.T) {
	a := rec("acme.example.com", TypeA, 60, me, "192.0.2.1")
	cname := rec("acme.example.com", TypeCNAME, 60, me, "edge.example.net")
	cases := []struct {
		name      string
		current   []Record
		desired   []Record
		want      []string // "Action name type"
		conflicts []string // "name type"
	}{
		{name: "nothing to do", want: nil},
		{name: "create", desired: []Record{a}, want: []string{"Create acme.example.com A"}},
		{name: "in sync", current: []Record{a}, desired: []Record{a}, want: nil},
		{name: "provider ids are not content", current: []Record{withIDs(a, "id1")}, desired: []Record{a}, want: nil},
		{name: "ttl change", current: []Record{a}, desired: []Record{withTTL(a, 300)}, want: []string{"Update acme.example.com A"}},
		{name: "value change", current: []Record{a}, desired: []Record{rec(a.Name, TypeA, 60, me, "192.0.2.2")},
			want: []string{"Update acme.example.com A"}},
		{name: "proxied change", current: []Record{a}, desired: []Record{withProxied(a)}, want: []string{"Update acme.example.com A"}},
		{name: "no longer desired", current: []Record{a}, want: []string{"Delete acme.example.com A"}},
		{name: "type change deletes first", current: []Record{cname}, desired: []Record{a},
			want: []string{"Delete acme.example.com CNAME", "Create acme.example.com A"}},
		{name: "foreign same type conflicts", current: []Record{rec(a.Name, TypeA, 300, "", "203.0.113.9")}, desired: []Record{a},
			conflicts: []string{"acme.example.com A"}},
		{name: "other owner conflicts", current: []Record{rec(a.Name, TypeA, 60, "tenantroute/default/tenants/evil", "203.0.113.9")},
			desired: []Record{a}, conflicts: []string{"acme.example.com A"}},
		{name: "foreign CNAME conflicts with A", current: []Record{rec(a.Name, TypeCNAME, 300, "", "x.example.net")},
			desired: []Record{a}, conflicts: []string{"acme.example.com A"}},
		{name: "foreign TXT conflicts with CNAME", current: []Record{rec(a.Name, TypeTXT, 300, "", "verify=1")},
			desired: []Record{cname}, conflicts: []string{"acme.example.com CNAME"}},
		{name: "foreign TXT beside an A is fine", current: []Record{rec(a.Name, TypeTXT, 300, "", "verify=1")},
			desired: []Record{a}, want: []string{"Create acme.example.com A"}},
		{name: "owned record kept while its name is contested", current: []Record{a, rec(a.Name, TypeCNAME, 300, "", "x.example.net")},
			desired: []Record{withTTL(a, 300)}, conflicts: []string{"acme.example.com A"}},
		{name: "duplicate desired key", desired: []Record{a, withTTL(a, 300)},
			want: []string{"Create acme.example.com A"}, conflicts: []string{"acme.example.com A"}},
		// Route53 keeps a routing-policy set apart as "A/<set identifier>": it holds the
		// name against a plain A as much as a plain A does (Route53 refuses both side by
		// side), and was taken for another type, the create then refused at every resync.
		{name: "foreign weighted A conflicts", current: []Record{rec(a.Name, TypeA+"/primary", 60, "", "203.0.113.9")},
			desired: []Record{a}, conflicts: []string{"acme.example.com A"}},
		{name: "foreign failover CNAME conflicts with A", current: []Record{rec(a.Name, TypeCNAME+"/secondary", 60, "", "x.example.net")},
			desired: []Record{a}, conflicts: []string{"acme.example.com A"}},
		{name: "foreign weighted TXT beside an A is fine", current: []Record{rec(a.Name, TypeTXT+"/w1", 300, "", "v=1")},
			desired: []Record{a}, want: []string{"Create acme.example.com A"}},
		{name: "foreign records elsewhere untouched", current: []Record{rec("www.example.com", TypeA, 60, "", "192.0.2.7")},
			desired: []Record{a}, want: []string{"Create acme.example.com A"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			plan := MakePlan(c.current, c.desired, me)
			var got, conflicts []string
			for _, ch := range plan.Changes {
				got = append(got, fmt.Sprintf("%s %s %s", ch.Action, ch.Name(), ch.Type()))
			}
			for _, cf := range plan.Conflicts {
				conflicts = append(conflicts, cf.Desired.Name+" "+cf.Desired.Type)
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("changes %q, want %q", got, c.want)
			}
			if !slices.Equal(conflicts, c.conflicts) {
				t.Errorf("conflicts %q, want %q", conflicts, c.conflicts)
			}
			for _, ch := range plan.Changes {
				if ch.New != nil && ch.New.Owner != me {
					t.Errorf("%s writes owner %q", ch.Name(), ch.New.Owner)
				}
			}
		})
	}
}

func withTTL(r Record, ttl int64) Record     { r.TTL = ttl; return r }
func withProxied(r Record) Record            { r.Proxied = true; return r }
func withIDs(r Record, ids ...string) Record { r.ProviderIDs = ids; return r }

// TestPlanProperties checks, on random zones, that applying the plan to current
// yields desired for every uncontested owned name, leaves every record of another
// owner byte-identical, and that a second plan is empty.
func TestPlanProperties(t *testing.T) {
	for seed := range uint64(3000) {
		checkPlanProperties(t, seed)
	}
}

func FuzzPlan(f *testing.F) {
	for _, seed := range []uint64{1, 42, 7777} {
		f.Add(seed)
	}
	f.Fuzz(checkPlanProperties)
}

func checkPlanProperties(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, seed>>7))
	names := []string{"a.example.com", "b.example.com", "c.example.com", "d.example.com"}
	types := []string{TypeA, TypeAAAA, TypeCNAME, TypeTXT}
	owners := []string{me, me, "", "tenantroute/default/tenants/other"}
	random := func(owner string) Record {
		r := rec(names[rng.IntN(len(names))], types[rng.IntN(len(types))], int64(60*(1+rng.IntN(3))), owner)
		for range 1 + rng.IntN(2) {
			r.Values = append(r.Values, fmt.Sprintf("v%d", rng.IntN(3)))
		}
		slices.Sort(r.Values)
		r.Values = slices.Compact(r.Values)
		return r
	}
	current := map[Key]Record{}
	for range rng.IntN(8) {
		r := random(owners[rng.IntN(len(owners))])
		current[r.Key()] = r
	}
	var desired []Record
	for range rng.IntN(6) {
		desired = append(desired, random(""))
	}
	currentList := recordList(current)

	plan := MakePlan(currentList, desired, me)
	after := applyToMap(t, current, plan.Changes)

	contested := map[Key]bool{}
	for _, c := range plan.Conflicts {
		contested[c.Desired.Key()] = true
	}
	seen := map[Key]bool{}
	for _, d := range desired {
		if seen[d.Key()] || contested[d.Key()] {
			continue
		}
		seen[d.Key()] = true
		d.Owner = me
		if got, ok := after[d.Key()]; !ok || !got.Equal(d) {
			t.Fatalf("seed %d: %v not applied: got %v", seed, d, got)
		}
	}
	for k, r := range after {
		if r.Owner == me && !seen[k] && !contested[k] {
			t.Fatalf("seed %d: owned %v not desired but kept", seed, r)
		}
	}
	for k, r := range current {
		if r.Owner != me && !reflect.DeepEqual(after[k], r) {
			t.Fatalf("seed %d: foreign %v changed to %v", seed, r, after[k])
		}
	}
	if again := MakePlan(recordList(after), desired, me); len(again.Changes) != 0 {
		t.Fatalf("seed %d: plan does not converge: %v", seed, again.Changes)
	}
}

// applyToMap applies changes the way an atomic provider would, failing the test on a
// change that does not match the current state.
func applyToMap(t *testing.T, current map[Key]Record, changes []Change) map[Key]Record {
	after := map[Key]Record{}
	for k, r := range current {
		after[k] = r.Clone()
	}
	for _, c := range changes {
		if c.New != nil {
			for _, r := range after {
				if r.Name == c.New.Name && r.Owner != me && (r.Type == c.New.Type || r.Type == TypeCNAME || c.New.Type == TypeCNAME) {
					t.Fatalf("%s %v beside foreign %v, which DNS forbids", c.Action, c.New.Key(), r.Key())
				}
			}
		}
		switch c.Action {
		case Create:
			if _, ok := after[c.New.Key()]; ok {
				t.Fatalf("create of existing %v", c.New.Key())
			}
			after[c.New.Key()] = *c.New
		case Update:
			if !after[c.Old.Key()].Equal(*c.Old) {
				t.Fatalf("update from a stale %v", c.Old)
			}
			after[c.New.Key()] = *c.New
		case Delete:
			if !after[c.Old.Key()].Equal(*c.Old) {
				t.Fatalf("delete of a stale %v", c.Old)
			}
			delete(after, c.Old.Key())
		}
	}
	return after
}

func recordList(m map[Key]Record) []Record {
	var out []Record
	for _, r := range m {
		out = append(out, r)
	}
	return out
}
