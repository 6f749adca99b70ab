package providers

import (
	"context"
	"errors"
	"slices"
)

// RejectedError is a batch the provider refused because of its content (an invalid
// record, a clash with an existing record). The provider applied none of it.
type RejectedError struct{ Err error }

func (e *RejectedError) Error() string { return "batch rejected: " + e.Err.Error() }
func (e *RejectedError) Unwrap() error { return e.Err }

// Cost is what a change costs against a provider's per-request limits.
type Cost struct {
	// Records counts record elements (Cloudflare: record operations; Route53: resource
	// records, an UPSERT counting twice).
	Records int
	// Chars counts characters of values (Route53's 32000 limit).
	Chars int
}

func (c Cost) add(o Cost) Cost { return Cost{c.Records + o.Records, c.Chars + o.Chars} }

// within reports whether c fits limit; a zero dimension of limit is unlimited.
func (c Cost) within(limit Cost) bool {
	return (limit.Records == 0 || c.Records <= limit.Records) && (limit.Chars == 0 || c.Chars <= limit.Chars)
}

// Batcher applies changes in batches that respect a provider's limits and isolates
// the changes a provider rejects, so that one bad record never blocks the rest.
type Batcher struct {
	// Limit per request.
	Limit Cost
	// Cost of one change.
	Cost func(Change) Cost
	// Send applies one batch atomically and returns the changes as applied (New with
	// provider ids). It returns a *RejectedError when the provider refused the batch
	// for its content; any other error aborts the apply.
	Send func(ctx context.Context, batch []Change) ([]Change, error)
}

// Apply sends changes in order. The changes of one name stay in one batch (a type
// change deletes and creates at one name). When a batch is rejected, it is split in
// halves until each rejected name is alone, and reported in Result.Failed.
func (b Batcher) Apply(ctx context.Context, changes []Change) (Result, error) {
	var res Result
	for _, batch := range b.split(groupByName(changes)) {
		if err := b.applyIsolating(ctx, batch, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

func (b Batcher) applyIsolating(ctx context.Context, units [][]Change, res *Result) error {
	applied, err := b.Send(ctx, slices.Concat(units...))
	if err == nil {
		res.Applied = append(res.Applied, applied...)
		return nil
	}
	var rejected *RejectedError
	if !errors.As(err, &rejected) {
		return err
	}
	if len(units) == 1 {
		for _, c := range units[0] {
			res.Failed = append(res.Failed, Failure{Change: c, Err: rejected.Err})
		}
		return nil
	}
	half := len(units) / 2
	if err := b.applyIsolating(ctx, units[:half], res); err != nil {
		return err
	}
	return b.applyIsolating(ctx, units[half:], res)
}

// Batches is how many requests Apply takes for changes that all succeed: the
// fewest a provider can be sent them in, packed as Apply packs them.
func (b Batcher) Batches(changes []Change) int { return len(b.split(groupByName(changes))) }

// split packs name units into batches within the limit, keeping their order.
func (b Batcher) split(units [][]Change) [][][]Change {
	var batches [][][]Change
	var cur [][]Change
	var curCost Cost
	for _, u := range units {
		var uc Cost
		for _, c := range u {
			uc = uc.add(b.Cost(c))
		}
		if len(cur) > 0 && !curCost.add(uc).within(b.Limit) {
			batches = append(batches, cur)
			cur, curCost = nil, Cost{}
		}
		cur = append(cur, u)
		curCost = curCost.add(uc)
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches
}

// groupByName groups changes by record name, in order of each name's first change,
// keeping the changes' order within a name.
func groupByName(changes []Change) [][]Change {
	index := map[string]int{}
	var units [][]Change
	for _, c := range changes {
		i, ok := index[c.Name()]
		if !ok {
			i = len(units)
			index[c.Name()] = i
			units = append(units, nil)
		}
		units[i] = append(units[i], c)
	}
	return units
}
