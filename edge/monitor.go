package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/clip"
)

// Check is how one edge is probed.
type Check struct {
	URL              string
	HostHeader       string
	Interval         time.Duration
	Timeout          time.Duration
	FailureThreshold int
	SuccessThreshold int
	HoldDown         time.Duration
}

// Probe is the result of one probe.
type Probe struct {
	At      time.Time
	OK      bool
	Latency time.Duration
	// Message says what came back: "200 OK", "503 Service Unavailable", the error.
	Message string
}

// Transition is a change of an edge's health.
type Transition struct {
	Edge     string
	From, To State
	// Probe is the probe that decided it.
	Probe Probe
}

// Monitor probes every watched edge on its own schedule, with jitter, and reports
// transitions. It needs leader election: only the leader acts on health.
type Monitor struct {
	// OnTransition is called, from the edge's probing goroutine, on each transition.
	OnTransition func(Transition)
	// OnProbe, if set, is called after every probe (metrics).
	OnProbe func(edge string, p Probe)

	mu      sync.Mutex
	ctx     context.Context
	watched map[string]*watch
	client  *http.Client
}

type watch struct {
	check  Check
	cancel context.CancelFunc
	state  State
	last   Probe
}

// NewMonitor returns a monitor; Start runs it.
func NewMonitor() *Monitor {
	return &Monitor{
		watched: map[string]*watch{},
		client: &http.Client{
			// A fresh connection per probe: a probe must see the edge as a new client would.
			Transport: &http.Transport{
				DisableKeepAlives: true,
				// An answer is a status line; a probe has no use for the 10 MB of headers
				// the default allows, every interval.
				MaxResponseHeaderBytes: 64 << 10,
				DialContext:            (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
				TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
				Proxy:                  http.ProxyFromEnvironment,
			},
			// A redirect is an answer: 3xx counts as healthy, it is not followed.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Start implements manager.Runnable: probing runs until ctx is done.
func (m *Monitor) Start(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	for name, w := range m.watched {
		m.run(name, w)
	}
	m.mu.Unlock()
	<-ctx.Done()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (m *Monitor) NeedLeaderElection() bool { return true }

// Watch probes an edge with check, restarting its probing when the check changed.
// A newly watched edge starts from initial (the health its status last reported, so
// that a new leader keeps its predecessor's verdict and hold-down); an edge keeps its
// health across a change of check.
func (m *Monitor) Watch(edge string, check Check, initial State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.watched[edge]
	if ok && w.check == check {
		return
	}
	state := initial
	if ok {
		w.cancel()
		state = w.state
	}
	w = &watch{check: check, state: state, cancel: func() {}}
	m.watched[edge] = w
	if m.ctx != nil {
		m.run(edge, w)
	}
}

// Forget stops probing an edge.
func (m *Monitor) Forget(edge string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.watched[edge]; ok {
		w.cancel()
		delete(m.watched, edge)
	}
}

// Health returns an edge's current state and last probe.
func (m *Monitor) Health(edge string) (State, Probe) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.watched[edge]; ok {
		return w.state, w.last
	}
	return Unknown, Probe{}
}

// run starts the probing goroutine of w; m.mu must be held.
func (m *Monitor) run(edge string, w *watch) {
	ctx, cancel := context.WithCancel(m.ctx)
	w.cancel = cancel
	machine := &Machine{FailureThreshold: w.check.FailureThreshold, SuccessThreshold: w.check.SuccessThreshold,
		HoldDown: w.check.HoldDown, state: w.state}
	if w.state == Unknown {
		machine.state = ""
	}
	go func() {
		// Spread the edges' probes over the interval; but an edge of unknown health
		// (a new EdgeProvider, or the first start) is probed at once: every route on
		// it says the edge was not probed until it is, and a route written before
		// that is written again when its health is known.
		first := jitter(w.check.Interval)
		if machine.state == "" {
			first = 0
		}
		timer := time.NewTimer(first)
		defer timer.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			p := m.probe(ctx, w.check)
			if ctx.Err() != nil {
				return
			}
			from := machine.State()
			to, changed := machine.Observe(p.OK, p.At)
			m.mu.Lock()
			if ctx.Err() != nil {
				// Watch replaced this probing meanwhile and took the state from before
				// this probe: reporting its transition would say what no planning saw.
				m.mu.Unlock()
				return
			}
			w.state, w.last = to, p
			m.mu.Unlock()
			if m.OnProbe != nil {
				m.OnProbe(edge, p)
			}
			if changed && m.OnTransition != nil {
				m.OnTransition(Transition{Edge: edge, From: from, To: to, Probe: p})
			}
			next := w.check.Interval + jitter(w.check.Interval/10)
			if to == Unknown && p.OK {
				// Nothing moves on the way from Unknown to Healthy (Unknown counts as
				// healthy), but every route written before the verdict says its edge
				// was not probed and is written again after it: at a first start over
				// 10,000 routes, tens of statuses twice. The successes that decide it
				// come a quarter interval apart; a failure keeps the whole interval,
				// since Unknown to Unhealthy moves traffic.
				next = w.check.Interval / 4
			}
			timer.Reset(next)
		}
	}()
}

// jitter is a random duration in [0, d).
func jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d)
}

// probe sends one GET; a 2xx or 3xx answer within the timeout is a success.
func (m *Monitor) probe(ctx context.Context, c Check) Probe {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	start := time.Now()
	p := Probe{At: start}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		p.Message = "invalid health check URL"
		return p
	}
	if c.HostHeader != "" {
		req.Host = c.HostHeader
	}
	req.Header.Set("User-Agent", "tenantroute-operator/health-check")
	client := m.client
	if _, err := netip.ParseAddr(req.URL.Hostname()); err == nil && c.HostHeader != "" && req.URL.Scheme == "https" {
		// An edge probed by its address (a CDN's, say) is asked for the host's
		// certificate, as a client of the host would: net/http takes the TLS server name
		// from the URL, not from the Host header, and checked the edge's certificate
		// against the address, failing every probe of a healthy edge. A URL that names
		// a host keeps its own name, as before.
		t := m.client.Transport.(*http.Transport).Clone()
		t.TLSClientConfig.ServerName = c.HostHeader
		if host, _, err := net.SplitHostPort(c.HostHeader); err == nil {
			t.TLSClientConfig.ServerName = host
		}
		client = &http.Client{Transport: t, CheckRedirect: m.client.CheckRedirect}
	}
	resp, err := client.Do(req)
	p.Latency = time.Since(start)
	// Messages reach TenantRoutes' events, which tenants may read: no credentials or
	// query string of the probe URL.
	target := req.URL.Scheme + "://" + req.URL.Host + req.URL.Path
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		p.Message = fmt.Sprintf("GET %s: %s", target, clip.String(err.Error(), maxProbeAnswer))
		return p
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	p.OK = resp.StatusCode >= 200 && resp.StatusCode < 400
	p.Message = fmt.Sprintf("%s %s", target, clip.String(resp.Status, maxProbeAnswer))
	return p
}

// maxProbeAnswer bounds what a probe quotes of the edge's answer (its status line,
// or the error): the message goes to the EdgeProvider's conditions, events and logs,
// and the edge may answer anything. The URL before it is the EdgeProvider's own,
// bounded by the CRD.
const maxProbeAnswer = 256
