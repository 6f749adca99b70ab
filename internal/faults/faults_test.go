package faults

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// The manager killed with SIGKILL three times at random moments while it creates 300
// TenantRoutes and three times while it deletes a third of them, then run cleanly
// with the orphan sweep off: each provider holds exactly the remaining routes'
// records, once — nothing a deletion left behind — and every deleted route is gone.
// hack/bench-faults.sh runs the same at 3,000 routes. FAULTS_SEED replays a run.
func TestSIGKILLLeavesNeitherOrphansNorDuplicates(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, "./cmd")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the manager: %v\n%s", err, out)
	}
	seed, _ := strconv.ParseUint(os.Getenv("FAULTS_SEED"), 10, 64)
	rep, err := Run(context.Background(), Config{Manager: bin, Routes: 300, Kills: 3, MaxKillAfter: 4 * time.Second, OutageAtStart: 3 * time.Second,
		Settle: 3 * time.Minute, Dir: dir, Seed: seed, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(rep)
	if !rep.Clean() {
		t.Errorf("not exactly the remaining routes' records (FAULTS_SEED=%d replays the kill moments): %s", rep.Seed, rep)
		for _, f := range []string{"manager-07.log"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && len(b) > 0 {
				t.Logf("%s (last 4 KiB):\n%s", f, b[max(0, len(b)-4096):])
			}
		}
	}
}
