package providers

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// reserve's second argument: whether the request is a background one.
const ordinary, background = false, true

func TestLimiterNeverExceedsTheWindow(t *testing.T) {
	l := NewLimiter(5, time.Second)
	start := time.Unix(1000, 0)
	var sent []time.Time
	now := start
	for len(sent) < 23 {
		slot, wait, _ := l.reserve(now, ordinary)
		if wait > 0 {
			now = now.Add(wait)
			continue
		}
		slot.done(now) // answered at once
		sent = append(sent, now)
		now = now.Add(10 * time.Millisecond)
	}
	for i := range sent {
		in := 0
		for _, s := range sent {
			if !s.Before(sent[i]) && s.Sub(sent[i]) < time.Second {
				in++
			}
		}
		if in > 5 {
			t.Fatalf("%d requests in the second from %v", in, sent[i].Sub(start))
		}
	}
	// A burst goes out at once, then the pace is the limit.
	if sent[4].Sub(start) != 40*time.Millisecond || sent[5].Sub(start) != time.Second {
		t.Errorf("first window: 5th at %v, 6th at %v", sent[4].Sub(start), sent[5].Sub(start))
	}
}

// TestLimiterCountsARequestUntilItsAnswer: the provider counts a request somewhere
// between its send and its answer, so its slot is free a window after the answer, and
// not before it while it is in flight.
func TestLimiterCountsARequestUntilItsAnswer(t *testing.T) {
	l := NewLimiter(5, time.Second)
	t0 := time.Unix(1000, 0)
	var slots []Slot
	for range 5 {
		s, wait, freed := l.reserve(t0, ordinary)
		if wait != 0 || freed != nil {
			t.Fatalf("the first five wait %v (%v)", wait, freed)
		}
		slots = append(slots, s)
	}
	_, wait, freed := l.reserve(t0.Add(2*time.Second), ordinary)
	if wait != 0 || freed == nil {
		t.Fatalf("with five requests in flight a sixth went out (wait %v)", wait)
	}
	for i, s := range slots {
		s.done(t0.Add(200*time.Millisecond + time.Duration(i)*time.Millisecond))
	}
	select {
	case <-freed:
	default:
		t.Fatal("an answer did not wake the requests waiting for a slot")
	}
	if _, wait, _ := l.reserve(t0.Add(time.Second), ordinary); wait != 200*time.Millisecond {
		t.Fatalf("a window after the first send, a sixth waits %v, want 200ms (a window after the first answer)", wait)
	}
	if _, wait, freed := l.reserve(t0.Add(1200*time.Millisecond), ordinary); wait != 0 || freed != nil {
		t.Fatalf("a window after the first answer, a sixth still waits %v", wait)
	}
}

// TestLimiterIgnoresAStaleDone: a second Done of a request whose slot went to another
// request leaves that request counted in flight.
func TestLimiterIgnoresAStaleDone(t *testing.T) {
	l := NewLimiter(1, time.Second)
	t0 := time.Unix(1000, 0)
	first, _, _ := l.reserve(t0, ordinary)
	first.done(t0)
	if _, wait, freed := l.reserve(t0.Add(2*time.Second), ordinary); wait != 0 || freed != nil {
		t.Fatalf("the slot is not free a window after its answer (wait %v)", wait)
	}
	first.done(t0.Add(2 * time.Second)) // stale: the slot is the second request's now
	if _, _, freed := l.reserve(t0.Add(10*time.Second), ordinary); freed == nil {
		t.Fatal("a stale Done released the slot of the request in flight")
	}
}

// TestLimitedTransportIsNotRefusedForALateArrival: against a provider that counts a
// request once its bytes are in (here: 150 ms after the first five were sent, as a
// large body on a busy link), a sixth request sent a window after the first five's
// sends would land inside their window and be refused; counted until their answers,
// it is not.
func TestLimitedTransportIsNotRefusedForALateArrival(t *testing.T) {
	kit := &emulatorkit.Kit{Limit: 5, Window: time.Second}
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 5 {
			time.Sleep(150 * time.Millisecond)
		}
		if kit.Admit("account", time.Now()) > 0 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: &LimitedTransport{Base: http.DefaultTransport, Limiter: NewLimiter(5, time.Second)}}
	var wg sync.WaitGroup
	codes := make(chan int, 6)
	for range 6 {
		wg.Go(func() {
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != http.StatusOK {
			t.Fatalf("a request was refused (%d): %d throttled", c, kit.Throttled())
		}
	}
}

func TestLimiterPause(t *testing.T) {
	l := NewLimiter(100, time.Minute)
	l.Pause(150 * time.Millisecond)
	start := time.Now()
	if _, err := l.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 140*time.Millisecond {
		t.Errorf("Retry-After of 150ms waited %v", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.Pause(time.Hour)
	if _, err := l.Wait(ctx); err == nil {
		t.Error("Wait ignores its context")
	}
}

func TestParseRetryAfter(t *testing.T) {
	cases := map[string]struct {
		header http.Header
		want   time.Duration
	}{
		"seconds":      {http.Header{"Retry-After": {"3"}}, 3 * time.Second},
		"milliseconds": {http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"3"}}, 250 * time.Millisecond},
		"absent":       {http.Header{}, 0},
		"garbage":      {http.Header{"Retry-After": {"soon"}}, 0},
		// A provider (or a hostile answer) cannot stop the account for a day, nor can a
		// date read by a clock ten minutes behind the provider's add ten minutes.
		"a day":          {http.Header{"Retry-After": {"86400"}}, MaxRetryAfter},
		"a day in ms":    {http.Header{"Retry-After-Ms": {"86400000"}}, MaxRetryAfter},
		"a date ahead":   {http.Header{"Retry-After": {time.Now().Add(20 * time.Minute).UTC().Format(http.TimeFormat)}}, MaxRetryAfter},
		"infinite":       {http.Header{"Retry-After": {"1e400"}}, MaxRetryAfter},
		"infinite in ms": {http.Header{"Retry-After-Ms": {"1e400"}}, MaxRetryAfter},
		"a date past":    {http.Header{"Retry-After": {time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)}}, 0},
		"not a number":   {http.Header{"Retry-After": {"NaN"}}, 0},
	}
	for name, c := range cases {
		if got := ParseRetryAfter(c.header); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}

// A background request (a zone's relisting) waits while an ordinary one (a write)
// waits: the write takes the next slot though it came later, and the background
// request takes the one after.
func TestBackgroundRequestsYieldToOrdinaryOnes(t *testing.T) {
	l := NewLimiter(1, 200*time.Millisecond)
	first, err := l.Wait(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	first.Done()
	order := make(chan string, 2)
	go func() {
		s, err := l.Wait(Background(context.Background()))
		if err == nil {
			order <- "background"
			s.Done()
		}
	}()
	time.Sleep(50 * time.Millisecond) // the background request waits for the window first
	go func() {
		s, err := l.Wait(context.Background())
		if err == nil {
			order <- "ordinary"
			s.Done()
		}
	}()
	for _, want := range []string{"ordinary", "background"} {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("%s request got a slot first, want %s", got, want)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("no slot for the %s request", want)
		}
	}
}

// A queue sending a flush request by request is, between two of them, neither waiting
// nor done: a background request must not take the slot in that gap, or a resync's
// pages interleave with a failover's writes (at 100,000 routes, 100 of a failover's
// 300 Route53 calls were a resync's). Once ordinary requests stop, background ones go.
func TestBackgroundRequestsWaitForOrdinaryOnesToPause(t *testing.T) {
	l := NewLimiter(5, time.Second) // Route53's pace: quiet is 400 ms
	t0 := time.Now()
	s, wait, freed := l.reserve(t0, ordinary)
	if wait != 0 || freed != nil {
		t.Fatal("no slot for the first request")
	}
	s.done(t0.Add(300 * time.Millisecond)) // its answer
	// 50 ms later, four slots free: the queue is reporting the answer and will send more.
	if _, wait, _ := l.reserve(t0.Add(350*time.Millisecond), background); wait != 350*time.Millisecond {
		t.Fatalf("a background request 50 ms after an ordinary answer waits %v, want 350ms", wait)
	}
	if _, wait, freed := l.reserve(t0.Add(360*time.Millisecond), ordinary); wait != 0 || freed != nil {
		t.Fatal("the queue's next request waited")
	}
	if _, wait, _ := l.reserve(t0.Add(700*time.Millisecond), background); wait != 60*time.Millisecond {
		t.Fatalf("a background request 340 ms after an ordinary send waits %v, want 60ms", wait)
	}
	if _, wait, freed := l.reserve(t0.Add(800*time.Millisecond), background); wait != 0 || freed != nil {
		t.Fatalf("once ordinary requests paused, a background one still waits %v", wait)
	}
}

// A write's attempts are uncertain when one got no answer or a 5xx other than 503:
// the provider may have applied it, and a 429 or 503 on the retry does not say
// otherwise. Answers that say the request was not taken (429, 503, 4xx) leave it
// certain.
func TestSendsMarksAttemptsThatMayHaveApplied(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answers   []int // 0: no answer; negative: that status, its body cut short
		uncertain bool
	}{
		{"503 then 429", []int{503, 429}, false},
		{"a rejection", []int{400}, false},
		{"500 then 503", []int{500, 503}, true},
		{"502", []int{502}, true},
		{"no answer, then 201", []int{0, 201}, true},
		// The status says applied; the SDK, failing to read the answer, sends it again.
		{"201 with its body cut", []int{-201}, true},
		{"400 with its body cut", []int{-400}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			tr := &LimitedTransport{Limiter: NewLimiter(0, time.Second), Base: RoundTripperFunc(func(*http.Request) (*http.Response, error) {
				code := tc.answers[i]
				i++
				if code == 0 {
					return nil, errors.New("connection reset by peer")
				}
				if code < 0 {
					cut := io.MultiReader(strings.NewReader(`{"result":`), iotest.ErrReader(errors.New("connection reset by peer")))
					return &http.Response{StatusCode: -code, Header: http.Header{}, Body: io.NopCloser(cut)}, nil
				}
				return &http.Response{StatusCode: code, Header: http.Header{}, Body: http.NoBody}, nil
			})}
			ctx, sends := CountSends(context.Background())
			for range tc.answers {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.invalid/", nil)
				if resp, err := tr.RoundTrip(req); err == nil {
					_, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
			}
			if got := sends.Uncertain(); got != tc.uncertain {
				t.Errorf("uncertain = %t, want %t", got, tc.uncertain)
			}
		})
	}
}
