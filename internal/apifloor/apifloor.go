// Package apifloor measures what TenantRoute status patches cost the API server and
// etcd in CPU: the floor under the time any operator takes to report on N routes on
// a given machine, since every route's status is one object written by one request
// (Kubernetes has no write of several objects' statuses). hack/bench-apiwrites.sh runs
// it alone; the scale report (internal/scale) runs it on the API server of its own
// run, right after the manager stops, and prints each status phase as a ratio to it.
package apifloor

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// Writers is how many patches are in flight at once: enough that the API server, not
// the client, sets the pace.
var Writers = 32

// ControlPlane reads the CPU time of an API server and its etcd.
type ControlPlane struct {
	api                     *http.Client
	apiMetrics, etcdMetrics string
}

// For returns the reader of env's API server (reached with cfg) and etcd.
func For(env *envtest.Environment, cfg *rest.Config) (*ControlPlane, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &ControlPlane{api: hc, apiMetrics: strings.TrimSuffix(cfg.Host, "/") + "/metrics",
		etcdMetrics: env.ControlPlane.Etcd.URL.String() + "/metrics"}, nil
}

// CPU returns the CPU seconds the API server and etcd have used so far.
func (c *ControlPlane) CPU(ctx context.Context) (api, etcd float64, err error) {
	if api, err = ProcessCPU(ctx, c.api, c.apiMetrics); err != nil {
		return 0, 0, err
	}
	etcd, err = ProcessCPU(ctx, http.DefaultClient, c.etcdMetrics)
	return api, etcd, err
}

// ProcessCPU reads process_cpu_seconds_total from a /metrics endpoint.
func ProcessCPU(ctx context.Context, hc *http.Client, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", url, err)
	}
	m := families["process_cpu_seconds_total"].GetMetric()
	if len(m) == 0 {
		return 0, fmt.Errorf("%s has no process_cpu_seconds_total", url)
	}
	return m[0].GetCounter().GetValue(), nil
}

// Cost is what one status patch cost, on average over a round.
type Cost struct {
	API, Etcd float64 // CPU seconds per patch
	Rate      float64 // patches per second
}

// PerPatch is the control plane's CPU per patch.
func (c Cost) PerPatch() time.Duration {
	return time.Duration((c.API + c.Etcd) * float64(time.Second))
}

// Floor is how long n patches take at the least when every core of this machine
// works for the API server and etcd and for nothing else.
func (c Cost) Floor(n int) time.Duration {
	return time.Duration(float64(n) * (c.API + c.Etcd) / float64(runtime.NumCPU()) * float64(time.Second))
}

// settle waits, up to 60 s, for the control plane to stop working on what came before
// (a manager that just stopped, routes just created, a watch just listed), and returns
// the CPU it still uses at rest, in cores, to be taken out of the measurement: the mean
// of three consecutive quiet seconds (under 0.1 core each), or of the seconds since the
// last busy one when it never quietens. One second was not enough after a
// 100,000-route manager: the API server and etcd then work in bursts, and a burst
// counted as rest, or rest counted during a burst, made one sample a third and another
// twice what it should be.
func (c *ControlPlane) settle(ctx context.Context) (api, etcd float64, err error) {
	const step, quiet = time.Second, 3
	type sample struct{ api, etcd float64 }
	var last []sample
	a0, e0, err := c.CPU(ctx)
	if err != nil {
		return 0, 0, err
	}
	for range 60 {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(step):
		}
		a1, e1, err := c.CPU(ctx)
		if err != nil {
			return 0, 0, err
		}
		s := sample{(a1 - a0) / step.Seconds(), (e1 - e0) / step.Seconds()}
		a0, e0 = a1, e1
		if s.api >= 0.1 {
			last = append(last[:0], s) // quiet seconds must follow each other
			continue
		}
		if last = append(last, s); len(last) > quiet {
			last = last[1:]
		}
		if len(last) == quiet && last[0].api < 0.1 {
			break
		}
	}
	for _, s := range last {
		api, etcd = api+s.api/float64(len(last)), etcd+s.etcd/float64(len(last))
	}
	return api, etcd, nil
}

// Patch patches every route's status, Writers at a time, as the operator writes it: a
// JSON merge patch from the route as held to the route after status changes it. It
// returns the control plane's CPU per patch, without what it uses at rest.
func Patch(ctx context.Context, c client.Client, cp *ControlPlane, routes []*v1.TenantRoute, status func(*v1.TenantRoute)) (Cost, error) {
	idleAPI, idleEtcd, err := cp.settle(ctx)
	if err != nil {
		return Cost{}, err
	}
	api0, etcd0, err := cp.CPU(ctx)
	if err != nil {
		return Cost{}, err
	}
	took, err := Each(routes, func(tr *v1.TenantRoute) error {
		before := tr.DeepCopy()
		status(tr)
		return c.Status().Patch(ctx, tr, client.MergeFrom(before))
	})
	if err != nil {
		return Cost{}, fmt.Errorf("patching statuses: %w", err)
	}
	api1, etcd1, err := cp.CPU(ctx)
	if err != nil {
		return Cost{}, err
	}
	n, sec := float64(len(routes)), took.Seconds()
	return Cost{API: max(0, api1-api0-idleAPI*sec) / n, Etcd: max(0, etcd1-etcd0-idleEtcd*sec) / n, Rate: n / sec}, nil
}

// Each runs f for every route, Writers at a time, and returns how long it took and
// the first error.
func Each(routes []*v1.TenantRoute, f func(*v1.TenantRoute) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	start := time.Now()
	for range Writers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(routes); i = int(next.Add(1)) - 1 {
				if err := f(routes[i]); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}
