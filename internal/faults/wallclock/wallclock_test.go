package wallclock

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A program built with the overlay, stepped ten minutes ahead and back: its wall
// clock follows each step within a few reads, its monotonic clock does not move.
func TestAStepMovesTheWallClockOnly(t *testing.T) {
	dir := t.TempDir()
	overlay, err := Overlay(filepath.Join(dir, "overlay"))
	if err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "main.go")
	if err := os.WriteFile(main, []byte(`package main

import (
	"fmt"
	"time"
)

func main() {
	start := time.Now()
	for range 400 {
		fmt.Println(time.Now().Unix(), int64(time.Since(start)/time.Millisecond))
		time.Sleep(20 * time.Millisecond)
	}
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "clock")
	build := exec.Command("go", "build", "-overlay", overlay, "-o", bin, main)
	build.Dir = dir
	build.Env = append(os.Environ(), "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -overlay: %v\n%s", err, out)
	}
	stepFile := filepath.Join(dir, "step")
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), EnvFile+"="+stepFile)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(out)
	// read returns the next line's offset of the program's wall clock from ours, and
	// its monotonic time since it started.
	read := func() (time.Duration, time.Duration) {
		t.Helper()
		if !lines.Scan() {
			t.Fatal("the program ended")
		}
		var wall, mono int64
		if _, err := fmt.Sscan(lines.Text(), &wall, &mono); err != nil {
			t.Fatal(err)
		}
		return time.Until(time.Unix(wall, 0)), time.Duration(mono) * time.Millisecond
	}
	if off, _ := read(); off.Abs() > 2*time.Second {
		t.Fatalf("without a step the program's clock is %v off", off)
	}
	for _, step := range []time.Duration{10 * time.Minute, 0} {
		if err := Step(stepFile, step); err != nil {
			t.Fatal(err)
		}
		var off, mono time.Duration
		for i := 0; i < 20; i++ { // 400 ms: the step is read every 50 ms
			if off, mono = read(); (off - step).Abs() < 2*time.Second {
				break
			}
		}
		if (off - step).Abs() > 2*time.Second {
			t.Fatalf("stepped %v, the program's clock is %v off", step, off)
		}
		if mono > 5*time.Second {
			t.Errorf("stepped %v, the program's monotonic clock says %v since it started", step, mono)
		}
	}
}
