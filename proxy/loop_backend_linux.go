//go:build linux

package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"
)

// A loop's backend side: a backend picked and a connection to it taken, dialed or
// waited for; the request sent, the answer read, failures retried as serve retries
// them; the connection kept for the next request or closed.

// forward sends the request to the next backend of the route, as serve does: each
// backend once, and one more try for a request a reused connection lost.
func (l *loop) forward(c *lconn) {
	ex := &c.ex
	route := ex.route
	for ex.attempts > 0 {
		ex.attempts--
		// A waiting request tried again goes back to the backend it waited for, at
		// the head of its queue; otherwise the next backend of the route.
		u, turn := ex.turn, ex.turn != nil
		ex.turn = nil
		if u == nil {
			u = l.p.pick(route, ex.tried)
		}
		if u == nil {
			break
		}
		if !u.take(route.Tenant) {
			ex.shareRefused++
			ex.tried = append(ex.tried, u)
			continue
		}
		var b *lconn
		err := errPoolFull
		if l.waits[u] == 0 || turn {
			// (Requests of this loop that wait for a connection to u go first: a new
			// one waits behind them.)
			b, err = l.backend(u, ex.replayable)
		}
		if err != nil {
			u.give(route.Tenant)
			if err == errPoolFull {
				// Every connection the proxy may open to this backend is busy. As the
				// fasthttp engine, the request waits up to DialTimeout for one (another
				// loop closes its idle ones meanwhile); then another backend of the
				// region may have room (none: 503).
				if ex.waitUntil == 0 || l.now < ex.waitUntil {
					if ex.waitUntil == 0 {
						ex.waitUntil = l.now + int64(l.p.opts.DialTimeout)
					}
					ex.attempts++
					u.loopWaiting.Add(1)
					l.waits[u]++
					c.waitFor = u
					l.waiting = append(l.waiting, c)
					return
				}
				ex.waitUntil = 0 // the next backend has a wait of its own
				logBackendError(u.addr, fasthttp.ErrNoFreeConns)
				ex.tried = append(ex.tried, u)
				continue
			}
			if err == errNotLoopable {
				// A backend the loop does not dial (TLS; a name not resolved yet, or
				// of several addresses): the fasthttp engine sends this request
				// (again, if a connection lost it: it is replayable), and counts its
				// lookup.
				l.handOff(c)
				return
			}
			u.coolDown()
			ex.tried = append(ex.tried, u)
			continue
		}
		if !ex.observed {
			l.tally.lookup(ex.outcome)
			ex.observed = true
		}
		ex.waitUntil = 0 // a later attempt (the connection lost) waits afresh
		b.peer, c.peer, b.tenant = c, b, route.Tenant
		if b.connecting {
			b.deadline = l.now + int64(l.p.opts.DialTimeout)
			return
		}
		l.send(b)
		return
	}
	if !ex.observed {
		l.tally.lookup(ex.outcome)
		ex.observed = true
	}
	if ex.lastErr != nil {
		status := fasthttp.StatusBadGateway
		if isTimeout(ex.lastErr) {
			status = fasthttp.StatusGatewayTimeout
		}
		logBackendError(ex.lastBackend.addr, ex.lastErr)
		l.answer(c, status, ex.outcome, "the backend did not answer\n", false)
		return
	}
	if ex.shareRefused > 0 && ex.shareRefused == len(l.p.upstreamsOf(route)) {
		tenantShareFull.Inc()
		logTenantShareFull(route)
		l.answer(c, fasthttp.StatusServiceUnavailable, ex.outcome, "this site has as many requests in progress as it may; try again shortly\n", true)
		return
	}
	l.answer(c, fasthttp.StatusServiceUnavailable, ex.outcome, "no backend of region "+route.Region+" is available\n", true)
}

// quiet reports a connection with nothing to read and no end read: a 1-byte peek
// that would block.
func quiet(fd int) bool {
	var b [1]byte
	_, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return err == unix.EAGAIN
}

// peekAfter: an idle connection this old is peeked at before it is reused.
const peekAfter = time.Second

// handOverFailed answers a client whose exchange could not be handed to the fasthttp
// engine (no descriptor to spare), before any of the backend's answer reached it.
var handOverFailed = []byte("HTTP/1.1 502 Bad Gateway\r\nServer: " + serverName + "\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")

var (
	errNotLoopable = errors.New("the loop engine does not dial this backend")
	errPoolFull    = errors.New("every connection the proxy may open to the backend is busy")
)

// backend returns an idle connection to u, or one being opened. The round's poll
// closed the idle connections whose backend spoke or closed before it (run); what
// arrived since is seen by a peek (as the fasthttp engine peeks at every connection
// it reuses) for a request that cannot be sent again, a connection idle long enough
// that its backend may be closing it (at its idle timeout, some with a 408 first),
// and in a round whose poll could not report every event.
func (l *loop) backend(u *upstream, replayable bool) (*lconn, error) {
	for idle := l.idle[u]; len(idle) > 0; idle = l.idle[u] {
		b := idle[len(idle)-1]
		l.idle[u] = idle[:len(idle)-1]
		if (!replayable || l.fullRound || l.now-b.idleSince >= int64(peekAfter)) && !quiet(b.fd) {
			l.closeBackendOnly(b)
			continue
		}
		b.deadline = 0
		return b, nil
	}
	ap := u.dialAddr(l.now)
	if !ap.IsValid() {
		return nil, errNotLoopable
	}
	if l.holdsPart(u) {
		return nil, errPoolFull
	}
	// Counted before it is checked (as fasthttp counts a connection before it
	// dials): two loops, or a loop and the fasthttp engine, cannot both take the
	// pool's last place.
	if u.loopConns.Add(1)+int64(u.pool.ConnsCount()) > int64(l.p.opts.MaxConnsPerBackend) {
		u.loopConns.Add(-1)
		// The fasthttp engine's idle connections count too: they go, so that the
		// wait is for a busy connection only.
		u.pool.CloseIdleConnections()
		return nil, errPoolFull
	}
	// A Sockaddr of its own: Connect writes into it, and loops dial at once.
	sa := sockaddrOf(ap)
	family := unix.AF_INET
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		u.loopConns.Add(-1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", err)}
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	err = unix.Connect(fd, sa)
	if err != nil && err != unix.EINPROGRESS {
		_ = unix.Close(fd)
		u.loopConns.Add(-1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	b := &lconn{fd: fd, u: u, connecting: err != nil}
	events := uint32(unix.EPOLLIN)
	if b.connecting {
		events |= unix.EPOLLOUT
	}
	if err := l.watch(b, events); err != nil {
		delete(l.conns, fd)
		_ = unix.Close(fd)
		u.loopConns.Add(-1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	l.dialed[u]++
	return b, nil
}

// send writes the request to its backend.
func (l *loop) send(b *lconn) {
	b.deadline = l.now + int64(l.p.opts.UpstreamTimeout)
	if err := l.write(b, b.peer.ex.req); err != nil {
		l.backendFailed(b, err)
	}
}

func (l *loop) readBackend(b *lconn, n int, err error) {
	c := b.peer
	if c == nil {
		l.closeBackend(b) // an idle connection its backend closed, or bytes nobody asked for
		return
	}
	if n <= 0 || err != nil {
		if err == nil {
			err = errBackendClosed
		}
		if c.streaming {
			l.streamEnded(c, b, err)
			return
		}
		l.backendFailed(b, err)
		return
	}
	b.deadline = l.now + int64(l.p.opts.UpstreamTimeout)
	if c.streaming {
		l.pass(c, b, l.out[:0], l.buf[:n])
		return
	}
	b.in = append(b.in, l.buf[:n]...)
	l.answerFrom(b)
}

var errBackendClosed = errors.New("the backend closed the connection")

// answerFrom forwards the backend's answer once it is whole.
func (l *loop) answerFrom(b *lconn) {
	if b.bodyPending() {
		return
	}
	c := b.peer
	ex := &c.ex
	end, plain := b.header()
	if !plain {
		l.handOffExchange(c, b)
		return
	}
	if end < 0 {
		if len(b.in) > l.p.opts.MaxResponseHeaderBytes {
			l.closeBackend(b)
			ex.lastErr, ex.lastBackend = errHeaderTooLarge, b.u
			ex.attempts = 0
			l.forward(c)
		}
		return
	}
	r, ok := readBackendResponse(b.in[:end], &l.fields)
	if !ok || end > l.p.opts.MaxResponseHeaderBytes {
		l.handOffExchange(c, b)
		return
	}
	size := r.length
	if bodyless(r.status, ex.head) {
		size = 0
	}
	if size < 0 || size > smallBody {
		l.startStream(c, b, &r, end)
		return
	}
	if len(b.in) < end+int(size) {
		b.awaitBody(end, end+int(size))
		return
	}
	l.tally.upstreamTime(ex.route, time.Duration(l.now-ex.start.UnixNano()))
	b.u.answered()
	closeClient := ex.close || l.stopping || l.p.draining.Load()
	out := appendClientResponse(l.out[:0], &r, closeClient, false)
	out = append(out, b.in[end:end+int(size)]...)
	l.out = out[:0]
	l.tally.answer(r.status, ex.outcome)
	l.releaseBackend(b, r.keep && len(b.in) == end+int(size))
	l.respond(c, out, closeClient)
}

// backendFailed ends an exchange whose backend connection failed before its answer
// was whole, as serve does: another backend after a failed dial, the same request
// again after a reused connection lost it, a 502 or 504 otherwise.
func (l *loop) backendFailed(b *lconn, err error) {
	c := b.peer
	if c != nil && c.streaming {
		l.streamEnded(c, b, err)
		return
	}
	nothing, reused, dial := len(b.in) == 0, b.reused, b.connecting || isDialError(err)
	u := b.u
	l.closeBackend(b)
	if c == nil {
		return
	}
	c.peer = nil
	ex := &c.ex
	switch {
	case dial:
		u.coolDown()
		ex.tried = append(ex.tried, u)
	case nothing && reused && ex.replayable && err == errBackendClosed:
		// Closed as the request went out, as the fasthttp engine tells it (io.EOF
		// before any byte): a reset, a failed write or a timeout is not sent again.
		ex.lastErr, ex.lastBackend = err, u
	default:
		ex.lastErr, ex.lastBackend = err, u
		ex.attempts = 0
	}
	l.forward(c)
}

// releaseBackend ends b's part in an exchange: back to the idle connections, or
// closed.
func (l *loop) releaseBackend(b *lconn, keep bool) {
	b.u.give(b.tenant)
	b.peer.peer = nil
	b.peer, b.tenant = nil, ""
	if !keep || l.stopping || len(b.out) > 0 || b.failed {
		l.closeBackendOnly(b)
		return
	}
	if b.u.loopWaiting.Load() > 0 {
		if !l.keepsFor(b.u) {
			// Requests wait for a connection to this backend elsewhere: this one is
			// given up for them.
			l.closeBackendOnly(b)
			l.nudge()
			return
		}
		// This loop's first waiting request takes it once the round is over (not
		// from here: the answer being written is in the loop's buffer still).
		l.handBack = true
	}
	b.in, b.scanned, b.headerEnd, b.reused, b.idleSince = emptied(b.in), 0, 0, true, l.now
	b.deadline = l.now + int64(l.p.opts.UpstreamIdleConnTimeout)
	l.idle[b.u] = append(l.idle[b.u], b)
}

// keepsFor reports whether a connection to u given back while requests wait for one
// stays with this loop's waiting requests rather than closing for the others': always
// when only this loop's wait, never when the fasthttp engine's do (its requests are
// few: those the loops handed it), and while the loop holds no more than its part of
// the pool when other loops' wait too. Closed at every turn, a connection would be
// dialed again at every request (a TIME_WAIT each); kept at every turn, the loop that
// held the pool when it filled would hold it for good.
func (l *loop) keepsFor(u *upstream) bool {
	mine := int32(l.waits[u])
	switch {
	case mine == 0 || u.poolWaiting.Load() > 0:
		return false
	case u.loopWaiting.Load() > mine:
		return l.dialed[u] <= l.part(u)
	}
	return true
}

// holdsPart reports whether, with other loops' requests waiting for a connection to
// u, this loop holds its part of the pool already: it dials no more then, so that the
// room another loop gave up (keepsFor) goes to that loop's requests.
func (l *loop) holdsPart(u *upstream) bool {
	part := l.part(u)
	return part > 0 && u.loopWaiting.Load() > int32(l.waits[u]) && l.dialed[u] >= part
}

// part is a loop's part of u's pool when every loop wants more: the pool shared out,
// rounded up; 0 for a pool smaller than the loops, which passes from loop to loop.
func (l *loop) part(u *upstream) int {
	n := len(l.e.loops)
	if l.p.opts.MaxConnsPerBackend < n {
		return 0
	}
	return (l.p.opts.MaxConnsPerBackend + n - 1) / n
}

// nudge has the other loops try their waiting requests again now, rather than at
// their next sweep: this loop gave a connection up for them.
func (l *loop) nudge() {
	for _, o := range l.e.loops {
		if o != l {
			o.post(o.retryWaiting)
		}
	}
}

// undialed counts off a connection to u that leaves the loop.
func (l *loop) undialed(u *upstream) {
	if l.dialed[u]--; l.dialed[u] <= 0 {
		delete(l.dialed, u)
	}
}

// closeBackend closes b, giving back what its exchange held.
func (l *loop) closeBackend(b *lconn) {
	if b.closed {
		return
	}
	if b.peer != nil {
		b.u.give(b.tenant)
		b.peer.peer = nil
	}
	l.closeBackendOnly(b)
}

func (l *loop) closeBackendOnly(b *lconn) {
	if b.closed {
		return
	}
	if b.peer == nil {
		idle := l.idle[b.u]
		for i, x := range idle {
			if x == b {
				l.idle[b.u] = append(idle[:i], idle[i+1:]...)
				break
			}
		}
	}
	l.forget(b)
	_ = unix.Close(b.fd)
	l.undialed(b.u)
	b.u.loopConns.Add(-1)
	if l.waits[b.u] > 0 {
		l.handBack = true // room for this loop's first waiting request
	}
}

// handOffExchange finishes the exchange of c and b on a goroutine, through the
// fasthttp engine's reading and writing of answers; the client connection is then
// served by the fasthttp server.
func (l *loop) handOffExchange(c, b *lconn) {
	ex := c.ex
	pipelined := append([]byte(nil), c.in[ex.reqLen:]...)
	c.in = pipelined
	c.peer, b.peer = nil, nil
	u, tenant := b.u, b.tenant
	unsent := append([]byte(nil), b.out...)
	closeClient := ex.close || l.stopping || l.p.draining.Load()
	// The backend connection counts in loopConns until finishExchange closes it.
	l.undialed(u)
	bc, err := l.detach(b, nil)
	if err != nil {
		u.loopConns.Add(-1)
		u.give(tenant)
		_, _ = unix.Write(c.fd, handOverFailed)
		l.closeClient(c)
		return
	}
	cc, err := l.detach(c, handOverFailed)
	if err != nil {
		l.p.limits.release(c.ip)
		u.loopConns.Add(-1)
		u.give(tenant)
		_ = bc.Close()
		return
	}
	client := newIdleConn(cc, l.p.opts.ClientReadTimeout, l.p.opts.ClientWriteTimeout, func() { l.p.limits.release(c.ip) })
	client.linger = lingerTimeout
	backend := newIdleConn(bc, l.p.opts.UpstreamTimeout, l.p.opts.UpstreamTimeout, nil)
	l.p.handed.begin()
	go func() {
		defer l.p.handed.end()
		// Tracked, so that a drain that runs out of time closes them.
		defer l.p.handed.take(backend, nil)()
		defer l.p.handed.take(client, nil)()
		if l.p.finishExchange(client, backend, unsent, u, tenant, ex.route, ex.outcome, ex.head, closeClient, ex.start) {
			l.e.handoff.push(client)
		} else {
			_ = client.Close()
		}
	}()
}

// retryWaiting tries again the requests waiting for a connection to a full pool, in
// the order they came; once one of a backend's finds none, those behind it wait on
// (unless their wait is over).
func (l *loop) retryWaiting() {
	if len(l.waiting) == 0 {
		return
	}
	waiting := l.waiting
	l.waiting = nil
	var full [4]*upstream
	nfull := 0
	for _, c := range waiting {
		u := c.waitFor
		if !c.closed && l.now < c.ex.waitUntil && slices.Contains(full[:nfull], u) {
			l.waiting = append(l.waiting, c)
			continue
		}
		c.waitFor = nil
		u.loopWaiting.Add(-1)
		if l.waits[u]--; l.waits[u] == 0 {
			delete(l.waits, u)
		}
		if c.closed {
			continue
		}
		c.ex.turn = u
		l.forward(c)
		if c.waitFor == u && nfull < len(full) {
			full[nfull] = u
			nfull++
		}
	}
}

// errUpstreamTimeout: the backend did not answer within UpstreamTimeout.
var errUpstreamTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// dialAddr is the backend's address as the loop dials it; none for a backend the loop
// does not dial (TLS), or not yet: the fasthttp engine, which resolves names itself,
// sends the request meanwhile. A name is resolved on a goroutine, never on the loop,
// with the resolver fasthttp's dialer asks, and again once the answer is as old as
// fasthttp keeps its own (the address in hand serves meanwhile). A name of several
// addresses is left to the fasthttp engine, which tries each in turn.
func (u *upstream) dialAddr(now int64) netip.AddrPort {
	if u.tls != nil {
		return netip.AddrPort{}
	}
	a := u.loopAddr.Load()
	if a == nil {
		if ap, err := netip.ParseAddrPort(u.addr); err == nil {
			a = &loopAddr{ap: ap}
			u.loopAddr.Store(a)
		}
	}
	if (a == nil || a.until != 0 && now >= a.until) && u.loopResolving.CompareAndSwap(false, true) {
		go u.resolveForLoop(a)
	}
	if a == nil {
		return netip.AddrPort{}
	}
	return a.ap
}

// resolveForLoop resolves the backend's name for dialAddr. A lookup that fails for a
// moment (a timeout, a server failure) keeps the address resolved before until the
// next try; a name that no longer exists (a Service deleted: its address may be
// another's soon) is dialed by the loop no more. A name without an address in hand is
// tried again sooner than one with.
func (u *upstream) resolveForLoop(old *loopAddr) {
	defer u.loopResolving.Store(false)
	now := time.Now()
	next := &loopAddr{until: now.Add(fasthttp.DefaultDNSCacheDuration).UnixNano()}
	host, portText, err := net.SplitHostPort(u.addr)
	port, perr := strconv.ParseUint(portText, 10, 16)
	if err == nil && perr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), u.p.opts.DialTimeout)
		addrs, err := u.p.dialer.Resolver.LookupIPAddr(ctx, host)
		cancel()
		var dnsErr *net.DNSError
		switch {
		case err == nil && len(addrs) == 1 && addrs[0].Zone == "":
			if ip, ok := netip.AddrFromSlice(addrs[0].IP); ok {
				next.ap = netip.AddrPortFrom(ip, uint16(port))
			}
		case err != nil && old != nil && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound):
			next.ap = old.ap
		}
	}
	if !next.ap.IsValid() {
		next.until = now.Add(loopUnresolvedRetry).UnixNano()
	}
	u.loopAddr.Store(next)
}

// loopUnresolvedRetry: how soon a name the loop has no address for is resolved again.
const loopUnresolvedRetry = 5 * time.Second

func sockaddrOf(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr().Unmap()
	if a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
}
