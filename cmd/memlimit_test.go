package main

import (
	"errors"
	"math"
	"runtime/debug"
	"testing"
)

func TestSetMemoryLimitFollowsTheCgroup(t *testing.T) {
	defer debug.SetMemoryLimit(math.MaxInt64)
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if v, ok := m[p]; ok {
				return []byte(v), nil
			}
			return nil, errors.New("no such file")
		}
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		env   string
		want  int64
	}{
		{"cgroup v2 limit", map[string]string{"/sys/fs/cgroup/memory.max": "536870912\n"}, "", 483183819},
		{"cgroup v2 unlimited", map[string]string{"/sys/fs/cgroup/memory.max": "max\n"}, "", 0},
		{"cgroup v1 limit", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824"}, "", 966367638},
		{"cgroup v1 unlimited", map[string]string{"/sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712"}, "", 0},
		{"no cgroup", nil, "", 0},
		{"GOMEMLIMIT wins", map[string]string{"/sys/fs/cgroup/memory.max": "536870912"}, "400MiB", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tc.env)
			debug.SetMemoryLimit(math.MaxInt64)
			if got := setMemoryLimit(files(tc.files)); got != tc.want {
				t.Errorf("setMemoryLimit = %d, want %d", got, tc.want)
			}
			if tc.want > 0 {
				if got := debug.SetMemoryLimit(-1); got != tc.want {
					t.Errorf("the runtime's limit is %d, want %d", got, tc.want)
				}
			}
		})
	}
}

func TestSetGCPercentYieldsToGOGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	if got := setGCPercent(50); got != 50 {
		t.Errorf("without GOGC: %d, want the flag's 50", got)
	}
	if got := debug.SetGCPercent(50); got != 50 {
		t.Errorf("the runtime's GOGC is %d, want 50", got)
	}
	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200) // as the runtime read it at start
	if got := setGCPercent(50); got != 200 {
		t.Errorf("with GOGC=200: %d, want 200", got)
	}
	if got := debug.SetGCPercent(200); got != 200 {
		t.Errorf("the runtime's GOGC is %d, want GOGC's 200", got)
	}
}
