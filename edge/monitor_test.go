package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestMonitorReportsTransitions(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	var hosts sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hosts.Store(r.Host, true)
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusFound) // 3xx counts as healthy
	}))
	defer srv.Close()

	m, transitions := startMonitor(t)
	m.Watch("cf", Check{URL: srv.URL + "/healthz", HostHeader: "probe.example.com", Interval: 20 * time.Millisecond,
		Timeout: 10 * time.Millisecond, FailureThreshold: 3, SuccessThreshold: 2}, Unknown)

	expect := func(from, to State) Transition {
		t.Helper()
		select {
		case tr := <-transitions:
			if tr.Edge != "cf" || tr.From != from || tr.To != to {
				t.Fatalf("transition %+v, want %s -> %s", tr, from, to)
			}
			return tr
		case <-time.After(5 * time.Second):
			t.Fatalf("no transition %s -> %s", from, to)
		}
		return Transition{}
	}
	expect(Unknown, Healthy)
	healthy.Store(false)
	tr := expect(Healthy, Unhealthy)
	if tr.Probe.OK || tr.Probe.Message == "" {
		t.Errorf("deciding probe %+v", tr.Probe)
	}
	healthy.Store(true)
	expect(Unhealthy, Healthy)
	if _, ok := hosts.Load("probe.example.com"); !ok {
		t.Error("the probe did not send the Host header")
	}

	// A closed port is a failure, reported with the error.
	m.Watch("cf", Check{URL: "http://127.0.0.1:1/healthz", Interval: 20 * time.Millisecond, Timeout: 10 * time.Millisecond,
		FailureThreshold: 1, SuccessThreshold: 1}, Unknown)
	tr = expect(Healthy, Unhealthy)
	if state, last := m.Health("cf"); state != Unhealthy || last.Message == "" {
		t.Errorf("health %s, last probe %+v", state, last)
	}
	m.Forget("cf")
}

// An edge of unknown health is probed as soon as it is watched, not after a random
// part of its interval.
func TestMonitorProbesAnUnknownEdgeAtOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	probed := make(chan time.Time, 10)
	m := NewMonitor()
	m.OnProbe = func(string, Probe) { probed <- time.Now() }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = m.Start(ctx) }()
	start := time.Now()
	m.Watch("cf", Check{URL: srv.URL, Interval: time.Hour, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 2}, Unknown)
	select {
	case at := <-probed:
		if took := at.Sub(start); took > time.Second {
			t.Errorf("first probe after %s", took)
		}
	case <-time.After(5 * time.Second):
		t.Error("an edge of unknown health was not probed within 5 s of being watched (interval 1h)")
	}
}

// A new edge that passes its probes is decided Healthy in less than an interval; one
// that fails them is not decided Unhealthy sooner than its interval allows.
func TestMonitorDecidesANewHealthyEdgeWithinAnInterval(t *testing.T) {
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	m, transitions := startMonitor(t)

	const interval = 4 * time.Second
	start := time.Now()
	m.Watch("cf", Check{URL: srv.URL, Interval: interval, Timeout: time.Second, FailureThreshold: 3, SuccessThreshold: 3}, Unknown)
	select {
	case tr := <-transitions:
		// Three successes: at once, then a quarter interval apart (2 s); an interval
		// apart they took 8 s.
		if took := time.Since(start); tr.To != Healthy || took >= interval {
			t.Errorf("transition to %s after %s; want Healthy within an interval (%s)", tr.To, took, interval)
		}
	case <-time.After(3 * interval):
		t.Fatal("a healthy new edge was not decided")
	}

	failing.Store(true)
	const failInterval = time.Second
	start = time.Now()
	m.Watch("aws", Check{URL: srv.URL, Interval: failInterval, Timeout: time.Second, FailureThreshold: 2, SuccessThreshold: 1}, Unknown)
	select {
	case tr := <-transitions:
		if took := time.Since(start); tr.Edge != "aws" || tr.To != Unhealthy || took < failInterval*9/10 {
			t.Errorf("%s went %s after %s; want Unhealthy after a whole interval (%s)", tr.Edge, tr.To, took, failInterval)
		}
	case <-time.After(10 * failInterval):
		t.Fatal("a failing new edge was not decided")
	}
}

func TestMonitorStartsFromTheReportedHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	m, transitions := startMonitor(t)
	// A new leader inherits Unhealthy: healthy probes must outlast the hold-down.
	m.Watch("cf", Check{URL: srv.URL + "/healthz?token=secret", Interval: 20 * time.Millisecond, Timeout: 10 * time.Millisecond,
		FailureThreshold: 3, SuccessThreshold: 2, HoldDown: 300 * time.Millisecond}, Unhealthy)
	start := time.Now()
	select {
	case tr := <-transitions:
		if tr.From != Unhealthy || tr.To != Healthy || time.Since(start) < 300*time.Millisecond {
			t.Errorf("transition %+v after %s, want Unhealthy -> Healthy after the hold-down", tr, time.Since(start))
		}
		if strings.Contains(tr.Probe.Message, "secret") {
			t.Errorf("the probe message shows the URL's query: %s", tr.Probe.Message)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no failback")
	}
}

// startMonitor runs a Monitor until the test ends; its transitions arrive on the channel.
func startMonitor(t *testing.T) (*Monitor, <-chan Transition) {
	transitions := make(chan Transition, 10)
	m := NewMonitor()
	m.OnTransition = func(tr Transition) { transitions <- tr }
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = m.Start(ctx) }()
	return m, transitions
}
