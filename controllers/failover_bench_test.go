package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// BenchmarkFailover measures, with default health-check settings and the emulators'
// real rate limits, the time from the Cloudflare edge going down to the last record
// in both providers pointing at the AWS edge, for 1 and 10,000 TenantRoutes:
//
//	go test -run '^$' -bench Failover -benchtime 1x -timeout 60m ./controllers/
func BenchmarkFailover(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			for range b.N {
				benchmarkFailover(b, n)
			}
		})
	}
}

func benchmarkFailover(b *testing.B, n int) {
	o := newOperator(b, fmt.Sprintf("bench%d", n))
	// The defaults of the API: 2 s interval, 1 s timeout, 3 failures, 2 successes.
	for _, name := range []string{o.cfEdge, o.awsEdge} {
		edit(b, &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(ep *v1.EdgeProvider) {
			ep.Spec.HealthCheck = v1.HealthCheck{URL: ep.Spec.HealthCheck.URL, Interval: metav1.Duration{Duration: 2 * time.Second},
				Timeout: metav1.Duration{Duration: time.Second}, FailureThreshold: 3, SuccessThreshold: 2,
				FailbackHoldDown: metav1.Duration{Duration: 30 * time.Second}}
		})
	}
	o.createRoutes(n)
	start := time.Now()
	o.start()
	eventually(b, 30*time.Minute, func() error { return o.allOn(n, onCloudflare) })
	converged := time.Since(start)
	o.waitHealthTB(o.cfEdge)

	// The rewrite of the edge's first health decision must be counted before the clock starts.
	eventually(b, time.Minute, func() error {
		if _, n := rewriteHistogram(b, o.cfEdge); n < 1 {
			return fmt.Errorf("first health decision not rewritten yet")
		}
		return nil
	})
	o.cf.ResetCounters()
	o.r53.ResetCounters()
	sumBefore, countBefore := rewriteHistogram(b, o.cfEdge)
	b.ResetTimer()
	down := time.Now()
	o.cfUp.Store(false)
	b.Logf("edge down at %s", down.UTC().Format(time.RFC3339Nano))
	deadline := time.Now().Add(10 * time.Minute)
	for o.allOn(n, onAWS) != nil {
		if time.Now().After(deadline) {
			b.Fatalf("records not on the AWS edge after 10 minutes: %v", o.allOn(n, onAWS))
		}
		time.Sleep(20 * time.Millisecond)
	}
	total := time.Since(down)
	b.StopTimer()
	var rewrite float64
	eventually(b, 30*time.Second, func() error {
		sum, count := rewriteHistogram(b, o.cfEdge)
		if count != countBefore+1 {
			return fmt.Errorf("%d rewrites observed since the edge went down, want 1", count-countBefore)
		}
		rewrite = sum - sumBefore
		return nil
	})
	cf, r53 := o.cf.Counters(), o.r53.Counters()
	cfWrites, r53Writes := cf["POST /zones/{id}/dns_records/batch"], r53["POST /2013-04-01/hostedzone/{Id}/rrset"]
	cfLists, r53Lists := cf["GET /zones/{id}/dns_records"], r53["GET /2013-04-01/hostedzone/{Id}/rrset"]
	b.ReportMetric(total.Seconds(), "down-to-rewritten-s")
	b.ReportMetric(rewrite, "declared-to-rewritten-s")
	b.ReportMetric(float64(cfWrites), "cf-writes")
	b.ReportMetric(float64(r53Writes), "r53-writes")
	b.Logf("%d TenantRoutes (converged from empty in %s): edge down -> every record on the standby edge in %.1f s, "+
		"of which %.1f s from the unhealthy decision; calls: cloudflare %d batch writes + %d lists, route53 %d change batches + %d lists",
		n, converged.Round(time.Second), total.Seconds(), rewrite, cfWrites, cfLists, r53Writes, r53Lists)
}

// allOn checks that every route's record in both providers points at the edge.
func (o *operator) allOn(n int, edgeTarget func(string) (string, string)) error {
	cf, r53 := o.cfRecords(), o.r53Records()
	for i := range n {
		h := hostname(i)
		wantCF, wantR53 := edgeTarget(h)
		if len(cf[h]) != 1 || cf[h][0] != wantCF {
			return fmt.Errorf("cloudflare %s: %v", h, cf[h])
		}
		if len(r53[h]) != 1 || r53[h][0] != wantR53 {
			return fmt.Errorf("route53 %s: %v", h, r53[h])
		}
	}
	return nil
}

func (o *operator) waitHealthTB(edgeName string) {
	eventually(o.t, time.Minute, func() error {
		ep := &v1.EdgeProvider{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: edgeName}, ep); err != nil {
			return err
		}
		return expectCondition(ep.Status.Conditions, v1.ConditionHealthy, "True", "")
	})
}

// rewriteHistogram reads the operator's own timing of failover rewrites of an edge.
func rewriteHistogram(tb testing.TB, edgeName string) (float64, uint64) {
	const name = "tenantroute_failover_rewrite_seconds"
	families, err := metrics.Registry.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "edge" && l.GetValue() == edgeName {
					return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0, 0
}
