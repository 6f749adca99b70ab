package providers

import (
	"cmp"
	"slices"
	"strings"
)

// Plan is what it takes to turn the current records into the desired ones for one owner.
type Plan struct {
	// Changes in the order to apply them: deletes, then updates, then creates, so that
	// a name can change type (CNAME -> A) within one batch.
	Changes []Change
	// Conflicts are desired records that were not planned because their name is held
	// by a record the owner does not own (or another desired record of the same key).
	Conflicts []Conflict
}

// Conflict is a desired record left alone because someone else holds its name.
type Conflict struct {
	Desired Record
	// Holders are the records at that name the owner does not own.
	Holders []Record
}

// MakePlan diffs current against desired for owner. It only touches records whose
// Owner is owner: a desired record whose name is held by a record of another owner (or
// of none) is a conflict and is left alone; an owned record that is not desired is
// deleted; records of other owners are never changed. A foreign record holds a name
// against a desired record when DNS forbids them side by side: same type, or either a
// CNAME. Desired records must be
// normalised by the provider (Provider.Normalize); their Owner is set to owner.
func MakePlan(current, desired []Record, owner string) Plan {
	foreign := map[string][]Record{}
	owned := map[Key]Record{}
	for _, r := range current {
		if r.Owner == owner {
			owned[r.Key()] = r
		} else {
			foreign[r.Name] = append(foreign[r.Name], r)
		}
	}

	var plan Plan
	var deletes, updates, creates []Change
	wanted := map[Key]bool{}
	for _, d := range desired {
		d = d.Clone()
		d.Owner = owner
		d.ProviderIDs = nil
		if wanted[d.Key()] {
			plan.Conflicts = append(plan.Conflicts, Conflict{Desired: d})
			continue
		}
		// An owned record at a conflicting key is kept as it is, never deleted: losing a
		// name to someone else must not blank it.
		wanted[d.Key()] = true
		if holders := clashing(foreign[d.Name], d.Type); len(holders) > 0 {
			plan.Conflicts = append(plan.Conflicts, Conflict{Desired: d, Holders: holders})
			continue
		}
		cur, exists := owned[d.Key()]
		switch {
		case !exists:
			creates = append(creates, Change{Action: Create, New: &d})
		case !cur.Equal(d):
			old := cur
			updates = append(updates, Change{Action: Update, Old: &old, New: &d})
		}
	}
	for key, cur := range owned {
		if !wanted[key] {
			old := cur
			deletes = append(deletes, Change{Action: Delete, Old: &old})
		}
	}
	// Map iteration is random; a stable order makes plans reproducible and batches
	// deterministic.
	byKey := func(a, b Change) int {
		return cmp.Or(cmp.Compare(a.Name(), b.Name()), cmp.Compare(a.Type(), b.Type()))
	}
	slices.SortFunc(deletes, byKey)
	slices.SortFunc(updates, byKey)
	slices.SortFunc(creates, byKey)
	plan.Changes = slices.Concat(deletes, updates, creates)
	return plan
}

// clashing returns the records that cannot coexist with a record of type typ at the
// same name: one of the same type, or any record when either side is a CNAME. A
// routing-policy set, listed as "<type>/<set identifier>" (Route53), clashes as its
// type does.
func clashing(atName []Record, typ string) []Record {
	var clash []Record
	for _, r := range atName {
		t, _, _ := strings.Cut(r.Type, "/")
		if t == typ || t == TypeCNAME || typ == TypeCNAME {
			clash = append(clash, r)
		}
	}
	return clash
}
