package proxy

import (
	"io"
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
	// linger, if set, closes in two steps, as nginx's lingering close and Go's
	// server do: first the write side (FIN after the answer), then, after what the
	// peer still sends was read for up to linger, the socket. Closing a socket with
	// unread data sends a reset, which can destroy the answer before the client read
	// it: a client still uploading when the proxy (or its backend) answered early
	// would see "connection reset" instead of the 401 or 413.
	linger time.Duration
}

// lingerMax bounds what a lingering close reads from a client that keeps sending.
const lingerMax = 4 << 20

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
	if !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	if tc, ok := c.Conn.(*net.TCPConn); ok && c.linger > 0 && tc.CloseWrite() == nil {
		go func() {
			_ = tc.SetReadDeadline(time.Now().Add(c.linger))
			_, _ = io.CopyN(io.Discard, tc, lingerMax)
			c.closeNow()
		}()
		return nil
	}
	return c.closeNow()
}

func (c *idleConn) closeNow() error {
	err := c.Conn.Close()
	if c.onClose != nil {
		c.onClose()
	}
	return err
}
