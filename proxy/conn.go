package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// idleConn bounds the time between operations rather than whole messages: without an
// explicit deadline, each read and each write must make progress within its idle
// timeout, so a stalled peer is cut while a long stream (SSE, long-poll, a large
// download) is not. An explicit deadline (fasthttp's header and keep-alive limits, a
// tunnel's own clock) holds as set. A tunnel reads and writes on two goroutines, so
// each direction keeps its own state.
//
// The idle deadline is moved per connection, not per operation: it is set a slack
// (1/16 of the timeout) beyond the timeout and moved again only once less than the
// timeout is left, so a stalled peer is cut between idle and idle+slack after its last
// progress, and a busy connection resets its timer once per slack instead of on every
// read and write (each reset locks the descriptor's poller and moves a runtime timer).
type idleConn struct {
	net.Conn
	readIdle, writeIdle time.Duration
	readHard, writeHard atomic.Bool
	// readUntil and writeUntil: the idle deadline set last, as an offset from epoch on
	// the monotonic clock; 0 when an explicit deadline replaced it.
	readUntil, writeUntil atomic.Int64
	// readMu and writeMu order a move of the idle deadline with an explicit deadline set
	// from another goroutine (the handler stopping a body sender), which must not be
	// overwritten.
	readMu, writeMu sync.Mutex
	closed          atomic.Bool
	onClose         func()
	// linger, if set, closes in two steps, as nginx's lingering close and Go's
	// server do: first the write side (FIN after the answer), then, after what the
	// peer still sends was read for up to linger, the socket. Closing a socket with
	// unread data sends a reset, which can destroy the answer before the client read
	// it: a client still uploading when the proxy (or its backend) answered early
	// would see "connection reset" instead of the 401 or 413.
	linger time.Duration
	// lookupCounted: the loop engine counted the route lookup of the first request
	// it hands over on this connection (it sent that request to a backend that
	// failed); the fasthttp engine looks the route up again but does not count it.
	lookupCounted atomic.Bool
	// readBy (Unix ns, 0: none) caps the next read deadline set: a request the loop
	// engine hands over mid-header keeps the deadline its first byte started, which
	// fasthttp's server would set afresh.
	readBy atomic.Int64
}

// Once Close has been called, deadlines are left alone: the lingering close set its
// own, and a late deadline from a reader still blocked on the connection (a TLS
// handshake interrupted by its timeout) would keep the socket, and its connection
// slot, forever.

// lingerMax bounds what a lingering close reads from a client that keeps sending.
const lingerMax = 4 << 20

func newIdleConn(c net.Conn, readIdle, writeIdle time.Duration, onClose func()) *idleConn {
	return &idleConn{Conn: c, readIdle: readIdle, writeIdle: writeIdle, onClose: onClose}
}

func (c *idleConn) Read(b []byte) (int, error) {
	if !c.readHard.Load() && !c.closed.Load() {
		moveIdle(&c.readMu, &c.readHard, &c.closed, &c.readUntil, c.readIdle, c.Conn.SetReadDeadline)
	}
	return c.Conn.Read(b)
}

func (c *idleConn) Write(b []byte) (int, error) {
	if !c.writeHard.Load() && !c.closed.Load() {
		moveIdle(&c.writeMu, &c.writeHard, &c.closed, &c.writeUntil, c.writeIdle, c.Conn.SetWriteDeadline)
	}
	return c.Conn.Write(b)
}

// epoch anchors idle deadlines on the monotonic clock: a step of the wall clock (NTP,
// a resumed VM) must neither hold a deadline back nor cut a busy connection.
var epoch = time.Now()

// moveIdle sets the idle deadline again once less than idle is left of it, unless an
// explicit deadline holds.
func moveIdle(mu *sync.Mutex, hard, closed *atomic.Bool, until *atomic.Int64, idle time.Duration, set func(time.Time) error) {
	now := time.Since(epoch)
	if time.Duration(until.Load())-now >= idle {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if hard.Load() || closed.Load() {
		return
	}
	deadline := now + idle + idle/16
	until.Store(int64(deadline))
	_ = set(epoch.Add(deadline))
}

func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	if c.closed.Load() {
		return nil // the lingering close owns the deadline now
	}
	if by := c.readBy.Load(); by != 0 { // (read first: no write at every other call)
		c.readBy.Store(0)
		if t.IsZero() || t.UnixNano() > by {
			t = time.Unix(0, by)
		}
	}
	c.readHard.Store(!t.IsZero())
	c.readUntil.Store(0)
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) SetWriteDeadline(t time.Time) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.closed.Load() {
		return nil // the lingering close owns the deadline now
	}
	c.writeHard.Store(!t.IsZero())
	c.writeUntil.Store(0)
	return c.Conn.SetWriteDeadline(t)
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.closed.Load() {
		return nil // the lingering close owns the deadline now
	}
	c.readHard.Store(!t.IsZero())
	c.writeHard.Store(!t.IsZero())
	c.readUntil.Store(0)
	c.writeUntil.Store(0)
	return c.Conn.SetDeadline(t)
}

func (c *idleConn) Close() error {
	// Under both locks, so that a deadline setter that checked closed before cannot
	// overwrite the lingering close's deadline after.
	c.readMu.Lock()
	c.writeMu.Lock()
	first := c.closed.CompareAndSwap(false, true)
	c.writeMu.Unlock()
	c.readMu.Unlock()
	if !first {
		return nil
	}
	if tc, ok := c.Conn.(halfCloser); ok && c.linger > 0 && tc.CloseWrite() == nil {
		go func() {
			_ = tc.SetReadDeadline(time.Now().Add(c.linger))
			_, _ = io.CopyN(io.Discard, tc, lingerMax)
			c.closeNow()
		}()
		return nil
	}
	return c.closeNow()
}

// halfCloser is a connection whose write side closes alone: a TCP connection, or one
// the loop engine handed over with the bytes it had read (prefixConn).
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

func (c *idleConn) closeNow() error {
	err := c.Conn.Close()
	if c.onClose != nil {
		c.onClose()
	}
	return err
}
