package proxy

import (
	"net"
	"sync/atomic"
	"time"
)

// idleConn bounds the time between operations rather than whole messages: without an
// explicit deadline, each read and each write must make progress within its idle
// timeout, so a stalled peer is cut while a long stream (SSE, long-poll, a large
// download) is not. An explicit deadline (fasthttp's header and keep-alive limits, a
// tunnel's own clock) holds as set. A tunnel reads and writes on two goroutines, so
// each direction keeps its own state.
type idleConn struct {
	net.Conn
	readIdle, writeIdle time.Duration
	readHard, writeHard atomic.Bool
	closed              atomic.Bool
	onClose             func()
}

func newIdleConn(c net.Conn, readIdle, writeIdle time.Duration, onClose func()) *idleConn {
	return &idleConn{Conn: c, readIdle: readIdle, writeIdle: writeIdle, onClose: onClose}
}

func (c *idleConn) Read(b []byte) (int, error) {
	if !c.readHard.Load() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.readIdle))
	}
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if !c.writeHard.Load() {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.writeIdle))
	}
	return c.Conn.Write(b)
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.readHard.Store(!t.IsZero())
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) SetWriteDeadline(t time.Time) error {
	c.writeHard.Store(!t.IsZero())
	return c.Conn.SetWriteDeadline(t)
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.readHard.Store(!t.IsZero())
	c.writeHard.Store(!t.IsZero())
	return c.Conn.SetDeadline(t)
}

func (c *idleConn) Close() error {
	if c.closed.CompareAndSwap(false, true) && c.onClose != nil {
		c.onClose()
	}
	return c.Conn.Close()
}
