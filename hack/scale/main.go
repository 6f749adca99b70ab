// Command scale runs internal/scale at a chosen size and prints its report
// (hack/bench-scale.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenantroute/tenantroute-operator/internal/scale"
)

func main() {
	ctrllog.SetLogger(logr.Discard()) // the route watch's informer logs nothing worth reading here
	cfg := scale.Config{}
	flag.StringVar(&cfg.Manager, "manager", "bin/manager", "the manager binary")
	flag.IntVar(&cfg.Routes, "routes", 10000, "TenantRoutes, one hostname each")
	flag.IntVar(&cfg.Zones, "zones", 10, "zones the hostnames are spread over")
	flag.DurationVar(&cfg.Steady, "steady", time.Minute, "how long steady state is watched")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "bound of each phase")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for the manager's logs (default: a new temporary one)")
	flag.BoolVar(&cfg.WithoutFinalizerPolicy, "without-finalizer-policy", false, "leave out config/policy/route_finalizer.yaml: the manager adds every finalizer")
	args := flag.String("manager-args", "", "more arguments for the manager, space-separated")
	flag.Parse()
	cfg.ManagerArgs = strings.Fields(*args)
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "scale-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cfg.Dir = d
	}
	start := time.Now()
	cfg.Log = func(format string, args ...any) {
		fmt.Printf("  [%4.0fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	// Interrupted or terminated, the run stops its manager, API server and etcd on the
	// way out: left running, they shared the machine with the next run unnoticed.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := scale.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		fmt.Fprintf(os.Stderr, "so far: %s\n(manager logs in %s)\n", rep, cfg.Dir)
		os.Exit(1)
	}
	fmt.Printf("%s\n(manager logs in %s)\n", rep, cfg.Dir)
}
