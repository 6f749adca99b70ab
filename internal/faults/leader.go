package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// LeaderConfig is a run of the leader-change scenario: two manager replicas with
// leader election, each serving its embedded proxy, hand hostnames from one tenant to
// another while the leader is killed with SIGKILL; a checker samples which tenant
// each hostname leads to, in both providers' records and in both proxies, every
// SampleEvery.
type LeaderConfig struct {
	// Manager is the manager binary (go build ./cmd).
	Manager string
	// Routes are created, one hostname each, before the first round.
	Routes int
	// Moves is how many of their hostnames change tenant in each round: the holder
	// drops the name, which two other routes list, so it is contested.
	Moves int
	// Rounds of moves; the leader is killed in each, at one of killMoments in turn,
	// or KillWithin after the moves were written.
	Rounds     int
	KillWithin time.Duration
	// Route53Latency is added to every Route53 call while the names move.
	Route53Latency time.Duration
	// Settle bounds the wait for each round to converge.
	Settle time.Duration
	// SampleEvery is the checker's period (default 250 ms).
	SampleEvery time.Duration
	ManagerArgs []string
	Dir         string
	Log         func(format string, args ...any)
}

// LeaderReport is what a leader-change run saw.
type LeaderReport struct {
	Kills   int
	Samples int
	// Split are the samples at which one hostname led to two tenants: between the
	// providers' records (DNS), between the proxies (Proxy), or between DNS and a
	// proxy (DNSProxy). Examples describes the first few.
	SplitDNS, SplitProxy, SplitDNSProxy int
	// Unsaved are the samples at which DNS led a hostname to a tenant that no saved
	// status granted it, in a read before or after: a grant used before it was saved,
	// which a new leader does not know and may give to another tenant.
	Unsaved  int
	Examples []string
	// Duration the checker ran (Samples over it is its pace); ProxyUnanswered of
	// ProxyAsked questions got no answer (a proxy down or restarting).
	Duration                    time.Duration
	ProxyAsked, ProxyUnanswered int64
	// Converged: after each round, how long from the kill until every hostname had
	// its desired records in both providers, once, and every route was Ready.
	Converged []time.Duration
	TimedOut  bool
	// Final is what the providers held at the end against what the routes want.
	Final string
	// Goroutines and heap of the replica that led at the end, at the first round's
	// start and at the end (from its metrics endpoint).
	Before, After ProcessFigures
	// SecretInLogs names a log file holding a credential.
	SecretInLogs string
	ManagerLogs  string
}

// ProcessFigures are a manager's goroutines and live heap.
type ProcessFigures struct {
	Goroutines int
	HeapBytes  int64
}

// Clean reports a run without a split sample, converged after every round.
func (r LeaderReport) Clean() bool {
	return !r.TimedOut && r.Doubles() == 0 && r.Final == "exact" && r.SecretInLogs == ""
}

// Doubles counts the samples at which a hostname led to two tenants, or to one by a
// grant never saved.
func (r LeaderReport) Doubles() int {
	return r.SplitDNS + r.SplitProxy + r.SplitDNSProxy + r.Unsaved
}

func (r LeaderReport) String() string {
	conv := make([]string, len(r.Converged))
	for i, d := range r.Converged {
		conv[i] = d.Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("%d kills, %d samples in %s (%d of %d proxy questions unanswered): split DNS %d, proxy %d, DNS/proxy %d, DNS by an unsaved grant %d %v; converged after each kill in %v (timed out: %t); final records: %s; goroutines %d -> %d, heap %d -> %d MiB; secret in %q",
		r.Kills, r.Samples, r.Duration.Round(time.Second), r.ProxyUnanswered, r.ProxyAsked, r.SplitDNS, r.SplitProxy, r.SplitDNSProxy, r.Unsaved, r.Examples, conv, r.TimedOut, r.Final,
		r.Before.Goroutines, r.After.Goroutines, r.Before.HeapBytes>>20, r.After.HeapBytes>>20, r.SecretInLogs)
}

// RunLeader runs the leader-change scenario.
func RunLeader(ctx context.Context, cfg LeaderConfig) (LeaderReport, error) {
	if cfg.Log == nil {
		cfg.Log = func(string, ...any) {}
	}
	if cfg.SampleEvery == 0 {
		cfg.SampleEvery = 250 * time.Millisecond
	}
	rep := LeaderReport{ManagerLogs: cfg.Dir}
	hw, err := harness.Start(ctx, cfg.Dir, []string{zoneName})
	if err != nil {
		return rep, err
	}
	defer hw.Stop()
	if err := echoBackend(ctx, hw); err != nil {
		return rep, err
	}

	replicas := make([]*replica, 2)
	for i := range replicas {
		dir := filepath.Join(cfg.Dir, fmt.Sprintf("replica-%c", 'a'+i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return rep, err
		}
		replicas[i] = &replica{Manager: &harness.Manager{Binary: cfg.Manager, Kubeconfig: hw.Kubeconfig, Dir: dir},
			proxy: freeAddr(), metrics: freeAddr()}
		defer replicas[i].Stop(syscall.SIGKILL)
	}
	start := func(r *replica) error {
		return r.Start(append([]string{"--leader-elect", "--proxy-bind-address", r.proxy, "--metrics-bind-address", r.metrics,
			"--metrics-secure=false"}, cfg.ManagerArgs...)...)
	}
	for _, r := range replicas {
		if err := start(r); err != nil {
			return rep, err
		}
	}

	// Routes t<i> hold t<i>.<zone>; the first Moves of them also get two claimants.
	names := make([]string, cfg.Routes)
	for i := range names {
		names[i] = fmt.Sprintf("t%d", i)
	}
	host := func(i int) string { return fmt.Sprintf("t%d.%s", i, zoneName) }
	if err := hw.CreateRoutes(ctx, names, func(n string) string { return n + "." + zoneName }); err != nil {
		return rep, err
	}
	if _, err := converge(ctx, hw, cfg.Settle, nil); err != nil {
		return rep, err
	}
	moved := make([]string, cfg.Moves)
	for i := range moved {
		moved[i] = host(i)
	}
	if err := harness.Parallel(moved, func(h string) error {
		tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: strings.TrimSuffix(h, "."+zoneName), Namespace: harness.RoutesNamespace}}
		return hw.Client.Patch(ctx, tr, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+movedLabel+`":"true"}}}`)))
	}); err != nil {
		return rep, err
	}
	claimant := func(i, n int) string { return fmt.Sprintf("c%d-%d", i, n) }
	var claimants []string
	for i := range cfg.Moves {
		claimants = append(claimants, claimant(i, 0), claimant(i, 1))
	}
	if err := createClaimants(ctx, hw, claimants, func(n string) string {
		i, _, _ := strings.Cut(strings.TrimPrefix(n, "c"), "-")
		return "t" + i + "." + zoneName
	}); err != nil {
		return rep, err
	}
	if _, err := converge(ctx, hw, cfg.Settle, nil); err != nil {
		return rep, err
	}
	cfg.Log("%d routes ready, %d hostnames contested by two claimants each", cfg.Routes, cfg.Moves)
	rep.Before = figures(ctx, leader(ctx, replicas))

	chk := &checker{w: hw, hosts: moved, proxies: []string{replicas[0].proxy, replicas[1].proxy},
		client: &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	cctx, stopChecker := context.WithCancel(ctx)
	checkStart := time.Now()
	checked := make(chan struct{})
	go func() { defer close(checked); chk.run(cctx, cfg.SampleEvery) }()

	for round := range cfg.Rounds {
		// Route53 answers slowly while the names move: a route is Ready, and its
		// status written, only once its records are in both providers, so a grant
		// used before it is saved stays unsaved for that long.
		hw.R53.SetFaults(emulatorkit.Faults{Latency: emulatorkit.Duration{Duration: cfg.Route53Latency}})
		// Each moved hostname's holder lets it go (it lists a new name instead); a new
		// claimant joins the one left from before, so that two routes want it.
		previous, err := handOver(ctx, hw, moved, round, claimant)
		if err != nil {
			stopChecker()
			return rep, err
		}
		moment := killMoments[round%len(killMoments)]
		after := killMoment(ctx, hw, moment, moved, previous, cfg.KillWithin)
		lead := leader(ctx, replicas)
		if lead == nil {
			stopChecker()
			return rep, fmt.Errorf("round %d: no replica leads", round)
		}
		cfg.Log("round %d: SIGKILL the leader (%s) %s after the hand-over (%s)", round, filepath.Base(lead.Dir), after.Round(time.Millisecond), moment)
		if after >= cfg.KillWithin {
			cfg.Log("round %d: the moment did not come; %s", round, claimsOf(ctx, hw, moved[0]))
		}
		killed := time.Now()
		lead.Stop(syscall.SIGKILL)
		rep.Kills++
		hw.R53.SetFaults(emulatorkit.Faults{})
		if err := start(lead); err != nil {
			stopChecker()
			return rep, err
		}
		// The next round starts under a leader: the killed one's lease runs out first.
		if leader(ctx, replicas) == nil {
			stopChecker()
			return rep, fmt.Errorf("round %d: no replica leads after the kill", round)
		}
		took, err := converge(ctx, hw, cfg.Settle, moved)
		if err != nil {
			rep.TimedOut = true
			cfg.Log("round %d: %v", round, err)
			break
		}
		rep.Converged = append(rep.Converged, time.Since(killed))
		cfg.Log("round %d: converged %s after the kill (checked %s)", round, time.Since(killed).Round(100*time.Millisecond), took)
	}
	time.Sleep(2 * time.Second) // a last few samples of the end state
	stopChecker()
	<-checked
	chk.result(&rep)
	rep.Duration = time.Since(checkStart)
	chk.client.CloseIdleConnections()
	time.Sleep(2 * time.Second) // the proxies close their side
	rep.After = figures(ctx, leader(ctx, replicas))
	final, err := exact(ctx, hw)
	if err != nil {
		return rep, err
	}
	rep.Final = final
	for _, r := range replicas {
		r.Stop(syscall.SIGTERM)
	}
	rep.SecretInLogs = secretIn(cfg.Dir)
	return rep, nil
}

// secretIn returns the first log file under dir that holds a credential, or "".
func secretIn(dir string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "manager-*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, secret := range harness.Secrets() {
			if strings.Contains(string(b), secret) {
				return f
			}
		}
	}
	return ""
}

// echoBackend points the Region at a backend that answers with the tenant the proxy
// sent it.
func echoBackend(ctx context.Context, hw *harness.World) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Header.Get("X-Tenant-Id"))
	})}
	go func() { _ = srv.Serve(l) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	region := &v1.Region{}
	if err := hw.Client.Get(ctx, client.ObjectKey{Name: harness.Region}, region); err != nil {
		return err
	}
	region.Spec.Backends = []v1.Backend{{URL: "http://" + l.Addr().String()}}
	return hw.Client.Update(ctx, region)
}

// movedLabel marks the routes that hold or claim a moved hostname: the checker reads
// only those.
const movedLabel = "faults.tenantroute.io/moved"

func createClaimants(ctx context.Context, hw *harness.World, names []string, host func(string) string) error {
	return harness.Parallel(names, func(n string) error {
		tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: harness.RoutesNamespace,
			Labels: map[string]string{movedLabel: "true"}}, Spec: v1.TenantRouteSpec{
			TenantID: n, Region: harness.Region, Hostnames: []string{host(n)}, Edges: []string{harness.CloudflareEdge, harness.AWSEdge}, TTL: 60}}
		return hw.Client.Create(ctx, tr)
	})
}

// handOver makes the holder of every moved hostname let it go, adds a claimant, and
// returns the holders it had.
func handOver(ctx context.Context, hw *harness.World, moved []string, round int, claimant func(i, n int) string) (map[string]string, error) {
	routes, err := listRoutes(ctx, hw)
	if err != nil {
		return nil, err
	}
	var fresh []string
	hostOf := map[string]string{}
	previous := map[string]string{}
	for i, h := range moved {
		var holder *v1.TenantRoute
		for _, tr := range routes {
			if slices.Contains(tr.Spec.Hostnames, h) && claimState(tr, h) == v1.ClaimGranted {
				holder = tr
			}
		}
		if holder == nil {
			return nil, fmt.Errorf("round %d: %s has no holder", round, h)
		}
		previous[h] = holder.Name
		base := holder.DeepCopy()
		holder.Spec.Hostnames = []string{fmt.Sprintf("%s-r%d.%s", holder.Name, round, zoneName)}
		if err := hw.Client.Patch(ctx, holder, client.MergeFrom(base)); err != nil {
			return nil, fmt.Errorf("round %d: %s lets %s go: %w", round, holder.Name, h, err)
		}
		n := claimant(i, round+2)
		fresh = append(fresh, n)
		hostOf[n] = h
	}
	return previous, createClaimants(ctx, hw, fresh, func(n string) string { return hostOf[n] })
}

// killMoments are the moments of a hand-over at which a round kills the leader, in
// turn: while the holders' records are being deleted (the names are releasing), when
// the first of them is gone (the names are being granted), and when the first record
// of a new holder appears (the grants are being used).
var killMoments = []string{"releasing", "granting", "using"}

// killMoment waits for the round's moment, or until limit, and returns how long it
// waited.
func killMoment(ctx context.Context, hw *harness.World, moment string, moved []string, previous map[string]string, limit time.Duration) time.Duration {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		cf, _ := dnsOwners(hw)
		for _, h := range moved {
			switch {
			case moment == "releasing":
				return time.Since(start)
			case moment == "granting" && !slices.Contains(cf[h], previous[h]):
				return time.Since(start)
			case moment == "using" && slices.ContainsFunc(cf[h], func(o string) bool { return o != previous[h] }):
				return time.Since(start)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// claimsOf describes what the routes listing host, or holding it, say of it.
func claimsOf(ctx context.Context, hw *harness.World, host string) string {
	routes, err := listRoutes(ctx, hw)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, tr := range routes {
		for _, c := range tr.Status.Hostnames {
			if c.Hostname == host || slices.Contains(tr.Spec.Hostnames, host) {
				out = append(out, fmt.Sprintf("%s lists %v: %s %s %q", tr.Name, tr.Spec.Hostnames, c.Hostname, c.State, c.Message))
			}
		}
	}
	cf, r53 := dnsOwners(hw)
	return fmt.Sprintf("%s: %v; cloudflare %v, route53 %v", host, out, cf[host], r53[host])
}

func listRoutes(ctx context.Context, hw *harness.World) ([]*v1.TenantRoute, error) {
	var list v1.TenantRouteList
	if err := hw.Client.List(ctx, &list, client.InNamespace(harness.RoutesNamespace)); err != nil {
		return nil, err
	}
	out := make([]*v1.TenantRoute, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}

func claimState(tr *v1.TenantRoute, host string) v1.ClaimState {
	for _, c := range tr.Status.Hostnames {
		if c.Hostname == host {
			return c.State
		}
	}
	return ""
}

// converge waits until every route is reconciled and, where nothing contests it,
// Ready; every moved hostname has a holder; and the providers hold exactly the
// records the grants want.
func converge(ctx context.Context, hw *harness.World, limit time.Duration, moved []string) (time.Duration, error) {
	start := time.Now()
	var last string
	for time.Since(start) < limit {
		routes, err := listRoutes(ctx, hw)
		if err != nil {
			return 0, err
		}
		last = ""
		for _, tr := range routes {
			conflict := meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionConflict)
			if tr.Status.ObservedGeneration != tr.Generation || (!conflict && !meta.IsStatusConditionTrue(tr.Status.Conditions, v1.ConditionReady)) {
				last = tr.Name + " not reconciled or not Ready"
				break
			}
		}
		for _, h := range moved {
			if last != "" {
				break
			}
			held := false
			for _, tr := range routes {
				held = held || (slices.Contains(tr.Spec.Hostnames, h) && claimState(tr, h) == v1.ClaimGranted)
			}
			if !held {
				last = h + " has no holder"
			}
		}
		if last == "" {
			if last, err = exact(ctx, hw); err != nil {
				return 0, err
			}
			if last == "exact" {
				return time.Since(start), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return 0, fmt.Errorf("not converged in %s: %s", limit, last)
}

// exact compares what each provider holds with what the granted hostnames want: one
// record set per granted hostname, owned by its holder, and nothing else. It says
// "exact" or what differs.
func exact(ctx context.Context, hw *harness.World) (string, error) {
	routes, err := listRoutes(ctx, hw)
	if err != nil {
		return "", err
	}
	want := map[string]string{} // hostname -> holder
	for _, tr := range routes {
		for _, c := range tr.Status.Hostnames {
			if c.State == v1.ClaimGranted && slices.Contains(tr.Spec.Hostnames, c.Hostname) {
				want[c.Hostname] = tr.Name
			}
		}
	}
	cf, r53 := dnsOwners(hw)
	for name, owners := range map[string]map[string][]string{"cloudflare": cf, "route53": r53} {
		for h, holder := range want {
			if got := owners[h]; len(got) != 1 || got[0] != holder {
				return fmt.Sprintf("%s: %s held by %s, records owned by %v", name, h, holder, got), nil
			}
		}
		for h, got := range owners {
			if _, ok := want[h]; !ok {
				return fmt.Sprintf("%s: records of %s (owned by %v) nobody holds", name, h, got), nil
			}
		}
	}
	return "exact", nil
}
