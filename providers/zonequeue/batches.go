package zonequeue

import (
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// limits tells what one request of the queue's provider may carry; a provider
// without batch limits takes a flush's changes in one request.
type limits struct {
	batched providers.Batched
	limit   providers.Cost
}

func (q *Queue) limits() limits {
	b, ok := q.provider.(providers.Batched)
	if !ok {
		return limits{}
	}
	return limits{batched: b, limit: b.BatchLimit()}
}

// cost is what an owner's changes take of a request.
func (l limits) cost(changes []providers.Change) providers.Cost {
	var c providers.Cost
	if l.batched == nil {
		return c
	}
	for _, ch := range changes {
		cc := l.batched.ChangeCost(ch)
		c.Records, c.Chars = c.Records+cc.Records, c.Chars+cc.Chars
	}
	return c
}

// over reports whether a request carrying c is over the limits.
func (l limits) over(c providers.Cost) bool {
	return (l.limit.Records > 0 && c.Records > l.limit.Records) || (l.limit.Chars > 0 && c.Chars > l.limit.Chars)
}

// hold puts owners back in the queue for the next flush; they keep the age of their
// desires, so that a trickle cannot hold them back forever.
func (q *Queue) hold(keys []string, pendingSince time.Time) {
	if len(keys) == 0 {
		return
	}
	lim := q.limits()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, key := range keys {
		if o, ok := q.owners[key]; ok && !o.dirty {
			q.addPending(lim, o) // not full: the flush found they do not fill a request
			o.dirty = true
		}
	}
	if q.firstDirty.IsZero() || pendingSince.Before(q.firstDirty) {
		q.firstDirty = pendingSince
	}
}
