package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
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
	return ProcessFigures{Goroutines: int(g), HeapBytes: int64(h)}
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

// replica is one manager process of the pair, with its proxy and metrics ports.
type replica struct {
	*harness.Manager
	proxy, metrics string
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}
