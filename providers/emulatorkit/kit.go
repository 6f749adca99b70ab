// Package emulatorkit holds what the provider emulators share: fault injection,
// request counting and a sliding-window rate limit.
package emulatorkit

import (
	"encoding/json"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Faults are injected into an emulator's API answers.
type Faults struct {
	// Outage answers every API request with 503.
	Outage bool `json:"outage"`
	// ErrorRate is the fraction (0-1) of API requests answered with 500.
	ErrorRate float64 `json:"errorRate"`
	// Latency is added to every API request.
	Latency Duration `json:"latency"`
	// PathLatency is added to the API requests whose path contains its key: a zone's
	// ID holds back that zone's listings and writes alone (a key such as "zones"
	// matches every request).
	PathLatency map[string]Duration `json:"pathLatency,omitempty"`
	// PathOutage answers with 503 the API requests whose path contains one of its
	// entries: a zone's ID fails that zone's listings and writes alone.
	PathOutage []string `json:"pathOutage,omitempty"`
	// TooManyRequests answers the next N API requests with 429 (Cloudflare) or a
	// Throttling error (Route53).
	TooManyRequests int `json:"tooManyRequests"`
	// Forbidden answers the next N API requests with 403, as a provider does for
	// credentials it refuses (a revoked token, an IAM policy being propagated).
	Forbidden int `json:"forbidden"`
	// ThrottleRate is the fraction (0-1) of API requests answered with 429
	// (Cloudflare) or a Throttling error (Route53), as during a provider's
	// rate-limit storm.
	ThrottleRate float64 `json:"throttleRate"`
	// RetryAfter is the Retry-After sent with injected 429s.
	RetryAfter Duration `json:"retryAfter"`
	// LoseAnswerRate is the fraction (0-1) of writes that are applied and then left
	// without an answer: the connection closes, as when a load balancer drops it
	// after the provider committed the change.
	LoseAnswerRate float64 `json:"loseAnswerRate"`
	// LoseAnswers loses the answers of the next N writes.
	LoseAnswers int `json:"loseAnswers"`
	// CutAnswers applies the next N writes and cuts their answer short: the status
	// and headers arrive, then half the body, then the connection closes.
	CutAnswers int `json:"cutAnswers"`
}

// Duration is a time.Duration written as "1.5s" in JSON.
type Duration struct{ time.Duration }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	d.Duration = v
	return err
}

// Verdict is what the fault injector decided for one request.
type Verdict int

// Verdicts.
const (
	Pass Verdict = iota
	Unavailable
	InternalError
	Throttled
	Forbidden
	// AnswerLost: serve the request with Unanswered.
	AnswerLost
	// AnswerCut: serve the request with CutShort.
	AnswerCut
)

// Kit is embedded by each emulator.
type Kit struct {
	mu       sync.Mutex
	faults   Faults
	counters map[string]int
	windows  map[string]*window
	// throttled counts the requests the rate limit refused (also in counters).
	throttled int
	// injected counts the requests answered by an injected fault.
	injected int

	// Limit and Window are the real rate limit per credential; Limit 0 disables it.
	Limit  int
	Window time.Duration
}

// SetFaults replaces the injected faults.
func (k *Kit) SetFaults(f Faults) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.faults = f
}

// Faults returns the injected faults.
func (k *Kit) Faults() Faults {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.faults
}

// SetRateLimit sets the limit per credential; 0 turns rate limiting off.
func (k *Kit) SetRateLimit(limit int, window time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Limit, k.Window = limit, window
	k.windows = nil
}

// Count adds one request to the counter of endpoint.
func (k *Kit) Count(endpoint string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.counters == nil {
		k.counters = map[string]int{}
	}
	k.counters[endpoint]++
}

// Counters returns the requests counted per endpoint ("GET /zones/{id}/dns_records").
func (k *Kit) Counters() map[string]int {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make(map[string]int, len(k.counters))
	for e, n := range k.counters {
		out[e] = n
	}
	return out
}

// ResetCounters zeroes the counters.
func (k *Kit) ResetCounters() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.counters = nil
	k.throttled = 0
	k.injected = 0
}

// Injected returns how many requests an injected fault answered since the counters
// were reset.
func (k *Kit) Injected() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.injected
}

// Throttled returns how many of the counted requests the rate limit refused.
func (k *Kit) Throttled() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.throttled
}

// Inject applies latency and decides the injected fault for one API request.
func (k *Kit) Inject(r *http.Request) (Verdict, time.Duration) {
	k.mu.Lock()
	f := k.faults
	verdict := Pass
	switch {
	case f.Outage || slices.ContainsFunc(f.PathOutage, func(part string) bool { return strings.Contains(r.URL.Path, part) }):
		verdict = Unavailable
	case f.Forbidden > 0:
		k.faults.Forbidden--
		verdict = Forbidden
	case f.TooManyRequests > 0:
		k.faults.TooManyRequests--
		verdict = Throttled
	case f.ThrottleRate > 0 && rand.Float64() < f.ThrottleRate:
		verdict = Throttled
	case f.ErrorRate > 0 && rand.Float64() < f.ErrorRate:
		verdict = InternalError
	case f.CutAnswers > 0 && r.Method != http.MethodGet:
		k.faults.CutAnswers--
		verdict = AnswerCut
	case f.LoseAnswers > 0 && r.Method != http.MethodGet:
		k.faults.LoseAnswers--
		verdict = AnswerLost
	case f.LoseAnswerRate > 0 && r.Method != http.MethodGet && rand.Float64() < f.LoseAnswerRate:
		verdict = AnswerLost
	}
	if verdict != Pass {
		k.injected++
	}
	k.mu.Unlock()
	latency := f.Latency.Duration
	for part, d := range f.PathLatency {
		if strings.Contains(r.URL.Path, part) {
			latency += d.Duration
		}
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
		}
	}
	return verdict, f.RetryAfter.Duration
}

// Admit counts a request against credential's window and returns 0, or how long
// until the window admits a request.
func (k *Kit) Admit(credential string, now time.Time) time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.Limit <= 0 {
		return 0
	}
	if k.windows == nil {
		k.windows = map[string]*window{}
	}
	w, ok := k.windows[credential]
	if !ok {
		w = &window{}
		k.windows[credential] = w
	}
	// Drop the requests that left the window.
	cut := 0
	for cut < len(w.times) && now.Sub(w.times[cut]) >= k.Window {
		cut++
	}
	w.times = w.times[cut:]
	if len(w.times) >= k.Limit {
		k.throttled++
		return w.times[0].Add(k.Window).Sub(now)
	}
	w.times = append(w.times, now)
	return 0
}

type window struct{ times []time.Time }

// Unanswered serves a request whose answer is lost: serve applies it, its answer is
// discarded, and the connection is closed without a response.
func Unanswered(serve func(http.ResponseWriter)) {
	serve(discard{http.Header{}})
	// net/http closes the connection without writing anything, and logs nothing.
	panic(http.ErrAbortHandler)
}

// CutShort serves a request whose answer is cut short: serve applies it, its status
// and headers (with the whole body's length) are sent with half the body, and the
// connection is closed.
func CutShort(w http.ResponseWriter, serve func(http.ResponseWriter)) {
	rec := httptest.NewRecorder()
	serve(rec)
	body := rec.Body.Bytes()
	maps.Copy(w.Header(), rec.Header())
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.Code)
	_, _ = w.Write(body[:len(body)/2])
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	panic(http.ErrAbortHandler)
}

type discard struct{ h http.Header }

func (d discard) Header() http.Header       { return d.h }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// ServeAdmin serves the admin endpoints every emulator shares under /__admin/:
// GET/PUT faults, GET counters, DELETE counters.
func (k *Kit) ServeAdmin(w http.ResponseWriter, r *http.Request, path string) bool {
	switch {
	case path == "/__admin/faults" && r.Method == http.MethodGet:
		writeJSON(w, k.Faults())
	case path == "/__admin/faults" && r.Method == http.MethodPut:
		var f Faults
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		k.SetFaults(f)
		writeJSON(w, f)
	case path == "/__admin/counters" && r.Method == http.MethodGet:
		writeJSON(w, k.Counters())
	case path == "/__admin/counters" && r.Method == http.MethodDelete:
		k.ResetCounters()
		w.WriteHeader(http.StatusNoContent)
	default:
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
