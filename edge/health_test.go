package edge

import (
	"testing"
	"time"
)

func TestMachine(t *testing.T) {
	const up, down = true, false
	cases := []struct {
		name     string
		holdDown time.Duration
		probes   []bool
		// want is the state after each probe: U(nknown), H(ealthy), X (unhealthy).
		want string
	}{
		{"healthy after successThreshold", 0, []bool{up, up, up}, "UHH"},
		{"unhealthy after failureThreshold from unknown", 0, []bool{down, down, down}, "UUX"},
		{"failures must be consecutive", 0, []bool{up, up, down, down, up, down, down, down}, "UHHHHHHX"},
		{"recovery needs consecutive successes", 0, []bool{down, down, down, up, down, up, up}, "UUXXXXH"},
		{"flapping faster than the thresholds never fails over", 0,
			[]bool{up, up, down, up, down, down, up, down, up, down, down, up}, "UHHHHHHHHHHH"},
		{"flapping while unhealthy never fails back", 0,
			[]bool{down, down, down, up, down, up, down, up, down}, "UUXXXXXXX"},
		{"hold-down delays failback", 3 * time.Second, []bool{down, down, down, up, up, up, up, up}, "UUXXXXHH"},
		{"a failure during hold-down restarts it", 3 * time.Second,
			[]bool{down, down, down, up, up, up, down, up, up, up, up}, "UUXXXXXXXXH"},
		{"hold-down does not delay the first decision", 3 * time.Second, []bool{up, up}, "UH"},
	}
	letter := map[State]byte{Unknown: 'U', Healthy: 'H', Unhealthy: 'X'}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &Machine{FailureThreshold: 3, SuccessThreshold: 2, HoldDown: c.holdDown}
			now := time.Unix(0, 0)
			got := make([]byte, 0, len(c.probes))
			transitions := 0
			for _, ok := range c.probes {
				s, changed := m.Observe(ok, now)
				got = append(got, letter[s])
				if changed {
					transitions++
				}
				now = now.Add(time.Second)
			}
			if string(got) != c.want {
				t.Errorf("states %s, want %s", got, c.want)
			}
			wantTransitions := 0
			for i := 1; i < len(c.want); i++ {
				if c.want[i] != c.want[i-1] {
					wantTransitions++
				}
			}
			if transitions != wantTransitions {
				t.Errorf("%d transitions reported, want %d", transitions, wantTransitions)
			}
		})
	}
}
