// Command manager runs the tenantroute operator: the controllers, the edge health
// checks and, by default, the embedded routing proxy. With --mode=proxy it runs only
// the proxy, as its own fleet, reading routes from Redis and the operator's lookup
// endpoint.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	routingv1alpha1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/routes"
)

type config struct {
	mode           string
	metricsAddr    string
	probeAddr      string
	pprofAddr      string
	gcPercent      int
	leaderElection bool
	secureMetrics  bool
	apiQPS         float64
	apiBurst       int
	operator       controllers.Options

	proxyAddr  string
	lookupAddr string
	lookupURL  string
	shared     sharedFlags
	chain      proxy.ChainOptions
	upstream   proxy.Options
	tls        tlsFlags
}

func main() {
	var c config
	flag.StringVar(&c.mode, "mode", "all", "all: controllers, health checks and the embedded proxy; proxy: the proxy alone (needs --lookup-url).")
	flag.StringVar(&c.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.StringVar(&c.pprofAddr, "pprof-bind-address", "0", "Address of Go's /debug/pprof/ profiles (heap, CPU), for diagnosing memory and CPU use; 0 (the default) disables it. Bind it to localhost or keep it off the Service: profiles are not authenticated.")
	flag.IntVar(&c.gcPercent, "gc-percent", 50, "How far the heap may grow past what is live before Go collects it, in percent (GOGC; the GOGC environment variable wins). Most of the manager's heap is its caches, which live for good: at Go's default of 100 the process held twice them; 50 took a 10,000-route run's peak from 222 to 193 MiB for 11% more of the manager's CPU.")
	flag.BoolVar(&c.leaderElection, "leader-elect", false, "Elect a leader so that only one replica reconciles and probes at a time.")
	flag.BoolVar(&c.secureMetrics, "metrics-secure", false, "Serve metrics over HTTPS, authenticating and authorising scrapers with TokenReview and SubjectAccessReview.")
	flag.Float64Var(&c.apiQPS, "kube-api-qps", -1, "Requests per second to the Kubernetes API server at most; negative (the default, as controller-runtime's) leaves the pace to the API server's priority and fairness, which protects it: a client-side limit of 200/s held 10,000 status writes to 50 s on a control plane that takes them in 35.")
	flag.IntVar(&c.apiBurst, "kube-api-burst", 400, "Burst of requests to the Kubernetes API server, with a positive --kube-api-qps.")
	flag.StringVar(&c.operator.Namespace, "namespace", envOr("POD_NAMESPACE", "tenantroute-system"), "Namespace of the EdgeProviders' credential Secrets (the operator's own).")
	c.operator.Instance = "default"
	flag.Func("instance", "Name of this installation in the ownership marker of its records (letters, digits, '.', '_', '-'; default \"default\"); installations sharing zones need different names.", func(v string) (err error) {
		c.operator.Instance, err = instanceName(v)
		return err
	})
	flag.DurationVar(&c.operator.ZoneResync, "zone-resync", 10*time.Minute, "How often each DNS zone is listed again.")
	flag.DurationVar(&c.operator.DeletionTimeout, "deletion-timeout", time.Hour, "How long a TenantRoute's deletion waits for zones it cannot reach (zone gone, credentials revoked) before it completes anyway, with a Warning event naming the records possibly left behind.")
	flag.BoolFunc("sweep-orphans", "Delete, on start and at every zone resync, the records of this installation whose TenantRoute no longer exists (default true).",
		func(v string) error {
			sweep, err := strconv.ParseBool(v)
			c.operator.KeepOrphans = !sweep
			return err
		})
	flag.DurationVar(&c.operator.Queue.Quiet, "coalesce-quiet", time.Second, "A zone's pending changes are applied once no TenantRoute changed for this long...")
	flag.DurationVar(&c.operator.Queue.MaxWait, "coalesce-max-wait", 5*time.Second, "...or, while changes keep coming, full batches go out once the oldest pending change has waited this long (at once when the pending changes fill a request).")
	flag.IntVar(&c.operator.MaxConcurrentReconciles, "max-concurrent-reconciles", 16, "TenantRoutes reconciled at once.")
	flag.Float64Var(&c.operator.EventQPS, "event-qps", controllers.DefaultEventQPS, "TenantRoute events per second at most (with --event-burst); beyond, events are dropped and counted in tenantroute_events_skipped_total. Events never delay status or records.")
	flag.IntVar(&c.operator.EventBurst, "event-burst", controllers.DefaultEventBurst, "Burst of TenantRoute events.")
	flag.IntVar(&c.operator.FailoverEvents, "failover-events", controllers.DefaultFailoverEvents, "Per health transition, how many moving TenantRoutes get their own FailedOver/FailedBack event; the EdgeProvider's event counts them all.")
	flag.StringVar(&c.operator.DNSResolver, "dns-resolver", defaultResolver(), "DNS server (host:port) asked whether custom domains' owners proved control (TXT and CNAME); empty: no custom domain is routed.")
	flag.DurationVar(&c.operator.CustomDomainInterval, "custom-domain-check-interval", time.Minute, "How often each custom domain's proof is checked.")
	flag.DurationVar(&c.operator.CustomDomainGrace, "custom-domain-grace", time.Hour, "How long a custom domain that lost its proof stays routed before it is released.")

	flag.StringVar(&c.proxyAddr, "proxy-bind-address", ":8088", "Address the routing proxy listens on; 0 disables the embedded proxy.")
	flag.StringVar(&c.lookupAddr, "lookup-bind-address", ":8082", "Address of the read-only route lookup endpoint (GET /v1/routes?host=) standalone proxies use; 0 disables it.")
	flag.Func("lookup-url", "--mode=proxy: base URL of the operator's lookup endpoint, e.g. http://tenantroute-lookup.tenantroute-system.svc:8082.", func(v string) (err error) {
		c.lookupURL, err = lookupBaseURL(v)
		return err
	})
	bindSharedFlags(flag.CommandLine, &c.shared)
	flag.DurationVar(&c.chain.TTL, "route-cache-ttl", 30*time.Second, "How long the proxy keeps a route in memory; hot routes are refreshed before.")
	flag.DurationVar(&c.chain.MaxStale, "route-max-stale", time.Hour, "How long past its TTL a route is served when every source fails.")
	flag.DurationVar(&c.chain.LayerTimeout, "route-lookup-timeout", 250*time.Millisecond, "Time budget of each route source (Redis, the lookup endpoint) per lookup.")
	bindProxyFlags(flag.CommandLine, &c.upstream, &c.chain)
	bindTLSFlags(flag.CommandLine, &c.tls)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	c.chain.Observe = proxy.ObserveLayer
	if c.gcPercent < 1 {
		// Collection off, with no memory limit, is a heap without bound; GOGC=off
		// remains for whoever wants it.
		ctrl.Log.Error(fmt.Errorf("--gc-percent=%d: want 1 or more", c.gcPercent), "exiting")
		os.Exit(1)
	}
	ctrl.Log.Info("Go collector", "gogc", setGCPercent(c.gcPercent))
	if limit := setMemoryLimit(os.ReadFile); limit > 0 {
		ctrl.Log.Info("Go memory limit set from the container's", "bytes", limit)
	}

	ctx := ctrl.SetupSignalHandler()
	var err error
	switch c.mode {
	case "all":
		err = runAll(ctx, c)
	case "proxy":
		err = runProxy(ctx, c)
	default:
		err = fmt.Errorf("unknown --mode %q: want all or proxy", c.mode)
	}
	if err != nil {
		ctrl.Log.Error(err, "exiting")
		os.Exit(1)
	}
}

// runAll runs the controllers, the health checks, the lookup endpoint and the
// embedded proxy in one manager.
func runAll(ctx context.Context, c config) error {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(routingv1alpha1.AddToScheme(scheme))

	restConfig := ctrl.GetConfigOrDie()
	restConfig.QPS, restConfig.Burst = float32(c.apiQPS), c.apiBurst
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsOptions(c.metricsAddr, c.secureMetrics),
		// Credential Secrets are read only in the operator's namespace, and cached only there.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{c.operator.Namespace: {}}},
			// Every TenantRoute of the cluster is cached: each is stored compacted.
			&routingv1alpha1.TenantRoute{}: {Transform: controllers.CompactRoutes},
		},
			// managedFields are a large part of every cached object and nothing here
			// reads them (updates of cached objects leave the server's as they are).
			DefaultTransform: cache.TransformStripManagedFields()},
		HealthProbeBindAddress: c.probeAddr,
		PprofBindAddress:       c.pprofAddr,
		LeaderElection:         c.leaderElection,
		LeaderElectionID:       "tenantroute-operator.routing.tenantroute.io",
		// The lease lives beside the credentials; in a pod this is the pod's namespace
		// (POD_NAMESPACE), and outside a cluster controller-runtime would find none.
		LeaderElectionNamespace:       c.operator.Namespace,
		LeaderElectionReleaseOnCancel: true,
		// The embedded proxy drains before the manager exits (--shutdown-delay, then
		// --shutdown-timeout); the manager waits for it, with a margin.
		GracefulShutdownTimeout: ptr.To(c.upstream.ShutdownDelay + c.upstream.ShutdownTimeout + 5*time.Second),
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	kv, err := c.shared.kv()
	if err != nil {
		return err
	}
	c.operator.RedisKV = kv
	c.operator.KVSyncInterval = c.shared.kvSync
	// Certificate records: in Redis when the proxies share it, else in memory with the
	// embedded proxy. Status reports them when a proxy serves HTTPS.
	var certBook routes.CertBook = &routes.MemoryCertBook{}
	if kv != nil {
		certBook = *kv
	}
	if c.tls.reportCerts || (c.proxyAddr != "0" && c.tls.on()) {
		c.operator.CertBook, c.operator.CertStatusInterval = certBook, c.tls.statusEvery
	}
	// What the controllers start beside the manager's runnables (the zones' apply
	// queues, their flushes and resyncs) runs until the manager stops, for whatever
	// reason: after a lost lease, a write to a provider would be a second leader's.
	running, stopRunning := context.WithCancel(ctx)
	defer stopRunning()
	source, err := controllers.Setup(running, mgr, c.operator)
	if err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	if c.lookupAddr != "0" {
		token, err := c.shared.lookupToken()
		if err != nil {
			return err
		}
		lookup := httpServer(c.lookupAddr, routes.LookupHandler(source, token, routes.Normalize))
		if err := mgr.Add(lookup); err != nil {
			return err
		}
		// The standalone proxies ask every replica: one is ready once it answers.
		if err := mgr.AddReadyzCheck("lookup", lookup.ready); err != nil {
			return err
		}
	}
	var embedded *proxy.Server
	if c.proxyAddr != "0" {
		if err := registerProxyMetrics(metrics.Registry); err != nil {
			return err
		}
		chain := proxy.NewChain(c.chain, lookupLayers(source, kv, true)...)
		if err := routes.OnGrantChange(context.Background(), mgr.GetCache(), chain.Invalidate); err != nil {
			return err
		}
		p := proxy.New(chain, c.upstream)
		if err := c.tls.enable(p, chain, kv, certBook); err != nil {
			return err
		}
		embedded = &proxy.Server{Proxy: p, Listen: c.proxyAddr}
		if err := mgr.Add(embedded); err != nil {
			return err
		}
		// Readiness waits for the proxy to listen (after the caches are in), and fails
		// as soon as it drains, so that its Service stops sending it clients while it
		// still accepts them.
		if err := mgr.AddReadyzCheck("proxy", func(*http.Request) error { return p.Ready() }); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.Info("starting manager", "proxy", c.proxyAddr, "lookup", c.lookupAddr, "redis", kv != nil)
	err = mgr.Start(ctx)
	stopRunning()
	if err != nil && embedded != nil && ctx.Err() == nil {
		// The manager stopped on an error, not on a signal (whose graceful shutdown
		// waited for the proxy's drain already, within the pod's grace period): a lost
		// lease skips the graceful shutdown, so that a former leader acts no more. Its
		// caches stopped with it, so the embedded proxy routes no new client from them:
		// it stops listening at once, where on SIGTERM it keeps accepting for
		// --shutdown-delay (a hostname handed to another tenant meanwhile would still
		// lead to the former one here). What it already forwards (downloads, streams,
		// tunnels) finishes within --shutdown-timeout before the process exits.
		ctrl.Log.Error(err, "the manager stopped; the embedded proxy stops listening and lets what is in flight finish", "within", c.upstream.ShutdownTimeout)
		embedded.Proxy.StopNow()
		drained := make(chan struct{})
		go func() { embedded.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(c.upstream.ShutdownTimeout + 5*time.Second):
			// A connection handed over (a tunnel) whose handler does not return when
			// closed: the drain's own bound is not the process's.
		}
	}
	return err
}

// instanceName checks an installation's name: letters, digits, '.', '_' and '-', up
// to 63. A name with a slash would make another installation's markers look like this
// one's: "prod" would take "prod/eu/ns/name" for its own, and sweep it as an orphan.
func instanceName(v string) (string, error) {
	if !instancePattern.MatchString(v) {
		return "", fmt.Errorf("%q: an installation's name is 1-63 letters, digits, '.', '_' or '-'", v)
	}
	return v, nil
}

var instancePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,63}$`)

// lookupBaseURL checks the lookup endpoint's base URL and drops a trailing slash,
// which would make every lookup ask //v1/routes and fail.
func lookupBaseURL(v string) (string, error) {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not an http(s)://host[:port][/path] URL", v)
	}
	return strings.TrimRight(v, "/"), nil
}

// runProxy runs the proxy alone: routes from memory, then Redis, then the operator's
// lookup endpoint.
func runProxy(ctx context.Context, c config) error {
	if c.lookupURL == "" {
		return errors.New("--mode=proxy needs --lookup-url, the operator's lookup endpoint")
	}
	registry := prometheus.NewRegistry()
	registry.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	if err := registerProxyMetrics(registry); err != nil {
		return err
	}
	token, err := c.shared.lookupToken()
	if err != nil {
		return err
	}
	kv, err := c.shared.kv()
	if err != nil {
		return err
	}
	source := routes.HTTPSource{BaseURL: c.lookupURL, Token: token, Client: &http.Client{Timeout: c.chain.LayerTimeout + time.Second}}
	chain := proxy.NewChain(c.chain, lookupLayers(source, kv, false)...)
	p := proxy.New(chain, c.upstream)
	var book routes.CertBook
	if kv != nil {
		book = *kv
	}
	if err := c.tls.enable(p, chain, kv, book); err != nil {
		return err
	}
	probes := http.NewServeMux()
	probes.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	probes.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := p.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	// The probes and metrics outlive the proxy's drain: readiness says 503 while it
	// drains, and they stop once it is done.
	side := []interface{ Start(context.Context) error }{httpServer(c.probeAddr, probes)}
	if c.metricsAddr != "0" {
		side = append(side, httpServer(c.metricsAddr, promhttp.HandlerFor(registry, promhttp.HandlerOpts{})))
	}
	ctrl.Log.Info("starting proxy", "listen", c.proxyAddr, "lookup", c.lookupURL, "redis", kv != nil)
	sideCtx, stopSide := context.WithCancel(context.Background())
	defer stopSide()
	errs := make(chan error, len(side)+1)
	for _, r := range side {
		go func() { errs <- r.Start(sideCtx) }()
	}
	proxyDone := make(chan error, 1)
	go func() { proxyDone <- (&proxy.Server{Proxy: p, Listen: c.proxyAddr}).Start(ctx) }()
	select {
	case err = <-proxyDone:
	case err = <-errs: // a side server failed: the process restarts
	}
	stopSide()
	return err
}

// httpServer runs a net/http server until its context ends.
type httpServerRunnable struct {
	srv       *http.Server
	listening atomic.Bool
}

// httpServer serves h on addr with controller-runtime's servers' bounds: an idle
// connection is closed after 90 s (net/http's default keeps it for good, and each
// holds a descriptor), a request (the lookup endpoint's have no body) must come whole
// within 30 s and its header within 16 KiB.
func httpServer(addr string, h http.Handler) *httpServerRunnable {
	return &httpServerRunnable{srv: &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, MaxHeaderBytes: 16 << 10}}
}

// ready is the server's readiness check: the manager starts it only once its caches
// are in, well after its health endpoint answers.
func (s *httpServerRunnable) ready(*http.Request) error {
	if !s.listening.Load() {
		return fmt.Errorf("%s does not listen yet", s.srv.Addr)
	}
	return nil
}

func (s *httpServerRunnable) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.srv.Addr)
	if err != nil {
		return err
	}
	s.listening.Store(true)
	errs := make(chan error, 1)
	go func() { errs <- s.srv.Serve(ln) }()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.srv.Shutdown(shutdown)
	}
}

// NeedLeaderElection: every replica serves lookups.
func (s *httpServerRunnable) NeedLeaderElection() bool { return false }

func metricsOptions(addr string, secure bool) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if secure {
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

// defaultResolver is the first nameserver of /etc/resolv.conf (in a Pod, the cluster's
// DNS), or none.
func defaultResolver() string {
	conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil || len(conf.Servers) == 0 {
		return ""
	}
	return net.JoinHostPort(conf.Servers[0], conf.Port)
}

// lookupLayers orders the places a proxy looks routes up in, the source of truth last.
// A standalone proxy asks Redis before the manager's lookup endpoint, which is remote
// and shared by the fleet. The embedded proxy asks its own informer cache alone: it
// answers in memory, and it is what the proxy's invalidations follow. With Redis ahead
// of it, a hostname handed to another tenant and dropped from the proxy's cache would
// be read back from Redis as the former tenant's (routekv rewrites it a moment later)
// and served to that tenant for a whole cache TTL.
func lookupLayers(source proxy.Layer, kv *routes.KV, embedded bool) []proxy.Layer {
	if kv == nil || embedded {
		return []proxy.Layer{source}
	}
	return []proxy.Layer{*kv, source}
}
