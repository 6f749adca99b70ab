//go:build linux

package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"

	"github.com/tenantroute/tenantroute-operator/routes"
)

// loopEngine serves the plain listener on event loops, one a CPU, each on its own
// thread: a readable socket is read once, a request forwarded with one write and its
// answer with another, with no goroutine woken between (the fasthttp engine pays a
// goroutine's wake-up, a failed read and a poller re-arm on each side of every
// request). A loop forwards what readClientRequest and readBackendResponse read; a connection
// whose request it does not read is handed to the fasthttp server (handoffListener)
// with the bytes read so far, and an exchange whose answer it does not read (a
// stream, a large or chunked body, an interim answer, anything malformed) is finished
// by the fasthttp engine's code on a goroutine (finishExchange).
type loopEngine struct {
	p       *Proxy
	srv     *fasthttp.Server
	handoff *handoffListener
	ln      net.Listener
	lnFile  *os.File
	lnfd    int
	loops   []*loop
	exited  sync.WaitGroup
}

// loopTick is how often a loop looks for connections past their deadlines.
const loopTick = 25 * time.Millisecond

func startLoopEngine(p *Proxy, srv *fasthttp.Server, ln net.Listener, handoff *handoffListener) (*loopEngine, error) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, fmt.Errorf("the loop engine serves a TCP listener, not a %T", ln)
	}
	f, err := tl.File()
	if err != nil {
		return nil, fmt.Errorf("the loop engine's listener: %w", err)
	}
	e := &loopEngine{p: p, srv: srv, handoff: handoff, ln: ln, lnFile: f, lnfd: -1}
	raw, err := f.SyscallConn()
	if err == nil {
		err = raw.Control(func(fd uintptr) { e.lnfd = int(fd) })
	}
	if err == nil {
		err = unix.SetNonblock(e.lnfd, true)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("the loop engine's listener: %w", err)
	}
	for range runtime.GOMAXPROCS(0) {
		l, err := newLoop(e)
		if err != nil {
			e.stopAccepting()
			e.cut()
			return nil, err
		}
		e.loops = append(e.loops, l)
	}
	for _, l := range e.loops {
		e.exited.Add(1)
		go l.run()
	}
	return e, nil
}

// stopAccepting ends the loops' accepting and closes the listener.
func (e *loopEngine) stopAccepting() {
	var wg sync.WaitGroup
	for _, l := range e.loops {
		wg.Add(1)
		l.post(func() { l.unlisten(); wg.Done() })
	}
	wg.Wait()
	_ = e.lnFile.Close()
	_ = e.ln.Close()
}

// wait lets every loop finish what is in flight, closing connections as they fall
// idle, until ctx ends; then what is left is cut.
func (e *loopEngine) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { e.exited.Wait(); close(done) }()
	for _, l := range e.loops {
		l.post(l.goAway)
	}
	select {
	case <-done:
	case <-ctx.Done():
		e.cut()
		<-done
	}
}

// cut closes every connection of every loop, and ends the loops.
func (e *loopEngine) cut() {
	for _, l := range e.loops {
		l.post(l.cutAll)
	}
}

type loop struct {
	e        *loopEngine
	p        *Proxy
	ep, wake int
	conns    map[int]*lconn
	clients  int
	load     atomic.Int32           // clients, and those accepted for it and not yet adopted
	idle     map[*upstream][]*lconn // backend connections ready for a request
	buf      []byte                 // reads land here
	out      []byte                 // answers are built here
	fields   [maxLoopFields]field
	now      int64 // Unix nanoseconds, read once a round

	mu     sync.Mutex
	posted []func()
	dead   bool // the descriptors are closed: nothing is posted any more

	listening   bool
	pausedUntil int64 // accepting resumes then (descriptors ran out)
	stopping    bool  // goAway: connections close as they fall idle
	ended       bool
	lastSweep   int64
	waiting     []*lconn // clients waiting for a connection to a full pool
}

// lconn is a client or backend connection of a loop.
type lconn struct {
	fd       int
	client   bool
	closed   bool
	events   uint32 // the epoll interest
	in, out  []byte // read and not consumed; left to write
	deadline int64  // 0: none
	scanned  int    // how much of in was searched for a header's end
	peer     *lconn

	// A client's.
	ip         netip.Addr
	busy       bool // a request is being served
	inHeader   bool // a header is being received: its deadline holds
	inBody     bool // a body is being received: ClientReadTimeout between reads
	closeAfter bool
	lingering  bool
	lingerLeft int
	ex         loopExchange

	// A backend's.
	u          *upstream
	tenant     string
	reused     bool
	connecting bool

	// A client's waiting for a connection to a full pool.
	waitFor *upstream
}

// loopExchange is the request a client connection has in flight.
type loopExchange struct {
	route        *CachedRoute
	outcome      Outcome
	head, close  bool
	start        time.Time
	req          []byte // the backend's request
	headerLen    int    // the client's request header, at the start of in
	reqLen       int    // the header and the body
	replayable   bool
	attempts     int
	tried        []*upstream
	triedBuf     [4]*upstream
	shareRefused int
	waitUntil    int64 // waiting for a connection to a full pool until then
	lastErr      error
	lastBackend  *upstream
}

func newLoop(e *loopEngine) (*loop, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("the loop engine: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(ep)
		return nil, fmt.Errorf("the loop engine: %w", err)
	}
	l := &loop{e: e, p: e.p, ep: ep, wake: wake, conns: map[int]*lconn{}, idle: map[*upstream][]*lconn{},
		buf: make([]byte, 64<<10), out: make([]byte, 0, 16<<10)}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		l.closeFDs()
		return nil, fmt.Errorf("the loop engine: %w", err)
	}
	if err := l.listen(); err != nil {
		l.closeFDs()
		return nil, fmt.Errorf("the loop engine: %w", err)
	}
	return l, nil
}

func (l *loop) closeFDs() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dead = true
	_ = unix.Close(l.wake)
	_ = unix.Close(l.ep)
}

// listen watches the listener; each loop is woken alone for a new connection.
func (l *loop) listen() error {
	err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.e.lnfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(l.e.lnfd)})
	l.listening = err == nil
	return err
}

func (l *loop) unlisten() {
	if l.listening {
		_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.e.lnfd, nil)
		l.listening = false
	}
	l.pausedUntil = 0
}

// post runs f on the loop.
func (l *loop) post(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return
	}
	l.posted = append(l.posted, f)
	one := [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
}

func (l *loop) runPosted() {
	var b [8]byte
	_, _ = unix.Read(l.wake, b[:])
	l.mu.Lock()
	posted := l.posted
	l.posted = nil
	l.mu.Unlock()
	for _, f := range posted {
		f()
	}
}

func (l *loop) run() {
	runtime.LockOSThread()
	defer l.e.exited.Done()
	events := make([]unix.EpollEvent, 128)
	for !l.ended {
		timeout := int(loopTick / time.Millisecond)
		if len(l.conns) == 0 && l.pausedUntil == 0 {
			timeout = -1
		}
		n, err := unix.EpollWait(l.ep, events, timeout)
		if err != nil && err != unix.EINTR {
			backendLog.Error(err, "the loop engine's poll failed; its connections are closed")
			l.cutAll()
			break
		}
		l.now = time.Now().UnixNano()
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			switch {
			case fd == l.wake:
				l.runPosted()
			case fd == l.e.lnfd:
				if l.listening {
					l.accept()
				}
			default:
				c := l.conns[fd]
				if c == nil || c.closed {
					continue
				}
				if ev.Events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 && (len(c.out) > 0 || c.connecting) {
					l.writable(c)
				}
				if !c.closed && ev.Events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) != 0 && c.events&unix.EPOLLIN != 0 {
					l.readable(c)
				}
			}
		}
		if l.now-l.lastSweep >= int64(loopTick) {
			l.lastSweep = l.now
			l.sweep()
		}
	}
	l.closeFDs()
}

func (l *loop) watch(c *lconn, events uint32) error {
	c.events = events
	l.conns[c.fd] = c
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: events, Fd: int32(c.fd)})
}

func (l *loop) interest(c *lconn, events uint32) {
	if c.events == events || c.closed {
		return
	}
	c.events = events
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: events, Fd: int32(c.fd)})
}

// forget takes c off the loop without closing its descriptor.
func (l *loop) forget(c *lconn) {
	c.closed = true
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
	delete(l.conns, c.fd)
	if c.client {
		l.clients--
		l.load.Add(-1)
		l.checkDone()
	}
}

func (l *loop) accept() {
	for range 64 {
		fd, sa, err := unix.Accept4(l.e.lnfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			switch {
			case err == unix.EAGAIN || err == unix.EINTR || err == unix.ECONNABORTED:
			case pendingNetworkError(err):
				acceptNetwork.Inc()
				continue
			case exhausted(err):
				// Out of descriptors: as limitListener, the accept is tried again
				// after a pause, while the connections served give theirs back.
				acceptExhausted.Inc()
				logAcceptError(err, 100*time.Millisecond)
				l.unlisten()
				l.pausedUntil = l.now + int64(100*time.Millisecond)
			default:
				backendLog.Error(err, "the loop engine's accept failed")
			}
			return
		}
		var ip netip.Addr
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			ip = netip.AddrFrom4(a.Addr)
		case *unix.SockaddrInet6:
			ip = netip.AddrFrom16(a.Addr).Unmap()
		}
		if reject := l.p.limits.admit(ip); reject != nil {
			observeRejectedConn(string(reject[9:12]))
			_, _ = unix.Write(fd, reject)
			_ = unix.Close(fd)
			continue
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		// The loop that serves fewest connections takes it: whichever loop the
		// kernel wakes accepts, and a burst of connects would otherwise all land on
		// one thread while the others idle.
		target := l
		for _, o := range l.e.loops {
			if o.load.Load() < target.load.Load() {
				target = o
			}
		}
		target.load.Add(1)
		if target == l {
			l.adopt(fd, ip)
		} else {
			target.post(func() { target.adopt(fd, ip) })
		}
	}
}

// adopt serves a connection accepted for this loop.
func (l *loop) adopt(fd int, ip netip.Addr) {
	// A new connection's first request has ClientHeaderTimeout from the accept.
	c := &lconn{fd: fd, client: true, ip: ip, inHeader: true, deadline: time.Now().UnixNano() + int64(l.p.opts.ClientHeaderTimeout)}
	if l.ended {
		_ = unix.Close(fd)
		l.p.limits.release(ip)
		l.load.Add(-1)
		return
	}
	if err := l.watch(c, unix.EPOLLIN); err != nil {
		delete(l.conns, fd)
		_ = unix.Close(fd)
		l.p.limits.release(ip)
		l.load.Add(-1)
		return
	}
	l.clients++
}

func (l *loop) readable(c *lconn) {
	n, err := unix.Read(c.fd, l.buf)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if c.client {
		l.readClient(c, n, err)
	} else {
		l.readBackend(c, n, err)
	}
}

func (l *loop) readClient(c *lconn, n int, err error) {
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
	if c.inBody {
		c.deadline = l.now + int64(l.p.opts.ClientReadTimeout)
	}
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
	end, next, plain := headerEnd(c.in, c.scanned)
	c.scanned = next
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
		// The body is not all in: bounded between reads from now on, not by the
		// header's deadline.
		c.inHeader = false
		c.inBody = true
		c.deadline = l.now + int64(l.p.opts.ClientReadTimeout)
		return
	}
	var hostBuf [256]byte
	host, err := routes.NormalizeHost(r.host, hostBuf[:0])
	if err != nil {
		l.handOff(c) // fasthttp answers 400
		return
	}
	c.busy, c.inHeader, c.inBody, c.deadline, c.scanned = true, false, false, 0, 0
	ex := &c.ex
	*ex = loopExchange{req: ex.req[:0], headerLen: end, reqLen: end + r.length, head: r.head, close: r.close,
		replayable: r.replayable, start: time.Unix(0, l.now)}
	// The tenant, the last field, is added once the route is known.
	ex.req = appendBackendRequest(ex.req, &r, c.ip, l.p.opts.trusted(c.ip))
	route, outcome, ok := l.p.chain.cached(host, l.now)
	if !ok {
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
	observeLookup(outcome)
	switch outcome {
	case OutcomeNotFound:
		l.answer(c, fasthttp.StatusNotFound, outcome, "no tenant is served at this host\n", false)
		return
	case OutcomeError:
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

// forward sends the request to the next backend of the route, as serve does: each
// backend once, and one more try for a request a reused connection lost.
func (l *loop) forward(c *lconn) {
	ex := &c.ex
	route := ex.route
	for ex.attempts > 0 {
		ex.attempts--
		u := l.p.pick(route, ex.tried)
		if u == nil {
			break
		}
		if !u.take(route.Tenant) {
			ex.shareRefused++
			ex.tried = append(ex.tried, u)
			continue
		}
		b, err := l.backend(u)
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
					c.waitFor = u
					l.waiting = append(l.waiting, c)
					return
				}
				logBackendError(u.addr, fasthttp.ErrNoFreeConns)
				ex.tried = append(ex.tried, u)
				continue
			}
			if err == errNotLoopable {
				// A backend the loop does not dial (TLS, a name to resolve) or whose
				// connections are all taken: the fasthttp engine sends this request
				// (again, if a connection lost it: it is a GET or a HEAD).
				l.handOff(c)
				return
			}
			u.coolDown()
			ex.tried = append(ex.tried, u)
			continue
		}
		b.peer, c.peer, b.tenant = c, b, route.Tenant
		if b.connecting {
			b.deadline = l.now + int64(l.p.opts.DialTimeout)
			return
		}
		l.send(b)
		return
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

var (
	errNotLoopable = errors.New("the loop engine does not dial this backend")
	errPoolFull    = errors.New("every connection the proxy may open to the backend is busy")
)

// backend returns an idle connection to u, or one being opened.
func (l *loop) backend(u *upstream) (*lconn, error) {
	if idle := l.idle[u]; len(idle) > 0 {
		b := idle[len(idle)-1]
		l.idle[u] = idle[:len(idle)-1]
		b.deadline = 0
		return b, nil
	}
	sa := u.sockaddr()
	if sa == nil {
		return nil, errNotLoopable
	}
	if u.loopConns.Load()+int64(u.pool.ConnsCount()) >= int64(l.p.opts.MaxConnsPerBackend) {
		return nil, errPoolFull
	}
	family := unix.AF_INET
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", err)}
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	err = unix.Connect(fd, sa)
	if err != nil && err != unix.EINPROGRESS {
		_ = unix.Close(fd)
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
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	u.loopConns.Add(1)
	return b, nil
}

// send writes the request to its backend.
func (l *loop) send(b *lconn) {
	b.deadline = l.now + int64(l.p.opts.UpstreamTimeout)
	if err := l.write(b, b.peer.ex.req); err != nil {
		l.backendFailed(b, err)
	}
}

// write writes data to c, keeping what the socket does not take for when it is
// writable.
func (l *loop) write(c *lconn, data []byte) error {
	if len(c.out) > 0 {
		c.out = append(c.out, data...)
		return nil
	}
	n, err := unix.Write(c.fd, data)
	if err == unix.EAGAIN || err == unix.EINTR {
		n, err = 0, nil
	}
	if err != nil {
		return err
	}
	if n < len(data) {
		c.out = append(c.out[:0], data[n:]...)
		l.interest(c, c.events|unix.EPOLLOUT)
	}
	return nil
}

func (l *loop) writable(c *lconn) {
	if c.connecting {
		c.connecting = false
		errno, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && errno != 0 {
			err = syscall.Errno(errno)
		}
		if err != nil {
			l.backendFailed(c, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)})
			return
		}
		l.interest(c, unix.EPOLLIN)
		l.send(c)
		return
	}
	n, err := unix.Write(c.fd, c.out)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if err != nil {
		if c.client {
			l.closeClient(c)
		} else {
			l.backendFailed(c, err)
		}
		return
	}
	c.out = c.out[:copy(c.out, c.out[n:])]
	if c.client {
		c.deadline = l.now + int64(l.p.opts.ClientWriteTimeout)
	}
	if len(c.out) > 0 {
		return
	}
	l.interest(c, c.events&^unix.EPOLLOUT)
	if c.client {
		l.written(c)
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
		l.backendFailed(b, err)
		return
	}
	b.in = append(b.in, l.buf[:n]...)
	b.deadline = l.now + int64(l.p.opts.UpstreamTimeout)
	l.answerFrom(b)
}

var errBackendClosed = errors.New("the backend closed the connection")

// answerFrom forwards the backend's answer once it is whole.
func (l *loop) answerFrom(b *lconn) {
	c := b.peer
	ex := &c.ex
	end, next, plain := headerEnd(b.in, b.scanned)
	b.scanned = next
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
	size := r.length
	if ok && bodyless(r.status, ex.head) {
		size = 0
	}
	if !ok || size < 0 || size > smallBody || end > l.p.opts.MaxResponseHeaderBytes {
		l.handOffExchange(c, b)
		return
	}
	if len(b.in) < end+int(size) {
		return
	}
	ex.route.observeUpstream(time.Duration(l.now - ex.start.UnixNano()))
	b.u.downUntil.Store(0)
	closeClient := ex.close || l.stopping || l.p.draining.Load()
	out := appendClientResponse(l.out[:0], &r, closeClient)
	out = append(out, b.in[end:end+int(size)]...)
	l.out = out[:0]
	observeRequest(r.status, ex.outcome)
	l.releaseBackend(b, r.keep && len(b.in) == end+int(size))
	l.respond(c, out, closeClient)
}

// answer is refuse's: the proxy's own answer to the request in flight.
func (l *loop) answer(c *lconn, status int, outcome Outcome, body string, retry bool) {
	closeClient := c.ex.close || l.stopping || l.p.draining.Load()
	out := fmt.Appendf(l.out[:0], "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n",
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
	observeRequest(status, outcome)
	l.respond(c, out, closeClient)
}

// respond writes the answer to the request in flight and ends it.
func (l *loop) respond(c *lconn, out []byte, closeAfter bool) {
	c.peer = nil
	c.busy = false
	c.in = c.in[:copy(c.in, c.in[c.ex.reqLen:])]
	c.ex.route, c.ex.lastErr, c.ex.lastBackend = nil, nil, nil
	c.closeAfter = closeAfter
	if c.events&unix.EPOLLIN == 0 {
		l.interest(c, c.events|unix.EPOLLIN)
	}
	if err := l.write(c, out); err != nil {
		l.closeClient(c)
		return
	}
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

// backendFailed ends an exchange whose backend connection failed before its answer
// was whole, as serve does: another backend after a failed dial, the same request
// again after a reused connection lost it, a 502 or 504 otherwise.
func (l *loop) backendFailed(b *lconn, err error) {
	c := b.peer
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
	case nothing && reused && ex.replayable:
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
	if !keep || l.stopping || len(b.out) > 0 {
		l.closeBackendOnly(b)
		return
	}
	if b.u.loopWaiting.Load() > 0 {
		// A request waits for a connection to this backend, maybe on another loop:
		// this one is given up rather than kept idle.
		l.closeBackendOnly(b)
		l.retryWaiting()
		return
	}
	b.in, b.scanned, b.reused = b.in[:0], 0, true
	b.deadline = l.now + int64(l.p.opts.UpstreamIdleConnTimeout)
	l.idle[b.u] = append(l.idle[b.u], b)
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
	b.u.loopConns.Add(-1)
}

// closeClient closes c and whatever exchange it had in flight.
func (l *loop) closeClient(c *lconn) {
	if c.closed {
		return
	}
	if b := c.peer; b != nil {
		l.closeBackend(b)
	}
	l.forget(c)
	_ = unix.Close(c.fd)
	l.p.limits.release(c.ip)
}

// handOff gives c to the fasthttp server, with what was read of it. Nothing of its
// request was forwarded yet, or a GET or HEAD that a reused connection lost.
func (l *loop) handOff(c *lconn) {
	nc, err := l.detach(c)
	if err != nil {
		l.p.limits.release(c.ip)
		return
	}
	ic := newIdleConn(nc, l.p.opts.ClientReadTimeout, l.p.opts.ClientWriteTimeout, func() { l.p.limits.release(c.ip) })
	ic.linger = lingerTimeout
	l.e.handoff.push(ic)
}

// detach takes c off the loop as a net.Conn that first reads what c.in holds.
func (l *loop) detach(c *lconn) (net.Conn, error) {
	l.forget(c)
	f := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(f) // a descriptor of its own, in Go's poller
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

// handOffExchange finishes the exchange of c and b on a goroutine, through the
// fasthttp engine's reading and writing of answers; the client connection is then
// served by the fasthttp server.
func (l *loop) handOffExchange(c, b *lconn) {
	ex := c.ex
	pipelined := append([]byte(nil), c.in[ex.reqLen:]...)
	c.in = pipelined
	c.peer, b.peer = nil, nil
	u, tenant := b.u, b.tenant
	closeClient := ex.close || l.stopping || l.p.draining.Load()
	bc, err := l.detach(b)
	u.loopConns.Add(-1)
	if err != nil {
		u.give(tenant)
		l.closeClient(c)
		return
	}
	cc, err := l.detach(c)
	if err != nil {
		l.p.limits.release(c.ip)
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
		if l.p.finishExchange(client, backend, u, tenant, ex.route, ex.outcome, ex.head, closeClient, ex.start) {
			l.e.handoff.push(client)
		} else {
			_ = client.Close()
		}
	}()
}

// retryWaiting tries again the requests waiting for a connection to a full pool.
func (l *loop) retryWaiting() {
	if len(l.waiting) == 0 {
		return
	}
	waiting := l.waiting
	l.waiting = nil
	for _, c := range waiting {
		u := c.waitFor
		c.waitFor = nil
		u.loopWaiting.Add(-1)
		if !c.closed {
			l.forward(c)
		}
	}
}

// answerTimeout and bodyTimeout are the 408s a client gets whose header, or body, did
// not come in time.
var (
	answerTimeout = []byte("HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
	bodyTimeout   = []byte("HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n" +
		"Content-Length: 39\r\n\r\nthe request body did not come in time\n")
)

// sweep ends what is past its deadline.
func (l *loop) sweep() {
	if l.pausedUntil != 0 && l.now >= l.pausedUntil && !l.stopping {
		l.pausedUntil = 0
		_ = l.listen()
	}
	l.retryWaiting()
	for _, c := range l.conns {
		if !c.client && c.peer == nil && !c.closed && c.u.loopWaiting.Load() > 0 {
			l.closeBackend(c) // idle, while a request waits for a connection to its backend
			continue
		}
		if c.closed || c.deadline == 0 || l.now < c.deadline {
			continue
		}
		switch {
		case !c.client && c.peer == nil:
			l.closeBackend(c) // idle too long
		case !c.client && c.connecting:
			l.backendFailed(c, &net.OpError{Op: "dial", Net: "tcp", Err: fasthttp.ErrDialTimeout})
		case !c.client:
			l.backendFailed(c, errUpstreamTimeout)
		case c.lingering || len(c.out) > 0:
			l.closeClient(c)
		case c.inBody:
			_, _ = unix.Write(c.fd, bodyTimeout)
			l.closeClient(c)
		case len(c.in) > 0 && !c.busy:
			_, _ = unix.Write(c.fd, answerTimeout)
			l.closeClient(c)
		default:
			l.closeClient(c)
		}
	}
}

// errUpstreamTimeout: the backend did not answer within UpstreamTimeout.
var errUpstreamTimeout = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

// goAway closes the connections that are idle and lets the others close as their
// answer is out.
func (l *loop) goAway() {
	l.stopping = true
	l.unlisten()
	for _, c := range l.conns {
		switch {
		case c.closed:
		case !c.client && c.peer == nil:
			l.closeBackend(c)
		case c.client && !c.busy && len(c.out) == 0 && !c.lingering:
			l.closeClient(c)
		}
	}
	l.checkDone()
}

func (l *loop) checkDone() {
	if l.stopping && l.clients == 0 && !l.ended {
		for _, c := range l.conns {
			l.closeBackend(c)
		}
		l.ended = true
	}
}

func (l *loop) cutAll() {
	l.stopping = true
	l.unlisten()
	for _, c := range l.conns {
		if c.client {
			l.closeClient(c)
		} else {
			l.closeBackend(c)
		}
	}
	l.ended = true
}

// sockaddr is the backend's address as the loop dials it: nil for a backend it does
// not (TLS, a name to resolve).
func (u *upstream) sockaddr() unix.Sockaddr {
	u.loopOnce.Do(func() {
		if u.tls != nil {
			return
		}
		ap, err := netip.ParseAddrPort(u.addr)
		if err != nil {
			return
		}
		if a := ap.Addr().Unmap(); a.Is4() {
			u.loopAddr = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
		} else {
			u.loopAddr = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
		}
	})
	sa, _ := u.loopAddr.(unix.Sockaddr)
	return sa
}
