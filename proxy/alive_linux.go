package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"time"
)

// reusable reports whether a pooled backend connection can carry a request: the
// backend has not closed it (FIN or RST) and has sent nothing unasked (some servers
// write a 408 before closing an idle connection). nginx learns this from a read event
// on the idle socket and Go's Transport from a background read; a pool without either
// would write the next request into a connection the backend already closed. One
// non-blocking peek before reuse costs a syscall and needs no goroutine per connection.
func reusable(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		if !tlsQuiet(tc) {
			return false
		}
		c = tc.NetConn()
	}
	if ic, ok := c.(*idleConn); ok {
		c = ic.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Would block: open and quiet, as an idle connection is. Anything else is
		// end of stream (0 bytes), unasked data, or an error.
		quiet = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && quiet
}

// tlsQuiet reports whether a TLS connection holds no record already read from the
// socket: crypto/tls reads whole records, so bytes a backend sent past its response
// can sit in the connection where no socket peek sees them. A read with a deadline in
// the past returns only what is buffered and costs no system call; crypto/tls does
// not keep a timeout as a sticky error.
func tlsQuiet(tc *tls.Conn) bool {
	_ = tc.SetReadDeadline(time.Unix(1, 0))
	var b [1]byte
	n, err := tc.Read(b[:])
	_ = tc.SetReadDeadline(time.Time{})
	var ne net.Error
	return n == 0 && errors.As(err, &ne) && ne.Timeout()
}
