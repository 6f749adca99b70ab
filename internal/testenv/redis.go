package testenv

import (
	"net"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Redis runs Debian's redis-server on a free port; Kill and Start stop it and bring
// it back on the same port.
type Redis struct {
	t    testing.TB
	port int
	args []string
	cmd  *exec.Cmd
}

// StartRedis starts a redis-server for the test, with extra server arguments (for
// example "--requirepass", "secret").
func StartRedis(t testing.TB, args ...string) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed (apt-get install redis-server; .ci/run installs it): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	r := &Redis{t: t, port: port, args: args}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Addr is the server's host:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Start starts the server (again) and waits until it accepts connections.
func (r *Redis) Start() {
	r.t.Helper()
	args := append([]string{"--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no"}, r.args...)
	r.cmd = exec.Command("redis-server", args...)
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", r.Addr()); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatal("redis-server did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL), as an outage would.
func (r *Redis) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
		r.cmd = nil
	}
}

// Pause freezes the server (SIGSTOP): it keeps its data but answers nothing, as a
// Redis cut off by the network would.
func (r *Redis) Pause() { _ = r.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume thaws a paused server.
func (r *Redis) Resume() { _ = r.cmd.Process.Signal(syscall.SIGCONT) }
