package harness

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RestartAPIServer stops the kube-apiserver (SIGTERM), waits down, and starts it
// again on the same port, certificates and etcd; it returns once it serves.
func (w *World) RestartAPIServer(ctx context.Context, down time.Duration) error {
	return w.restart(ctx, "kube-apiserver", down, func() error {
		return w.Client.Get(ctx, client.ObjectKey{Name: RoutesNamespace}, &corev1.Namespace{})
	})
}

// StopEtcd stops etcd (SIGTERM), keeps it down for down, and starts it again on the
// same data; it returns once the API server reads through it again.
func (w *World) StopEtcd(ctx context.Context, down time.Duration) error {
	health := w.Env.ControlPlane.Etcd.URL.String() + "/health"
	return w.restart(ctx, "etcd", down, func() error {
		resp, err := http.Get(health)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd health: %s", resp.Status)
		}
		return w.Client.Get(ctx, client.ObjectKey{Name: RoutesNamespace}, &corev1.Namespace{})
	})
}

// restart stops the control-plane process name, a child of this process (envtest's
// or one restarted before), and starts its command line again after down: envtest
// itself would start a new one with new certificates and an empty etcd.
func (w *World) restart(ctx context.Context, name string, down time.Duration, ready func() error) error {
	args, err := w.stopChild(name)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	logf, err := os.OpenFile(filepath.Join(w.Dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting %s again: %w", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	w.mu.Lock()
	stopped := w.stopped
	w.restarted[name] = &child{cmd: cmd, done: done}
	w.mu.Unlock()
	if stopped { // the World stopped while this one was down: it must not outlive it
		w.stopRestarted()
		return errors.New("the world stopped during the restart of " + name)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready a minute after its restart: %w", name, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("%s exited after its restart (log %s)", name, logf.Name())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// child is a control-plane process this World started again.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// stopChild stops the running process name and returns its command line.
func (w *World) stopChild(name string) ([]string, error) {
	w.mu.Lock()
	c := w.restarted[name]
	delete(w.restarted, name)
	w.mu.Unlock()
	pid, args := 0, []string(nil)
	if c != nil {
		pid, args = c.cmd.Process.Pid, c.cmd.Args
	} else {
		var err error
		if pid, args, err = findChild(name); err != nil {
			return nil, err
		}
	}
	if err := terminate(pid); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return args, nil
}

// terminate stops pid as a kubelet stops a container: SIGTERM, and SIGKILL if it has
// not exited within stopGrace (the API server drains its requests for up to a
// minute). Whoever started the process reaps it.
func terminate(pid int) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for start := time.Now(); running(pid); time.Sleep(50 * time.Millisecond) {
		if time.Since(start) > stopGrace {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if time.Since(start) > time.Minute {
			return fmt.Errorf("pid %d still running a minute after SIGTERM", pid)
		}
	}
	return nil
}

// stopGrace is how long a stopped control-plane process may take to exit.
const stopGrace = 5 * time.Second

// running reports whether pid is a process that has not exited (a zombie has).
func running(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	end := strings.LastIndexByte(string(stat), ')')
	return end < 0 || !strings.HasPrefix(strings.TrimSpace(string(stat[end+1:])), "Z")
}

// findChild returns the pid and command line of this process's child named name.
func findChild(name string) (int, []string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		open, end := strings.IndexByte(string(stat), '('), strings.LastIndexByte(string(stat), ')')
		if open < 0 || end < open || string(stat[open+1:end]) != name {
			continue
		}
		fields := strings.Fields(string(stat[end+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			return 0, nil, err
		}
		return pid, strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), nil
	}
	return 0, nil, errors.New("no child process named " + name)
}

// stopRestarted stops what restart started, before envtest stops the rest.
func (w *World) stopRestarted() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	// The API server before etcd, as envtest does.
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if c := w.restarted[name]; c != nil {
			_ = terminate(c.cmd.Process.Pid)
			<-c.done
		}
	}
	w.restarted = map[string]*child{}
}
