package providers

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestLimiterNeverExceedsTheWindow(t *testing.T) {
	l := NewLimiter(5, time.Second)
	start := time.Unix(1000, 0)
	var sent []time.Time
	now := start
	for len(sent) < 23 {
		if wait := l.reserve(now); wait > 0 {
			now = now.Add(wait)
			continue
		}
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

func TestLimiterPause(t *testing.T) {
	l := NewLimiter(100, time.Minute)
	l.Pause(150 * time.Millisecond)
	start := time.Now()
	if err := l.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 140*time.Millisecond {
		t.Errorf("Retry-After of 150ms waited %v", waited)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.Pause(time.Hour)
	if err := l.Wait(ctx); err == nil {
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
	}
	for name, c := range cases {
		if got := ParseRetryAfter(c.header); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
