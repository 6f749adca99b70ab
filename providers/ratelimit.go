package providers

import (
	"context"
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
// tracked exactly with the send times of the last Limit requests.
type Limiter struct {
	limit  int
	window time.Duration

	mu          sync.Mutex
	sent        []time.Time // ring buffer of the last limit send times
	next        int
	pausedUntil time.Time
}

// NewLimiter allows limit requests per window; limit <= 0 means unlimited.
func NewLimiter(limit int, window time.Duration) *Limiter {
	return &Limiter{limit: limit, window: window}
}

// Wait blocks until a request may be sent, and counts it as sent.
func (l *Limiter) Wait(ctx context.Context) error {
	if l == nil || l.limit <= 0 {
		return ctx.Err()
	}
	for {
		wait := l.reserve(time.Now())
		if wait == 0 {
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
	}
}

// reserve counts a request sent at now and returns 0, or returns how long to wait.
func (l *Limiter) reserve(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.pausedUntil) {
		return l.pausedUntil.Sub(now)
	}
	if len(l.sent) < l.limit {
		l.sent = append(l.sent, now)
		return 0
	}
	oldest := l.sent[l.next]
	if free := oldest.Add(l.window); now.Before(free) {
		return free.Sub(now)
	}
	l.sent[l.next] = now
	l.next = (l.next + 1) % l.limit
	return 0
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
	if err := t.Limiter.Wait(req.Context()); err != nil {
		return nil, err
	}
	resp, err := t.Base.RoundTrip(req)
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
	return resp, err
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

// ParseRetryAfter reads Retry-After-Ms or Retry-After (seconds or an HTTP date); 0 when absent.
func ParseRetryAfter(h http.Header) time.Duration {
	if ms, err := strconv.ParseFloat(h.Get("Retry-After-Ms"), 64); err == nil && ms > 0 {
		return time.Duration(ms * float64(time.Millisecond))
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		return time.Duration(s * float64(time.Second))
	}
	if at, err := http.ParseTime(v); err == nil {
		return time.Until(at)
	}
	return 0
}
