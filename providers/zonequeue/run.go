package zonequeue

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// Run flushes until ctx is done.
func (q *Queue) Run(ctx context.Context) {
	var nextAttempt time.Time // after a failed flush, no new attempt before this
	backoff := time.Duration(0)
	// The queues of an account start together, with its EdgeProvider, and share its
	// rate limit: resyncing in step, every zone of a 100,000-route account was listed
	// at once (Route53: about 670 pages at 5 a second), and a failover that came then
	// waited over two minutes for its writes. Each queue's first resync comes at a
	// random point of the second half of the period, so the listings are spread out;
	// the period after it is the configured one, which keeps them apart.
	resync := time.NewTimer(q.opts.Resync/2 + rand.N(q.opts.Resync/2+1))
	defer resync.Stop()
	for {
		wait := max(q.untilFlush(), time.Until(nextAttempt))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-q.wake:
			timer.Stop()
			continue
		case <-resync.C:
			timer.Stop()
			resync.Reset(q.opts.Resync)
			q.resyncAll()
			continue
		case <-timer.C:
		}
		quiet, due := q.due()
		if !due || time.Now().Before(nextAttempt) {
			continue
		}
		// While desires keep arriving, only full batches go out; the remainder waits
		// for the stream to pause, so that a long stream costs the batch minimum.
		err := q.flush(ctx, !quiet)
		q.mu.Lock()
		heldAll := q.heldAll
		q.heldAll = false
		q.mu.Unlock()
		switch {
		case err == nil && heldAll:
			// Nothing filled a batch: planning every pending owner again at once would
			// only hold them again (the oldest desire is past MaxWait, so the queue is
			// due at once). The next try waits for Quiet: for more desires to fill a
			// batch, or for the stream to pause.
			backoff = q.opts.Quiet
		case err == nil:
			backoff = 0
		case providers.RetryAfter(err) >= time.Second:
			backoff = providers.RetryAfter(err)
		default:
			// A shorter wait asked for (Retry-After-Ms: 1) would have the zone tried
			// again at once, spending the account's budget: the backoff rules.
			backoff = min(max(2*backoff, time.Second), q.maxBackoff())
		}
		nextAttempt = time.Now().Add(backoff)
	}
}

// untilFlush is how long until pending desires are due (a day when none are).
func (q *Queue) untilFlush() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.firstDirty.IsZero() {
		return 24 * time.Hour
	}
	if q.expedite || q.full {
		return 0
	}
	now := time.Now()
	quiet := q.lastDesired.Add(q.opts.Quiet).Sub(now)
	maxWait := q.firstDirty.Add(q.opts.MaxWait).Sub(now)
	return max(0, min(quiet, maxWait))
}

// due reports whether desires are pending, and whether they stopped arriving.
func (q *Queue) due() (quiet, due bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.firstDirty.IsZero() {
		return false, false
	}
	// A trickle of desires never pauses for Quiet; what it holds back still goes out
	// once it has waited three times MaxWait.
	quiet = q.expedite || time.Since(q.lastDesired) >= q.opts.Quiet || time.Since(q.firstDirty) >= 3*q.opts.MaxWait
	return quiet, true
}

// maxBackoff caps the wait after a failed flush: MaxRefusedBackoff once the zone's
// listing has been refused for that long, else MaxBackoff. Only a listing counts: a
// write refused for good concerns the owners whose changes it carried, and the other
// owners of the zone must not wait for it.
func (q *Queue) maxBackoff() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if providers.IsPermanent(q.listErr) && time.Since(q.unreadableSince) >= q.opts.MaxRefusedBackoff {
		return max(q.opts.MaxRefusedBackoff, q.opts.MaxBackoff)
	}
	return q.opts.MaxBackoff
}
