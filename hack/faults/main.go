// Command faults runs the SIGKILL scenario of internal/faults at a chosen scale and
// prints the counts of each run (hack/bench-faults.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/faults"
)

func main() {
	cfg := faults.Config{}
	flag.StringVar(&cfg.Manager, "manager", "bin/manager", "the manager binary")
	flag.IntVar(&cfg.Routes, "routes", 3000, "TenantRoutes created; a third of them are then deleted")
	flag.IntVar(&cfg.Kills, "kills", 6, "SIGKILLs while creating, and again while deleting")
	flag.DurationVar(&cfg.MaxKillAfter, "max-kill-after", 6*time.Second, "latest moment of a kill after the manager started")
	flag.DurationVar(&cfg.OutageAtStart, "outage-at-start", 4*time.Second, "each killed start meets both providers answering 503 for a random part of this long")
	flag.BoolVar(&cfg.Sweep, "sweep", false, "run the clean run with the orphan sweep on")
	flag.DurationVar(&cfg.Settle, "settle", 10*time.Minute, "bound of the clean run")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of the kill moments (0: random)")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for the manager's logs (default: a new temporary one)")
	args := flag.String("manager-args", "", "more arguments for the manager, space-separated (e.g. --zap-log-level=debug)")
	flag.Parse()
	cfg.ManagerArgs = strings.Fields(*args)
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "faults-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		cfg.Dir = d
	}
	cfg.Log = func(format string, args ...any) { fmt.Printf("  "+format+"\n", args...) }
	rep, err := faults.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	verdict := "CLEAN"
	if !rep.Clean() {
		verdict = "NOT CLEAN"
	}
	fmt.Printf("%s: %s (manager logs in %s)\n", verdict, rep, cfg.Dir)
	if !rep.Clean() {
		os.Exit(1)
	}
}
