package providers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limiter keeps one provider account within its request quota: at most Limit
// requests in any Window, and none while the provider has asked us to wait.
//
// Provider quotas are windows ("1200 requests per 5 minutes"), not token buckets: a
// token bucket with the same average rate lets a full burst through on top of the
// window's worth and then draws 429s for the rest of the window, so the window is
// tracked exactly, one slot per request of the last Limit.
//
// A request counts from when it is sent until its answer came back (Done): the
// provider counts it at some moment in between, when its bytes have arrived, and
// that moment moves with the request's size and the network. Counted from the send
// alone, a small request sent exactly a window after a large one can reach the
// provider inside the large one's window and be refused (Route53's 5 requests a
// second were refused about one call in eight that way).
type Limiter struct {
	limit  int
	window time.Duration

	mu          sync.Mutex
	slots       []slot
	freed       chan struct{} // closed and replaced when a request in flight is done
	pausedUntil time.Time
	// waiting counts the requests of ordinary priority waiting for a slot; while any
	// does, background requests (Background) wait until calm is closed.
	waiting int
	calm    chan struct{}
	// lastOrdinary is when an ordinary request last took a slot or got its answer:
	// background requests also wait while ordinary ones follow this closely (quiet).
	lastOrdinary time.Time
}

// slot is one of the last limit requests.
type slot struct {
	at       time.Time // when it was sent, then when its answer came
	inFlight bool
	id       uint64 // tells a reused slot from the request that held it before
}

// Slot is a request counted by Wait, released by Done.
type Slot struct {
	l        *Limiter
	idx      int
	id       uint64
	ordinary bool
}

// NewLimiter allows limit requests per window; limit <= 0 means unlimited.
func NewLimiter(limit int, window time.Duration) *Limiter {
	return &Limiter{limit: limit, window: window, freed: make(chan struct{}), calm: make(chan struct{})}
}

type backgroundKey struct{}

// Background marks ctx's requests as ones that may wait: while a request without the
// mark waits for a slot, a background one does not take one. A zone's periodic
// relisting (at 100,000 routes, 67 Route53 pages a zone) is background, so that the
// writes of a failover that comes meanwhile go first.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

func isBackground(ctx context.Context) bool {
	b, _ := ctx.Value(backgroundKey{}).(bool)
	return b
}

// Wait blocks until a request may be sent and counts it as sent; the caller calls
// Done on the Slot when the request's answer (or its failure) came back.
func (l *Limiter) Wait(ctx context.Context) (Slot, error) {
	if l == nil || l.limit <= 0 {
		return Slot{}, ctx.Err()
	}
	background := isBackground(ctx)
	if !background {
		l.mu.Lock()
		l.waiting++
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			if l.waiting--; l.waiting == 0 {
				close(l.calm)
				l.calm = make(chan struct{})
			}
			l.mu.Unlock()
		}()
	}
	for {
		s, wait, freed := l.reserve(time.Now(), background)
		if wait == 0 && freed == nil {
			return s, nil
		}
		if freed == nil {
			if d, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(d) {
				// Waiting would end in the deadline's error, which reads as a network
				// failure and loses how long the account is held.
				return Slot{}, &HeldError{RetryAfter: wait}
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return Slot{}, ctx.Err()
			case <-t.C:
			}
			continue
		}
		select {
		case <-ctx.Done():
			return Slot{}, ctx.Err()
		case <-freed:
		}
	}
}

// HeldError is a request the account's limiter did not send: a Retry-After from the
// provider, or the account's own request budget, holds every request of the account
// for RetryAfter, longer than the request could wait.
type HeldError struct{ RetryAfter time.Duration }

func (e *HeldError) Error() string {
	return fmt.Sprintf("not sent: the account's requests are held for %s by its rate limit", e.RetryAfter.Round(time.Second))
}

// reserve counts a request sent at now, or returns how long to wait, or a channel to
// wait on: closed when a request in flight is done (every slot is held by one) or, for
// a background request, when no ordinary request waits any more.
func (l *Limiter) reserve(now time.Time, background bool) (Slot, time.Duration, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.pausedUntil) {
		return Slot{}, l.pausedUntil.Sub(now), nil
	}
	if background {
		if l.waiting > 0 {
			return Slot{}, 0, l.calm
		}
		// A queue sending its changes request by request is between two of them for
		// the moments it takes to report the last: not waiting, but not done. A
		// background request taking the slot then would delay each of its requests by
		// one (a failover's Route53 writes interleaved with a resync's hundred pages).
		if q := l.quiet(); now.Sub(l.lastOrdinary) < q {
			return Slot{}, l.lastOrdinary.Add(q).Sub(now), nil
		}
	}
	s, wait, freed := l.take(now)
	if !background && wait == 0 && freed == nil {
		s.ordinary = true
		l.lastOrdinary = now
	}
	return s, wait, freed
}

// quiet is how long after an ordinary request (its answer) background ones still
// wait: two requests' time at the account's full rate.
func (l *Limiter) quiet() time.Duration { return 2 * l.window / time.Duration(l.limit) }

// take counts a request sent at now in a free slot, or says how long to wait or
// what to wait on; l.mu must be held.
func (l *Limiter) take(now time.Time) (Slot, time.Duration, <-chan struct{}) {
	if len(l.slots) < l.limit {
		l.slots = append(l.slots, slot{at: now, inFlight: true, id: 1})
		return Slot{l: l, idx: len(l.slots) - 1, id: 1}, 0, nil
	}
	best := -1
	for i, s := range l.slots {
		if !s.inFlight && (best < 0 || s.at.Before(l.slots[best].at)) {
			best = i
		}
	}
	if best < 0 {
		return Slot{}, 0, l.freed
	}
	if free := l.slots[best].at.Add(l.window); now.Before(free) {
		return Slot{}, free.Sub(now), nil
	}
	s := &l.slots[best]
	s.at, s.inFlight = now, true
	s.id++
	return Slot{l: l, idx: best, id: s.id}, 0, nil
}

// Done counts the request until now, when its answer came back.
func (s Slot) Done() { s.done(time.Now()) }

func (s Slot) done(now time.Time) {
	l := s.l
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.ordinary && now.After(l.lastOrdinary) {
		l.lastOrdinary = now
	}
	if sl := &l.slots[s.idx]; sl.id == s.id && sl.inFlight {
		sl.at, sl.inFlight = now, false
		close(l.freed)
		l.freed = make(chan struct{})
	}
}

// Pause holds every request for d, as a provider's Retry-After asks.
func (l *Limiter) Pause(d time.Duration) {
	if l == nil || d <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if until := time.Now().Add(d); until.After(l.pausedUntil) {
		l.pausedUntil = until
	}
}

// LimitedTransport sends every HTTP request of one account through its Limiter,
// SDK retries included, and pauses the account when a response says 429 with
// Retry-After.
type LimitedTransport struct {
	Base    http.RoundTripper
	Limiter *Limiter
	// Observe, if set, is told of every request sent: the operation it belongs to
	// (see WithOperation), the HTTP status code ("network" when none came back).
	Observe func(operation, code string)
}

// RoundTrip implements http.RoundTripper.
func (t *LimitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	slot, err := t.Limiter.Wait(req.Context())
	if err != nil {
		return nil, err
	}
	// Once the answer's headers are in (or the request failed), the provider has
	// counted it; deferred, so that a panicking transport does not hold a slot forever.
	defer slot.Done()
	resp, err := t.Base.RoundTrip(req)
	// No answer, or a 5xx other than 503 (which says the request was not taken),
	// leaves open whether the provider applied it.
	if s := sendsOf(req.Context()); s != nil {
		switch {
		case err != nil || resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable:
			s.uncertain.Add(1)
		case resp.StatusCode < 400:
			// Perhaps applied, but an answer cut short fails the call as no answer
			// would (Route53's SDK calls it a failure to decode, which reads as a
			// rejection): the call is uncertain.
			resp.Body = &watchedBody{ReadCloser: resp.Body, sends: s}
		}
	}
	if t.Observe != nil {
		code := "network"
		if err == nil {
			code = strconv.Itoa(resp.StatusCode)
		}
		t.Observe(Operation(req.Context()), code)
	}
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		t.Limiter.Pause(ParseRetryAfter(resp.Header))
	}
	if err == nil && resp.StatusCode >= 400 {
		// The SDKs read an error's body whole and keep it in the error: a gateway
		// answering with a body of gigabytes would take the manager's memory.
		resp.Body = &cutBody{ReadCloser: resp.Body, left: maxErrorBody}
	}
	return resp, err
}

// maxErrorBody bounds what is read of an error answer. Route53's largest is a
// refused batch naming each of its 1,000 changes, about 150 KB.
const maxErrorBody = 1 << 20

// cutBody ends a body after its first bytes.
type cutBody struct {
	io.ReadCloser
	left int64
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// watchedBody marks its Sends uncertain when the answer cannot be read to its end.
type watchedBody struct {
	io.ReadCloser
	sends *Sends
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.sends.uncertain.Add(1)
	}
	return n, err
}

type operationKey struct{}

// WithOperation names the provider operation (ListRecords, ApplyChanges, ...) whose
// HTTP requests ctx carries, for metrics.
func WithOperation(ctx context.Context, op string) context.Context {
	return context.WithValue(ctx, operationKey{}, op)
}

// Operation is the operation named by WithOperation, or "other".
func Operation(ctx context.Context) string {
	if op, ok := ctx.Value(operationKey{}).(string); ok {
		return op
	}
	return "other"
}

// RoundTripperFunc adapts a function, such as an SDK's HTTP client Do method, to an
// http.RoundTripper.
type RoundTripperFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f RoundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// MaxRetryAfter bounds the pause a Retry-After asks for: Cloudflare's own block after
// its five-minute rate limit is exceeded lasts five minutes, and an answer asking for
// more (a hostile one, or an HTTP date read by a clock behind the provider's) would
// stop every write of the account for as long.
const MaxRetryAfter = 5 * time.Minute

// ParseRetryAfter reads Retry-After-Ms or Retry-After (seconds or an HTTP date), at
// most MaxRetryAfter; 0 when absent or unreadable.
func ParseRetryAfter(h http.Header) time.Duration {
	seconds := func(s float64) time.Duration {
		if !(s > 0) { // NaN too
			return 0
		}
		return time.Duration(min(s, MaxRetryAfter.Seconds()) * float64(time.Second))
	}
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); (err == nil || errors.Is(err, strconv.ErrRange)) && ms > 0 {
		return seconds(ms / 1000)
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		return seconds(s)
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(at), 0), MaxRetryAfter)
	}
	return 0
}
