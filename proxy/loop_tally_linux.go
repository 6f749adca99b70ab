//go:build linux

package proxy

import "time"

// tally counts what a loop serves (lookups, answers, backend latencies) where only
// its thread writes, and adds it to the proxy's metrics at each sweep. Written at
// every request, the shared counters' cache lines would travel between the loops'
// CPUs each time: on this kind of machine, half a microsecond a request, more than
// the engine's own work.
type tally struct {
	lookups  [numOutcomes]uint64
	answers  map[answerKey]uint64
	upstream []upstreamTime
}

type answerKey struct {
	status  int
	outcome Outcome
}

type upstreamTime struct {
	route *CachedRoute
	d     time.Duration
}

// maxUpstreamTimes bounds the latencies held between sweeps.
const maxUpstreamTimes = 4096

func (t *tally) lookup(o Outcome) { t.lookups[o]++ }

func (t *tally) answer(status int, o Outcome) { t.answers[answerKey{status, o}]++ }

func (t *tally) upstreamTime(route *CachedRoute, d time.Duration) {
	if len(t.upstream) == maxUpstreamTimes {
		t.flush()
	}
	t.upstream = append(t.upstream, upstreamTime{route, d})
}

// flush adds what was counted to the metrics.
func (t *tally) flush() {
	for o, n := range t.lookups {
		if n > 0 {
			memoryLookups[o].Add(float64(n))
			t.lookups[o] = 0
		}
	}
	for k, n := range t.answers {
		observeRequests(k.status, k.outcome, n)
	}
	clear(t.answers)
	for i, u := range t.upstream {
		u.route.observeUpstream(u.d)
		t.upstream[i].route = nil
	}
	t.upstream = t.upstream[:0]
}
