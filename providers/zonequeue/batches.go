package zonequeue

import (
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// fillBatches splits owners, in order, into those whose changes fill whole batches
// and those held back for a later flush. Owners without changes are never held.
func (q *Queue) fillBatches(keys []string, perOwner map[string][]providers.Change) (send, held []string) {
	b, ok := q.provider.(providers.Batched)
	if !ok {
		return keys, nil
	}
	limit := b.BatchLimit()
	var total providers.Cost
	costs := map[string]providers.Cost{}
	for _, key := range keys {
		var c providers.Cost
		for _, ch := range perOwner[key] {
			cc := b.ChangeCost(ch)
			c.Records, c.Chars = c.Records+cc.Records, c.Chars+cc.Chars
		}
		costs[key] = c
		total.Records, total.Chars = total.Records+c.Records, total.Chars+c.Chars
	}
	batches := fullBatches(total.Records, limit.Records)
	if limit.Chars > 0 {
		batches = min(batches, fullBatches(total.Chars, limit.Chars))
	}
	var used providers.Cost
	for _, key := range keys {
		c := costs[key]
		next := providers.Cost{Records: used.Records + c.Records, Chars: used.Chars + c.Chars}
		fits := (limit.Records == 0 || next.Records <= batches*limit.Records) && (limit.Chars == 0 || next.Chars <= batches*limit.Chars)
		if c.Records == 0 || fits {
			send = append(send, key)
			used = next
		} else {
			held = append(held, key)
		}
	}
	return send, held
}

// runs splits the owners of a flush, in order, into runs whose changes fill one
// request each (an owner's changes stay in one run). Owners without changes come
// first, in a run of their own, reported at once. A provider without batch limits
// gets one run.
func (q *Queue) runs(keys []string, perOwner map[string][]providers.Change) [][]string {
	b, ok := q.provider.(providers.Batched)
	if !ok {
		return [][]string{keys}
	}
	limit := b.BatchLimit()
	var idle, cur []string
	var runs [][]string
	var used providers.Cost
	for _, key := range keys {
		if len(perOwner[key]) == 0 {
			idle = append(idle, key)
			continue
		}
		var c providers.Cost
		for _, ch := range perOwner[key] {
			cc := b.ChangeCost(ch)
			c.Records, c.Chars = c.Records+cc.Records, c.Chars+cc.Chars
		}
		next := providers.Cost{Records: used.Records + c.Records, Chars: used.Chars + c.Chars}
		if len(cur) > 0 && ((limit.Records > 0 && next.Records > limit.Records) || (limit.Chars > 0 && next.Chars > limit.Chars)) {
			runs = append(runs, cur)
			cur, next = nil, c
		}
		cur = append(cur, key)
		used = next
	}
	if len(cur) > 0 {
		runs = append(runs, cur)
	}
	if len(idle) > 0 || len(runs) == 0 {
		runs = append([][]string{idle}, runs...)
	}
	return runs
}

func fullBatches(total, limit int) int {
	if limit == 0 {
		return 1 << 30
	}
	return total / limit
}

// hold puts owners back in the queue for the next flush; they keep the age of their
// desires, so that a trickle cannot hold them back forever.
func (q *Queue) hold(keys []string, pendingSince time.Time) {
	if len(keys) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, key := range keys {
		if o, ok := q.owners[key]; ok {
			o.dirty = true
		}
	}
	if q.firstDirty.IsZero() || pendingSince.Before(q.firstDirty) {
		q.firstDirty = pendingSince
	}
}
