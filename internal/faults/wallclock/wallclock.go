// Package wallclock builds a program whose wall clock a test can step, as NTP steps a
// machine's, while its monotonic clock runs on.
//
// Go reads the wall clock through the vDSO, so neither faketime nor a time namespace
// (monotonic clocks only) moves it for one process, and stepping the machine's clock
// would move the API server, the emulators and every test running beside. Instead the
// program is built with `go build -overlay`, which compiles the standard library's
// time package with time.Now adding a step read from a file: everything in the
// process that reads the wall clock (client-go, the AWS signer, TLS, the operator)
// sees the step, and nothing outside it does.
package wallclock

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvFile names the file a built program reads its step from.
const EnvFile = "TENANTROUTE_WALL_STEP_FILE"

//go:embed wallstep.go.txt
var wallStep string

// nowReads is how time.Now starts reading the clock; the step is added right after.
const nowReads = "func Now() Time {\n\tsec, nsec, mono := runtimeNow()\n"

// Overlay writes, under dir, the time package's changed files and the overlay file
// for `go build -overlay`, and returns the overlay file's path.
func Overlay(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOROOT: %w", err)
	}
	timeDir := filepath.Join(strings.TrimSpace(string(out)), "src", "time")
	src, err := os.ReadFile(filepath.Join(timeDir, "time.go"))
	if err != nil {
		return "", err
	}
	// The toolchain is pinned by go.mod; a new one that reads the clock otherwise must
	// fail here, not build a clock that does not step.
	if strings.Count(string(src), nowReads) != 1 {
		return "", fmt.Errorf("%s/time.go: time.Now no longer starts with runtimeNow(); adapt the wall-clock overlay", timeDir)
	}
	patched := strings.Replace(string(src), nowReads, nowReads+"\tsec += wallStep.Load()\n", 1)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	files := map[string]string{"time.go": patched, "zz_wallstep.go": wallStep}
	replace := map[string]string{}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return "", err
		}
		replace[filepath.Join(timeDir, name)] = path
	}
	b, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		return "", err
	}
	overlay := filepath.Join(dir, "overlay.json")
	return overlay, os.WriteFile(overlay, b, 0o644)
}

// Step sets the step of the programs reading file: step ahead of true time (behind
// when negative), whole seconds.
func Step(file string, step time.Duration) error {
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(int64(step/time.Second), 10)), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file) // a reader sees the old step or the new, whole
}
