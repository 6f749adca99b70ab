package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/harness"
)

// leader is the replica that says it leads (controller-runtime's
// leader_election_master_status), or nil after 30 s.
func leader(ctx context.Context, replicas []*replica) *replica {
	for range 120 {
		for _, r := range replicas {
			if r.PID() == 0 {
				continue
			}
			if v, ok := scrape(ctx, r.metrics, "leader_election_master_status{"); ok && v == 1 {
				return r
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil
}

// figures reads a replica's goroutines and live heap from its metrics.
func figures(ctx context.Context, r *replica) ProcessFigures {
	if r == nil {
		return ProcessFigures{}
	}
	g, _ := scrape(ctx, r.metrics, "go_goroutines ")
	h, _ := scrape(ctx, r.metrics, "go_memstats_heap_alloc_bytes ")
	return ProcessFigures{PID: r.PID(), Goroutines: int(g), HeapBytes: int64(h)}
}

// scrape returns the value of the first sample of a metrics endpoint whose line
// starts with prefix.
func scrape(ctx context.Context, addr, prefix string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, prefix) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(strings.TrimSpace(line), ' ')+1:], &v); err == nil {
				return v, true
			}
		}
	}
	return 0, false
}

// replica is one manager process of the pair, with its proxy and metrics ports. It
// is supervised as a kubelet would: whenever it exits it is started again, at once
// after a kill the scenario made, after a growing back-off (1 s to 10 s) when it
// exited by itself, as a manager does when it loses its lease.
type replica struct {
	*harness.Manager
	proxy, metrics string
	args           []string
	// stepFile is where the replica's wall-clock step is written (Clock).
	stepFile string

	mu      sync.Mutex
	killing <-chan struct{} // Done of the process being killed on purpose
	exits   []time.Time     // exits nobody asked for
	held    chan struct{}   // while not nil, a restart waits for it to close
}

// supervise starts the replica and keeps it running until ctx ends.
func (r *replica) supervise(ctx context.Context) error {
	if err := r.Start(r.args...); err != nil {
		return err
	}
	go func() {
		backoff := time.Second
		for {
			done := r.Done()
			select {
			case <-ctx.Done():
				return
			case <-done:
			}
			if ctx.Err() != nil {
				return
			}
			r.mu.Lock()
			asked := r.killing == done
			if !asked {
				r.exits = append(r.exits, time.Now())
			}
			r.mu.Unlock()
			if !asked {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 10*time.Second)
			}
			r.mu.Lock()
			held := r.held
			r.mu.Unlock()
			if held != nil {
				select {
				case <-ctx.Done():
					return
				case <-held:
				}
			}
			if err := r.Start(r.args...); err != nil {
				return
			}
		}
	}()
	return nil
}

// kill sends sig and waits for the exit; the supervisor starts the replica again.
func (r *replica) kill(sig syscall.Signal) {
	r.mu.Lock()
	r.killing = r.Done()
	r.mu.Unlock()
	r.Stop(sig)
}

// holdRestarts keeps the replica down, once it exits, until release is called.
func (r *replica) holdRestarts() (release func()) {
	held := make(chan struct{})
	r.mu.Lock()
	r.held = held
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		r.held = nil
		r.mu.Unlock()
		close(held)
	}
}

// exitedBy returns the replica's own exits, as offsets from t.
func (r *replica) exitedBy(t time.Time) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, len(r.exits))
	for i, e := range r.exits {
		out[i] = e.Sub(t)
	}
	return out
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}
