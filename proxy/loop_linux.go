//go:build linux

package proxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/sys/unix"
)

// DefaultEngine is the engine cmd/ serves the plain listener with unless told
// otherwise: the loop engine, where it runs.
const DefaultEngine = EngineLoop

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

// loopCount is the number of loops an engine runs: one for each P the runtime has,
// not counting the spare P it gives the runtime where nothing bounds GOMAXPROCS.
// A loop waiting in epoll_wait holds its P in a system call. When every P is so held,
// sysmon takes one back once it has been there a tick and starts a thread to look for
// other work, which finds none (runtime.retake spares a P in a system call only while
// another P is idle or a thread spins), and its ticks shorten to 20 us while it keeps
// taking Ps back. With one P more than loops that idle P exists: under load it cut the
// futex calls by six and the CPU per request by 3-19% (docs/benchmarks.md).
// A GOMAXPROCS set by hand, or under a CPU limit, is left as it is: there the spare P
// would let one thread more than the limit's cores run Go code, and the quota throttle
// the whole process.
func loopCount() int {
	loopProcs.Lock()
	defer loopProcs.Unlock()
	procs := runtime.GOMAXPROCS(0)
	if procs == loopProcs.set {
		return procs - 1 // an earlier engine gave the spare P
	}
	loopProcs.set = 0
	if !spareP(procs, runtime.NumCPU(), os.Getenv("GOMAXPROCS") != "") || cpuLimited(os.ReadFile) {
		return procs
	}
	runtime.GOMAXPROCS(procs + 1)
	loopProcs.set = procs + 1
	logInfo("the loop engine gives the Go runtime a spare P", "loops", procs, "gomaxprocs", procs+1)
	return procs
}

// loopProcs is the GOMAXPROCS loopCount last set, 0 if none: a later engine in the
// process (or a test's) runs as many loops and adds no P, unless GOMAXPROCS changed.
var loopProcs struct {
	sync.Mutex
	set int
}

// spareP says whether loops, one a P, get a P more: not when GOMAXPROCS was set by
// hand (explicit), nor when it is below the CPUs the process may run on, which is the
// runtime's default under a CPU limit.
func spareP(procs, cpus int, explicit bool) bool { return !explicit && procs >= cpus }

// cgroupCPUFiles hold the container's CPU quota: cgroup v2 ("max" or "quota period"),
// then v1 (-1 for none).
var cgroupCPUFiles = []string{"/sys/fs/cgroup/cpu.max", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"}

// cpuLimited says whether the process's cgroup has a CPU quota. The runtime's default
// GOMAXPROCS is at least 2, so on a 2-CPU node a limit of 1 leaves it equal to the CPUs,
// where spareP cannot see the limit.
func cpuLimited(read func(string) ([]byte, error)) bool {
	for _, path := range cgroupCPUFiles {
		b, err := read(path)
		if err != nil {
			continue
		}
		quota, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		return quota != "max" && quota != "-1" && quota != ""
	}
	return false
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
	for range loopCount() {
		l, err := newLoop(e)
		if err != nil {
			// None runs yet: their descriptors are closed here.
			for _, l := range e.loops {
				l.closeFDs()
			}
			_ = f.Close()
			_ = ln.Close()
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
		if !l.post(func() { l.unlisten(); wg.Done() }) {
			wg.Done() // the loop ended (its poll failed): it listens no more
		}
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
	gen      int32

	mu     sync.Mutex
	posted []func()
	dead   bool // the descriptors are closed: nothing is posted any more

	listening   bool
	pausedUntil int64 // accepting resumes then (descriptors ran out)
	stopping    bool  // goAway: connections close as they fall idle
	ended       bool
	lastSweep   int64
	fullRound   bool              // the round's poll filled its events: it may not have reported all
	waiting     []*lconn          // clients waiting for a connection to a full pool
	waits       map[*upstream]int // requests waiting, by backend
	dialed      map[*upstream]int // connections, by backend
	tally       tally
	handBack    bool // a connection was given back to a backend that requests wait for
}

// lconn is a client or backend connection of a loop.
type lconn struct {
	fd       int
	client   bool
	closed   bool
	events   uint32 // the epoll interest
	gen      int32  // tells its events from those of an earlier owner of fd
	in, out  []byte // read and not consumed; left to write
	deadline int64  // 0: none
	scanned  int    // how much of in was searched for a header's end
	peer     *lconn

	// A client's.
	ip         netip.Addr
	accepted   int64 // Unix nanoseconds
	served     bool  // it had a request answered
	busy       bool  // a request is being served
	inHeader   bool  // a header is being received: its deadline holds
	inBody     bool  // the rest of a body is being received, under the header's deadline
	headerEnd  int   // the end of the header whose body is being received (either side)
	bodyEnd    int   // and the end of that body
	streaming  bool  // the answer's header is out, its body passing as it comes
	eof        bool  // the client closed its side: nothing more is read
	closeAfter bool
	lingering  bool
	lingerLeft int
	ex         loopExchange

	// A backend's.
	u          *upstream
	tenant     string
	reused     bool
	idleSince  int64 // Unix nanoseconds
	connecting bool
	failed     bool // it failed while its reads were held: read to its end, not kept

	// A client's waiting for a connection to a full pool.
	waitFor *upstream
}

// loopExchange is the request a client connection has in flight.
type loopExchange struct {
	route       *CachedRoute
	outcome     Outcome
	head, close bool
	start       time.Time
	req         []byte // the backend's request
	headerLen   int    // the client's request header, at the start of in
	reqLen      int    // the header and the body
	replayable  bool
	observed    bool // its lookup is counted
	// The answer streaming: how its body is framed, what is left of it.
	mode         uint8
	left         int64
	chunks       chunks
	keepBackend  bool
	attempts     int
	tried        []*upstream
	triedBuf     [4]*upstream
	shareRefused int
	waitUntil    int64     // waiting for a connection to a full pool until then
	turn         *upstream // the backend a waiting request is tried again on, ahead of those behind it
	lastErr      error
	lastBackend  *upstream
}

// header finds the end of the header at the start of c.in (-1: not in yet), scanning
// on from where the last call stopped; plain as headerEnd's. A header whose body is
// still coming was found before: the body's bytes are no header's end to look for
// (one without a line feed would never end it).
func (c *lconn) header() (end int, plain bool) {
	if c.headerEnd > 0 {
		return c.headerEnd, true
	}
	end, c.scanned, plain = headerEnd(c.in, c.scanned)
	return end, plain
}

// awaitBody starts receiving the body of the header that ends at end, which ends at
// bodyEnd.
func (c *lconn) awaitBody(end, bodyEnd int) { c.headerEnd, c.bodyEnd = end, bodyEnd }

// bodyPending reports a body whose header was read and which is not all in: its
// header is not read again for each of its segments (a body sent a byte at a time
// would have the loop read its header as many times).
func (c *lconn) bodyPending() bool { return c.headerEnd > 0 && len(c.in) < c.bodyEnd }

// emptied is b emptied for the next use; a buffer grown past keptBuffer (a large
// header, a pipelined burst, a stalled client's answer) is let go instead, so that a
// connection holds memory for its largest moment only while it lasts.
func emptied(b []byte) []byte {
	if cap(b) > keptBuffer {
		return nil
	}
	return b[:0]
}

const keptBuffer = 16 << 10

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
	l := &loop{e: e, p: e.p, ep: ep, wake: wake, conns: map[int]*lconn{}, idle: map[*upstream][]*lconn{}, waits: map[*upstream]int{}, dialed: map[*upstream]int{},
		tally: tally{answers: map[answerKey]uint64{}},
		buf:   make([]byte, 64<<10), out: make([]byte, 0, 16<<10)}
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

// post runs f on the loop; false if the loop has ended.
func (l *loop) post(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return false
	}
	l.posted = append(l.posted, f)
	one := [8]byte{1}
	_, _ = unix.Write(l.wake, one[:])
	return true
}

func (l *loop) runPosted() {
	var b [8]byte
	_, _ = unix.Read(l.wake, b[:])
	l.runQueued()
}

// runQueued runs what was posted.
func (l *loop) runQueued() {
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
			l.tally.flush() // no sweep comes before the next event
		}
		n, err := unix.EpollWait(l.ep, events, timeout)
		if err != nil && err != unix.EINTR {
			logError(err, "the loop engine's poll failed; its connections are closed")
			l.cutAll()
			break
		}
		l.now = time.Now().UnixNano()
		l.fullRound = n == len(events)
		// An idle backend connection with something to read (bytes no request asked
		// for, or its close) goes before this round's requests can take it: its bytes
		// would be read as their answer. (The fasthttp engine peeks at each connection
		// it reuses; here the poll already said which.)
		for _, ev := range events[:max(n, 0)] {
			if c := l.conns[int(ev.Fd)]; c != nil && !c.client && c.peer == nil && !c.closed && c.gen == ev.Pad &&
				ev.Events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) != 0 {
				l.closeBackend(c)
			}
		}
		for _, ev := range events[:max(n, 0)] {
			fd := int(ev.Fd)
			switch {
			case fd == l.wake:
				l.runPosted()
			case l.listening && fd == l.e.lnfd:
				// (Once no loop listens, the descriptor may be closed and its number a
				// new connection's.)
				l.accept()
			default:
				// An event of a connection closed earlier in this round is not its
				// descriptor's next owner's.
				c := l.conns[fd]
				if c == nil || c.closed || c.gen != ev.Pad {
					continue
				}
				failed := ev.Events&(unix.EPOLLERR|unix.EPOLLHUP) != 0
				if (ev.Events&unix.EPOLLOUT != 0 || failed) && (len(c.out) > 0 || c.connecting) {
					l.writable(c)
				}
				switch {
				case c.closed:
				case failed && c.events&unix.EPOLLIN == 0 && l.failHeld(c):
				// A connection whose reads are held back is read when it fails (hung
				// up without an error), or its failure would be reported again at
				// every round.
				case ev.Events&unix.EPOLLIN != 0 && c.events&unix.EPOLLIN != 0 || failed:
					l.readable(c)
				}
			}
		}
		if l.handBack {
			l.handBack = false
			l.retryWaiting()
		}
		if l.now-l.lastSweep >= int64(loopTick) {
			l.lastSweep = l.now
			l.sweep()
		}
	}
	l.closeFDs()
	// What was posted after the last round: connections to adopt are closed (adopt
	// sees the loop ended), the rest finds its connections closed.
	l.runQueued()
	l.tally.flush()
}

func (l *loop) watch(c *lconn, events uint32) error {
	l.gen++
	c.events, c.gen = events, l.gen
	l.conns[c.fd] = c
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: events, Fd: int32(c.fd), Pad: c.gen})
}

func (l *loop) interest(c *lconn, events uint32) {
	if c.events == events || c.closed {
		return
	}
	c.events = events
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: events, Fd: int32(c.fd), Pad: c.gen})
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
				logError(err, "the loop engine's accept failed")
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
			if !target.post(func() { target.adopt(fd, ip) }) {
				target.load.Add(-1)
				l.load.Add(1)
				l.adopt(fd, ip) // that loop has ended
			}
		}
	}
}

// adopt serves a connection accepted for this loop.
func (l *loop) adopt(fd int, ip netip.Addr) {
	// A new connection's first request has ClientHeaderTimeout from the accept.
	now := time.Now().UnixNano()
	c := &lconn{fd: fd, client: true, ip: ip, inHeader: true, accepted: now, deadline: now + int64(l.p.opts.ClientHeaderTimeout)}
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
	buf := l.buf
	if c.client && (c.busy || len(c.out) > 0) && !c.lingering {
		// Pipelined behind an answer in flight: a header's worth is held at most,
		// not a whole read more (readClient then stops reading).
		if room := l.p.opts.MaxRequestHeaderBytes + 1 - len(c.in); room < len(buf) {
			buf = buf[:max(room, 1)]
		}
	}
	n, err := unix.Read(c.fd, buf)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if c.client {
		l.readClient(c, n, err)
	} else {
		l.readBackend(c, n, err)
	}
}

// failHeld handles the failure (a reset, a hang-up) of a connection whose reads are
// held back; it reports whether it did. A client that reset while its answer was out
// (it pipelined, or half-closed) is closed: nothing sent can reach it, and its reads,
// held to a header's worth, would take what it had sent a byte a round (the failure is
// reported at every round), keeping each. A stream's backend's failure waits for its
// client to take what was written (its reads are edge-triggered meanwhile, and report
// it once): what it sent before its reset may end its body. A client that hung up
// without an error is read as before.
func (l *loop) failHeld(c *lconn) bool {
	if !c.client {
		c.failed = true
		return true
	}
	errno, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil || errno == 0 {
		return false
	}
	l.readClient(c, -1, syscall.Errno(errno))
	return true
}

// sweep ends what is past its deadline.
func (l *loop) sweep() {
	l.tally.flush()
	if l.pausedUntil != 0 && l.now >= l.pausedUntil && !l.stopping {
		l.pausedUntil = 0
		_ = l.listen()
	}
	l.retryWaiting()
	gaveUp := false
	for _, c := range l.conns {
		if !c.client && c.peer == nil && !c.closed && c.u.loopWaiting.Load() > 0 && l.waits[c.u] == 0 {
			// Idle, while a request of another loop or of the fasthttp engine waits
			// for a connection to its backend.
			l.closeBackend(c)
			gaveUp = true
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
		case c.inBody, !c.busy && (len(c.in) > 0 || !c.served):
			// A request begun, or a new connection's first not begun: fasthttp's
			// server answers both.
			l.timedOut(c)
		default:
			l.closeClient(c)
		}
	}
	if gaveUp {
		l.nudge()
	}
}

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
		case c.client && !c.busy && len(c.out) == 0 && !c.lingering && len(c.in) == 0 &&
			(c.served || l.now-c.accepted >= int64(freshConn)) && quiet(c.fd):
			// Idle. One whose request is coming in is answered (with Connection:
			// close), or cut by its header or body deadline; so is one accepted
			// moments ago, whose first request may not be read yet, and one whose
			// next request reached the socket since the poll: closed, their unread
			// bytes would reset them.
			l.closeClient(c)
		}
	}
	l.checkDone()
}

// freshConn: a connection accepted this recently is not idle for the drain (as
// fasthttp's server counts a new connection idle only after 5 s).
const freshConn = 5 * time.Second

func (l *loop) checkDone() {
	if l.stopping && l.clients == 0 && !l.ended {
		for _, c := range l.conns {
			l.closeBackend(c)
		}
		l.end()
	}
}

// end marks the loop ended; requests waiting for a backend's connection wait no
// more, and what is posted from now on is run as the loop exits.
func (l *loop) end() {
	for _, c := range l.waiting {
		c.waitFor.loopWaiting.Add(-1)
		c.waitFor = nil
	}
	l.waiting = nil
	clear(l.waits)
	l.ended = true
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
	l.end()
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
	if c.out = c.out[:copy(c.out, c.out[n:])]; len(c.out) == 0 {
		c.out = emptied(c.out)
	}
	if c.client {
		c.deadline = l.now + int64(l.p.opts.ClientWriteTimeout)
	}
	if len(c.out) > 0 {
		return
	}
	l.interest(c, c.events&^unix.EPOLLOUT)
	switch {
	case c.client && c.streaming:
		l.resume(c)
	case c.client && !c.busy:
		l.written(c)
	}
}
