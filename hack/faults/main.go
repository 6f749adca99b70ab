// Command faults runs a scenario of internal/faults at a chosen scale and prints what
// each run found (hack/bench-faults.sh):
//
//	-scenario sigkill:   the manager killed while it creates and deletes routes
//	-scenario leader:    two replicas, the leader killed while hostnames change tenant
//	-scenario apiserver: the API server restarted during the sync, etcd stopped
//	-scenario outage:    Route53 answering 503 while hostnames change tenant
//	-scenario throttle:  Cloudflare answering 429 to its first call and 80% of the others
//	-scenario lost:      both providers dropping the answers to a third of the writes
//	-scenario clock:     the replicas' wall clocks stepped ten minutes ahead and back
//	                     (a manager built with -overlay from -wall-clock-overlay)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/faults"
	"github.com/tenantroute/tenantroute-operator/internal/faults/wallclock"
)

func main() {
	scenario := flag.String("scenario", "sigkill", "sigkill, leader, apiserver, outage, throttle, lost or clock")
	overlay := flag.String("wall-clock-overlay", "", "write go build's overlay for a manager whose wall clock the clock scenario steps into this directory, print its path and exit")
	cfg := faults.Config{}
	flag.StringVar(&cfg.Manager, "manager", "bin/manager", "the manager binary")
	flag.IntVar(&cfg.Routes, "routes", 3000, "TenantRoutes created (sigkill: a third of them are then deleted)")
	flag.IntVar(&cfg.Kills, "kills", 6, "sigkill: SIGKILLs while creating, and again while deleting")
	flag.DurationVar(&cfg.MaxKillAfter, "max-kill-after", 6*time.Second, "sigkill: latest moment of a kill after the manager started")
	flag.DurationVar(&cfg.OutageAtStart, "outage-at-start", 4*time.Second, "sigkill: each killed start meets both providers answering 503 for a random part of this long")
	flag.BoolVar(&cfg.Sweep, "sweep", false, "sigkill: run the clean run with the orphan sweep on")
	flag.DurationVar(&cfg.Settle, "settle", 10*time.Minute, "bound of the clean run (leader: of each round)")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "sigkill: seed of the kill moments (0: random)")
	moves := flag.Int("moves", 300, "all but sigkill: hostnames that change tenant in each round")
	rounds := flag.Int("rounds", 3, "all but sigkill: rounds of moves, a fault in each (outage, throttle, lost: the first without)")
	faultFor := flag.Duration("fault-for", 10*time.Minute, "outage, throttle, lost: how long the provider fault lasts")
	etcdDown := flag.Duration("etcd-down", 30*time.Second, "apiserver: how long etcd stays stopped")
	flag.StringVar(&cfg.Dir, "dir", "", "directory for the manager's logs (default: a new temporary one)")
	args := flag.String("manager-args", "", "more arguments for the manager, space-separated (e.g. --zap-log-level=debug)")
	flag.Parse()
	if *overlay != "" {
		path, err := wallclock.Overlay(*overlay)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(path)
		return
	}
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
	var clean bool
	var report fmt.Stringer
	var err error
	switch *scenario {
	case "sigkill":
		var rep faults.Report
		rep, err = faults.Run(context.Background(), cfg)
		clean, report = rep.Clean(), rep
	default:
		var rep faults.ScenarioReport
		rep, err = faults.RunScenario(context.Background(), faults.ScenarioConfig{Scenario: *scenario, Manager: cfg.Manager, Routes: cfg.Routes,
			Moves: *moves, Rounds: *rounds, KillWithin: 20 * time.Second, Route53Latency: time.Second, FaultFor: *faultFor, EtcdDown: *etcdDown,
			Settle: cfg.Settle, ManagerArgs: cfg.ManagerArgs, Dir: cfg.Dir, Log: cfg.Log})
		clean, report = rep.Clean(), rep
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults:", err)
		os.Exit(1)
	}
	verdict := "CLEAN"
	if !clean {
		verdict = "NOT CLEAN"
	}
	fmt.Printf("%s: %s (manager logs in %s)\n", verdict, report, cfg.Dir)
	if !clean {
		os.Exit(1)
	}
}
