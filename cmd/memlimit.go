package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupMemoryFiles hold the container's memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// setMemoryLimit tells Go's garbage collector the container's memory limit (90 % of
// it, leaving room for what the runtime does not count), so that the heap is collected
// harder near the limit instead of growing past it and being OOM-killed: with the
// default GOGC the heap may reach twice what is live. GOMEMLIMIT, when set, wins.
// It returns the limit set, 0 for none.
func setMemoryLimit(read func(string) ([]byte, error)) int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	for _, path := range cgroupMemoryFiles {
		b, err := read(path)
		if err != nil {
			continue
		}
		limit, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		// "max" (v2) or a huge number (v1) mean no limit.
		if err != nil || limit <= 0 || limit >= 1<<60 {
			return 0
		}
		soft := limit / 10 * 9
		debug.SetMemoryLimit(soft)
		return soft
	}
	return 0
}

// setGCPercent sets the collector's GOGC to percent unless the GOGC environment
// variable is set, which wins as it does for any Go program. It returns the value in
// force.
func setGCPercent(percent int) int {
	if v := os.Getenv("GOGC"); v != "" {
		old := debug.SetGCPercent(-1)
		debug.SetGCPercent(old)
		return old
	}
	debug.SetGCPercent(percent)
	return percent
}
