// Package edge checks the health of each provider's edge and reports its transitions.
//
// A Machine turns probe results into a health state with hysteresis: thresholds of
// consecutive results, and a hold-down before an unhealthy edge counts as healthy
// again, so that an edge that flaps cannot move traffic back and forth. A Monitor
// probes every edge on its own schedule and calls back on each transition.
package edge

import "time"

// State is an edge's health.
type State string

// Health states.
const (
	Unknown   State = "Unknown"
	Healthy   State = "Healthy"
	Unhealthy State = "Unhealthy"
)

// Machine is the health state machine of one edge. It is pure: time comes with each
// observation.
type Machine struct {
	// FailureThreshold consecutive failures make the edge unhealthy.
	FailureThreshold int
	// SuccessThreshold consecutive successes make it healthy...
	SuccessThreshold int
	// ...and, coming back from unhealthy, so must the run of successes have lasted
	// HoldDown.
	HoldDown time.Duration

	state      State
	successes  int
	failures   int
	runStarted time.Time // first success of the current run of successes
}

// State returns the current state (Unknown before any decision).
func (m *Machine) State() State {
	if m.state == "" {
		return Unknown
	}
	return m.state
}

// Observe feeds one probe result and returns the state and whether it changed.
func (m *Machine) Observe(ok bool, now time.Time) (State, bool) {
	before := m.State()
	if ok {
		if m.successes == 0 {
			m.runStarted = now
		}
		m.successes++
		m.failures = 0
	} else {
		m.failures++
		m.successes = 0
	}
	switch before {
	case Unknown:
		if m.successes >= max(1, m.SuccessThreshold) {
			m.state = Healthy
		} else if m.failures >= max(1, m.FailureThreshold) {
			m.state = Unhealthy
		}
	case Healthy:
		if m.failures >= max(1, m.FailureThreshold) {
			m.state = Unhealthy
		}
	case Unhealthy:
		if m.successes >= max(1, m.SuccessThreshold) && now.Sub(m.runStarted) >= m.HoldDown {
			m.state = Healthy
		}
	}
	return m.State(), m.State() != before
}
