package proxy

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// deadlineCounter counts the read deadlines set on a connection.
type deadlineCounter struct {
	net.Conn
	reads atomic.Int64
}

func (c *deadlineCounter) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

// A busy connection moves its idle deadline once per slack, not once per read, and a
// peer that stops is still cut: no earlier than the idle timeout, no later than the
// timeout and its slack.
func TestIdleDeadlineMovesPerConnectionNotPerRead(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	counted := &deadlineCounter{Conn: server}
	const idle = 400 * time.Millisecond
	c := newIdleConn(counted, idle, idle, nil)
	defer c.Close()

	go func() {
		for range 1000 {
			if _, err := client.Write([]byte("x")); err != nil {
				return
			}
		}
	}()
	b := make([]byte, 1)
	for range 1000 {
		if _, err := c.Read(b); err != nil {
			t.Fatal(err)
		}
	}
	if n := counted.reads.Load(); n != 1 {
		t.Errorf("1000 reads in a burst set the read deadline %d times, want 1", n)
	}

	// The peer stops: the read is cut within [idle, idle + idle/16] of its last byte,
	// whenever within the slack it came.
	time.Sleep(idle / 32)
	start := time.Now()
	_, err := c.Read(b)
	waited := time.Since(start) + idle/32
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a stalled read ended with %v, want a deadline", err)
	}
	if waited < idle || waited > idle+idle/16+100*time.Millisecond {
		t.Errorf("a stalled read was cut after %v, want between %v and %v", waited, idle, idle+idle/16)
	}

	// An explicit deadline holds as set, and lifting it brings the idle one back.
	_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start = time.Now()
	if _, err := c.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > idle/2 {
		t.Errorf("an explicit deadline: %v after %v", err, time.Since(start))
	}
	_ = c.SetReadDeadline(time.Time{})
	start = time.Now()
	if _, err := c.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < idle {
		t.Errorf("after the explicit deadline was lifted: %v after %v, want the idle timeout", err, time.Since(start))
	}
}
