// Command manager runs the tenantroute operator.
package main

import (
	"flag"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	routingv1alpha1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
)

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	var (
		metricsAddr    string
		probeAddr      string
		leaderElection bool
		secureMetrics  bool
		opts           controllers.Options
		apiQPS         float64
		apiBurst       int
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.BoolVar(&secureMetrics, "metrics-secure", false, "Serve metrics over HTTPS, authenticating and authorising scrapers with TokenReview and SubjectAccessReview.")
	flag.BoolVar(&leaderElection, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.StringVar(&opts.Namespace, "namespace", envOr("POD_NAMESPACE", "tenantroute-system"), "Namespace of the EdgeProviders' credential Secrets (the operator's own).")
	flag.StringVar(&opts.Instance, "instance", "default", "Name of this installation in the ownership marker of its records; installations sharing zones need different names.")
	flag.DurationVar(&opts.ZoneResync, "zone-resync", 10*time.Minute, "How often each DNS zone is listed again.")
	flag.DurationVar(&opts.Queue.Quiet, "coalesce-quiet", time.Second, "A zone's pending changes are applied once no TenantRoute changed for this long...")
	flag.DurationVar(&opts.Queue.MaxWait, "coalesce-max-wait", 5*time.Second, "...or, while changes keep coming, full batches go out once the oldest pending change has waited this long.")
	flag.IntVar(&opts.MaxConcurrentReconciles, "max-concurrent-reconciles", 16, "TenantRoutes reconciled at once.")
	flag.Float64Var(&apiQPS, "kube-api-qps", 200, "Requests per second to the Kubernetes API server (client-go's default of 20 would take minutes to report on 10,000 TenantRoutes).")
	flag.IntVar(&apiBurst, "kube-api-burst", 400, "Burst of requests to the Kubernetes API server.")
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(routingv1alpha1.AddToScheme(scheme))

	restConfig := ctrl.GetConfigOrDie()
	restConfig.QPS, restConfig.Burst = float32(apiQPS), apiBurst
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsOptions(metricsAddr, secureMetrics),
		// Credential Secrets are read only in the operator's namespace, and cached only there.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.Secret{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}},
		}},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                leaderElection,
		LeaderElectionID:              "tenantroute-operator.routing.tenantroute.io",
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		log.Error(err, "unable to create manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := controllers.Setup(ctx, mgr, opts); err != nil {
		log.Error(err, "unable to set up controllers")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "unable to add health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "unable to add ready check")
		os.Exit(1)
	}

	log.Info("starting manager")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager exited with an error")
		os.Exit(1)
	}
}

func metricsOptions(addr string, secure bool) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if secure {
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}
