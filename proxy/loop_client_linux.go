//go:build linux

package proxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// A loop's client side: a request read and looked up, the proxy's own answers, an
// answer written and the connection kept, closed or handed to fasthttp.

func (l *loop) readClient(c *lconn, n int, err error) {
	if c.eof {
		// Its reads are off since its half-close: only a failure (a reset) wakes it.
		l.closeClient(c)
		return
	}
	if n == 0 && err == nil && !c.lingering && (c.busy || len(c.out) > 0) {
		// The client closed its side with a request in flight (a half-close, as
		// some clients end what they send): it may still read, and is answered, as
		// the fasthttp engine answers it, with the requests it sent before; then the
		// connection closes. A client that went away for good fails the write.
		c.eof = true
		l.interest(c, c.events&^unix.EPOLLIN)
		return
	}
	if n <= 0 || err != nil {
		l.closeClient(c)
		return
	}
	if c.lingering {
		if c.lingerLeft -= n; c.lingerLeft <= 0 {
			l.closeClient(c)
		}
		return
	}
	c.in = append(c.in, l.buf[:n]...)
	if c.busy || len(c.out) > 0 {
		// Pipelined: held until the answer in flight is out, and not read past a
		// header's worth meanwhile.
		if len(c.in) > l.p.opts.MaxRequestHeaderBytes {
			l.interest(c, c.events&^unix.EPOLLIN)
		}
		return
	}
	l.next(c)
}

// next serves the request at the start of c.in, if one is there.
func (l *loop) next(c *lconn) {
	if c.busy || c.closed || c.closeAfter || len(c.out) > 0 || len(c.in) == 0 {
		return
	}
	if c.events&unix.EPOLLIN == 0 && !c.eof {
		// Reads were held back while an answer was out (pipelining): what is left of
		// this request must be read.
		l.interest(c, c.events|unix.EPOLLIN)
	}
	if c.bodyPending() {
		return
	}
	end, plain := c.header()
	if !plain {
		l.handOff(c)
		return
	}
	if end < 0 {
		if len(c.in) >= l.p.opts.MaxRequestHeaderBytes {
			l.handOff(c) // fasthttp answers 431
		} else if !c.inHeader {
			// The header began: it has ClientHeaderTimeout from its first byte.
			c.inHeader = true
			c.deadline = l.now + int64(l.p.opts.ClientHeaderTimeout)
		}
		return
	}
	if end > l.p.opts.MaxRequestHeaderBytes {
		l.handOff(c)
		return
	}
	r, ok := readClientRequest(c.in[:end], &l.fields)
	if !ok || r.length > l.p.opts.MaxRequestBodyBytes {
		l.handOff(c)
		return
	}
	if len(c.in) < end+r.length {
		// The body is not all in. A body the loop reads (8 KiB at most) comes within
		// the header's deadline, as fasthttp's server reads one: a byte at a time,
		// each restarting ClientReadTimeout, a few bytes would hold the connection
		// for hours. A header that came whole in one read starts its clock now.
		if !c.inHeader {
			c.deadline = l.now + int64(l.p.opts.ClientHeaderTimeout)
		}
		c.inHeader, c.inBody = false, true
		c.awaitBody(end, end+r.length)
		return
	}
	var hostBuf [256]byte
	host, err := routes.NormalizeHost(r.host, hostBuf[:0])
	if err != nil {
		l.handOff(c) // fasthttp answers 400
		return
	}
	c.busy, c.inHeader, c.inBody, c.deadline, c.scanned, c.headerEnd = true, false, false, 0, 0, 0
	ex := &c.ex
	*ex = loopExchange{req: emptied(ex.req), headerLen: end, reqLen: end + r.length, head: r.head, close: r.close,
		replayable: r.replayable, start: time.Unix(0, l.now)}
	// The tenant, the last field, is added once the route is known.
	ex.req = appendBackendRequest(ex.req, &r, c.ip, l.p.opts.trusted(c.ip))
	route, outcome, ok := l.p.chain.cached(host, l.now)
	switch {
	case !ok && l.p.chain.inMemory:
		route, outcome = l.p.chain.LookupAt(context.Background(), host, l.now)
	case !ok:
		l.lookUp(c, string(host))
		return
	}
	l.routed(c, route, outcome)
}

// lookUp asks the chain's layers on a goroutine, and carries on once they answered.
func (l *loop) lookUp(c *lconn, host string) {
	go func() {
		route, outcome := l.p.chain.LookupAt(context.Background(), []byte(host), time.Now().UnixNano())
		l.post(func() {
			if !c.closed {
				l.routed(c, route, outcome)
			}
		})
	}()
}

func (l *loop) routed(c *lconn, route *CachedRoute, outcome Outcome) {
	switch outcome {
	case OutcomeNotFound:
		l.tally.lookup(outcome)
		l.answer(c, fasthttp.StatusNotFound, outcome, "no tenant is served at this host\n", false)
		return
	case OutcomeError:
		l.tally.lookup(outcome)
		l.answer(c, fasthttp.StatusServiceUnavailable, outcome, "the route of this host cannot be looked up right now\n", true)
		return
	}
	ex := &c.ex
	ex.route, ex.outcome = route, outcome
	ex.req = append(append(ex.req, route.Tenant...), "\r\n\r\n"...)
	ex.req = append(ex.req, c.in[ex.headerLen:ex.reqLen]...) // the body
	ex.attempts = len(route.Backends) + 1
	ex.tried = ex.triedBuf[:0]
	l.forward(c)
}

// answer is refuse's: the proxy's own answer to the request in flight.
// A request that had a body closes its connection after, as refuse closes it.
func (l *loop) answer(c *lconn, status int, outcome Outcome, body string, retry bool) {
	closeClient := c.ex.close || c.ex.reqLen > c.ex.headerLen || l.stopping || l.p.draining.Load()
	out := fmt.Appendf(l.out[:0], "HTTP/1.1 %d %s\r\nServer: "+serverName+"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n",
		status, fasthttp.StatusMessage(status), len(body))
	if retry {
		out = append(append(append(out, "Retry-After: "...), l.p.retryAfter...), "\r\n"...)
	}
	if closeClient {
		out = append(out, "Connection: close\r\n"...)
	}
	if !c.ex.head {
		out = append(append(out, "\r\n"...), body...)
	} else {
		out = append(out, "\r\n"...)
	}
	l.out = out[:0]
	l.tally.answer(status, outcome)
	l.respond(c, out, closeClient)
}

// respond writes the answer to the request in flight and ends it.
func (l *loop) respond(c *lconn, out []byte, closeAfter bool) {
	l.beginAnswer(c, closeAfter)
	if err := l.write(c, out); err != nil {
		l.closeClient(c)
		return
	}
	l.endAnswer(c)
}

// beginAnswer: the request is answered from now on; what the client sent after it is
// read again.
func (l *loop) beginAnswer(c *lconn, closeAfter bool) {
	if c.in = c.in[:copy(c.in, c.in[c.ex.reqLen:])]; len(c.in) == 0 {
		c.in = emptied(c.in)
	}
	c.closeAfter, c.served = closeAfter, true
	if c.events&unix.EPOLLIN == 0 && !c.eof {
		l.interest(c, c.events|unix.EPOLLIN)
	}
}

// endAnswer: the answer is whole; once it is written the connection waits for the
// next request, or closes.
func (l *loop) endAnswer(c *lconn) {
	c.peer = nil
	c.busy, c.streaming = false, false
	c.ex.route, c.ex.lastErr, c.ex.lastBackend = nil, nil, nil
	if len(c.out) > 0 {
		c.deadline = l.now + int64(l.p.opts.ClientWriteTimeout)
		return
	}
	l.written(c)
}

// written: the answer is out; the connection waits for the next request, or closes.
func (l *loop) written(c *lconn) {
	if c.closeAfter || l.stopping {
		l.linger(c)
		return
	}
	c.deadline = l.now + int64(l.p.opts.ClientIdleTimeout)
	if len(c.in) > 0 {
		c.inHeader = true
		c.deadline = l.now + int64(l.p.opts.ClientHeaderTimeout)
		l.next(c)
	}
	if c.eof && !c.closed && !c.busy && len(c.out) == 0 {
		l.closeClient(c) // nothing more will come
	}
}

// linger closes c's write side and reads what the client still sends for a while,
// as idleConn does: closing with unread bytes would reset the connection and could
// destroy the answer before the client read it.
func (l *loop) linger(c *lconn) {
	if unix.Shutdown(c.fd, unix.SHUT_WR) == nil {
		c.lingering, c.lingerLeft = true, lingerMax
		c.in = c.in[:0]
		c.deadline = l.now + int64(lingerTimeout)
		l.interest(c, unix.EPOLLIN)
		return
	}
	l.closeClient(c)
}

// closeClient closes c and whatever exchange it had in flight.
func (l *loop) closeClient(c *lconn) {
	if c.closed {
		return
	}
	if b := c.peer; b != nil {
		l.closeBackend(b)
	}
	if c.waitFor != nil {
		l.handBack = true // its place in the queue goes to the next (retryWaiting)
	}
	l.forget(c)
	_ = unix.Close(c.fd)
	l.p.limits.release(c.ip)
}

// handOff gives c to the fasthttp server, with what was read of it. Nothing of its
// request was forwarded yet, or a GET or HEAD that a reused connection lost.
func (l *loop) handOff(c *lconn) {
	nc, err := l.detach(c, tooManyConns)
	if err != nil {
		l.p.limits.release(c.ip)
		return
	}
	ic := newIdleConn(nc, l.p.opts.ClientReadTimeout, l.p.opts.ClientWriteTimeout, func() { l.p.limits.release(c.ip) })
	ic.linger = lingerTimeout
	// (Only a request in flight was looked up: one handed over as it is read is not,
	// and c.ex is still the previous request's.)
	ic.lookupCounted.Store(c.busy && c.ex.observed)
	if c.inHeader || c.inBody {
		ic.readBy.Store(c.deadline)
	}
	l.e.handoff.push(ic)
}

// detach takes c off the loop as a net.Conn that first reads what c.in holds. When
// it cannot (no descriptor to spare: the process at its limit), refusal is written to
// c, so that a client is answered rather than dropped, and c is closed.
func (l *loop) detach(c *lconn, refusal []byte) (net.Conn, error) {
	l.forget(c)
	f := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(f) // a descriptor of its own, in Go's poller
	if err != nil && refusal != nil {
		_, _ = unix.Write(c.fd, refusal)
		_ = unix.Shutdown(c.fd, unix.SHUT_WR)
	}
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		_ = nc.Close()
		return nil, fmt.Errorf("not a TCP connection: %T", nc)
	}
	return &prefixConn{TCPConn: tc, pending: c.in}, nil
}

// timedOut tells a client whose request (its header, or its body) did not come in
// time so, as the fasthttp engine does, and closes the connection as after any
// answer: lingering over what the client still sends, which a plain close would
// answer with a reset that can destroy the 408 before it is read.
func (l *loop) timedOut(c *lconn) {
	c.inHeader, c.inBody, c.closeAfter = false, false, true
	if err := l.write(c, timedOutAnswer); err != nil {
		l.closeClient(c)
		return
	}
	if len(c.out) > 0 {
		c.deadline = l.now + int64(l.p.opts.ClientWriteTimeout)
		return
	}
	l.linger(c)
}

var timedOutAnswer = fmt.Appendf(nil, "HTTP/1.1 408 Request Timeout\r\nServer: %s\r\nContent-Type: text/plain; charset=utf-8\r\n"+
	"Content-Length: %d\r\nConnection: close\r\n\r\n%s", serverName, len(requestTimeout), requestTimeout)
