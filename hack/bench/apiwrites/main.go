// Command apiwrites measures what one TenantRoute status patch costs the API server
// and etcd in CPU, with nothing else running: the floor under the time it takes to
// report on N routes, since every route's status is one object written by one request
// (Kubernetes has no write of several objects' statuses). It starts a real
// kube-apiserver and etcd (internal/testenv) with the operator's CRDs, creates the
// routes, then patches every status twice — as the operator's first report (Ready) and
// as a failover's — once with the status the operator writes for a route with one
// hostname and two edges, once with a minimal one (the active edge and Ready alone),
// and prints the CPU each patch cost and the floor it sets for 10,000 and 100,000
// routes on this machine's cores (hack/bench-apiwrites.sh). One informer watches the
// routes, as the operator's own does: the API server sends every write to each watch.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/apifloor"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

func main() {
	n := flag.Int("routes", 3000, "TenantRoutes whose status is patched in each round")
	watchers := flag.Int("watchers", 1, "informers watching the routes, as the operator's own does")
	flag.IntVar(&apifloor.Writers, "writers", apifloor.Writers, "patches in flight at once")
	flag.Parse()
	ctrllog.SetLogger(logr.Discard())
	if err := run(*n, *watchers); err != nil {
		fmt.Fprintln(os.Stderr, "apiwrites:", err)
		os.Exit(1)
	}
}

// status is what the operator writes for a Ready route with one hostname and two
// edges, on its first report or after a failover to the second edge; minimal keeps
// the active edge and the Ready condition only.
func status(tr *v1.TenantRoute, failedOver, minimal bool) {
	now := metav1.Now()
	active, preferred := tr.Spec.Edges[0], tr.Spec.Edges[0]
	if failedOver {
		active = tr.Spec.Edges[1]
	}
	s := &tr.Status
	s.ObservedGeneration, s.ActiveEdge = tr.Generation, active
	set := func(typ string, st metav1.ConditionStatus, reason, message string) {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: st, Reason: reason, Message: message, ObservedGeneration: tr.Generation})
	}
	if minimal {
		set(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonReady, "records point at "+active+" in every provider")
		return
	}
	if failedOver {
		s.LastFailoverTime = &now
	}
	s.Providers = []v1.ProviderRecordStatus{{Edge: tr.Spec.Edges[0], State: v1.RecordsSynced, Records: 1}, {Edge: tr.Spec.Edges[1], State: v1.RecordsSynced, Records: 1}}
	if s.TenantID == nil {
		s.TenantID = &v1.ClaimStatus{State: v1.ClaimGranted, Since: now}
		s.Hostnames = []v1.HostnameClaim{{Hostname: tr.Spec.Hostnames[0], ClaimStatus: v1.ClaimStatus{State: v1.ClaimGranted, Since: now}}}
	}
	set(v1.ConditionConflict, metav1.ConditionFalse, v1.ReasonNoConflict, "the tenantID and every hostname are granted to this TenantRoute")
	set(v1.ConditionRecordsSynced, metav1.ConditionTrue, v1.ReasonSynced, "records are in place in every provider")
	if failedOver {
		set(v1.ConditionFailedOver, metav1.ConditionTrue, v1.ReasonFailedOver, "traffic is on "+active+" because "+preferred+" is unhealthy (health check failed: 503)")
		set(v1.ConditionEdgeHealthy, metav1.ConditionTrue, v1.ReasonProbeSucceeded, active+" passes its health check")
	} else {
		set(v1.ConditionFailedOver, metav1.ConditionFalse, v1.ReasonPreferred, "traffic is on the preferred edge "+preferred)
		set(v1.ConditionEdgeHealthy, metav1.ConditionTrue, v1.ReasonProbeSucceeded, active+" passes its health check")
	}
	set(v1.ConditionReady, metav1.ConditionTrue, v1.ReasonReady, "records point at "+active+" in every provider")
}

type round struct {
	name       string
	minimal    bool
	failedOver bool
	cost       apifloor.Cost
}

func run(n, watchers int) error {
	ctx := context.Background()
	env, cfg, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = -1, 0 // the API server sets the pace, not the client
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return err
	}
	// Every status written is sent to each watch of the routes: the operator's own
	// informer is one.
	for range watchers {
		ca, err := cache.New(cfg, cache.Options{Scheme: testenv.Scheme()})
		if err != nil {
			return err
		}
		if _, err := ca.GetInformer(ctx, &v1.TenantRoute{}); err != nil {
			return err
		}
		go func() { _ = ca.Start(ctx) }()
		if !ca.WaitForCacheSync(ctx) {
			return fmt.Errorf("the route watch did not sync")
		}
	}
	cp, err := apifloor.For(env, cfg)
	if err != nil {
		return err
	}

	rounds := []round{
		{name: "the operator's status, first report", failedOver: false},
		{name: "the operator's status, failover", failedOver: true},
		{name: "minimal status (active edge, Ready), first report", minimal: true},
		{name: "minimal status, failover", minimal: true, failedOver: true},
	}
	var routes []*v1.TenantRoute
	for i := range rounds {
		r := &rounds[i]
		if !r.failedOver { // each status shape starts from new routes
			ns := fmt.Sprintf("apiwrites-%d", i)
			if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				return err
			}
			routes = make([]*v1.TenantRoute, n)
			for j := range routes {
				name := fmt.Sprintf("t%06d", j)
				routes[j] = &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: []string{v1.Finalizer}},
					Spec: v1.TenantRouteSpec{TenantID: name + "-" + ns, Region: "eu-west", Hostnames: []string{name + "." + ns + ".example.com"},
						Edges: []string{"cloudflare", "aws"}, TTL: 60}}
			}
			if _, err := apifloor.Each(routes, func(tr *v1.TenantRoute) error { return c.Create(ctx, tr) }); err != nil {
				return fmt.Errorf("creating the routes: %w", err)
			}
		}
		if r.cost, err = apifloor.Patch(ctx, c, cp, routes, func(tr *v1.TenantRoute) { status(tr, r.failedOver, r.minimal) }); err != nil {
			return err
		}
	}

	cores := runtime.NumCPU()
	fmt.Printf("CPU per TenantRoute status patch, %d routes a round, %d in flight, %d watch(es) of the routes, nothing else running:\n", n, apifloor.Writers, watchers)
	fmt.Printf("  %-52s %12s %10s %12s\n", "", "API server", "etcd", "patches/s")
	for _, r := range rounds {
		fmt.Printf("  %-52s %9.2f ms %7.2f ms %12.0f\n", r.name, r.cost.API*1e3, r.cost.Etcd*1e3, r.cost.Rate)
	}
	fmt.Printf("floor of the status patches alone, with all %d cores given to the API server and etcd:\n", cores)
	for _, routes := range []int{10000, 100000} {
		fmt.Printf("  %7d routes:", routes)
		for _, r := range rounds {
			fmt.Printf(" %6.1f s", r.cost.Floor(routes).Seconds())
		}
		fmt.Println("   (in the order above)")
	}
	return nil
}
