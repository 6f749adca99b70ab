package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// Server serves the proxy on a listener, and on a TLS listener when HTTPS is on,
// until its context ends.
type Server struct {
	Proxy *Proxy
	// Listen address, e.g. ":8088".
	Listen string

	mu      sync.Mutex
	stopped chan struct{} // closed when Start returns; nil before it is called
}

// Start implements manager.Runnable: it serves until ctx is done, then drains. It
// runs once.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return errors.New("the proxy server was started already")
	}
	stopped := make(chan struct{})
	s.stopped = stopped
	s.mu.Unlock()
	defer close(stopped)
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return err
	}
	var tln net.Listener
	if s.Proxy.tls != nil {
		if tln, err = net.Listen("tcp", s.Proxy.tls.Listen); err != nil {
			_ = ln.Close()
			return fmt.Errorf("the HTTPS listener: %w", err)
		}
	}
	return s.Proxy.ServeUntil(ctx, ln, tln)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Wait returns once Start has returned, its drain done; at once if Start was never
// called. A manager that stops on an error (a lost lease) does not wait for its
// runnables, and the process would otherwise exit with requests in flight.
func (s *Server) Wait() {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped != nil {
		<-stopped
	}
}

// Serve serves the proxy on ln (wrapped by Listener) until ln is closed.
func (p *Proxy) Serve(ln net.Listener) error { return p.newServer().Serve(p.Listener(ln)) }

// ServeUntil serves plain HTTP on ln and, when HTTPS is on, TLS on tln until ctx
// ends, then drains both.
func (p *Proxy) ServeUntil(ctx context.Context, ln, tln net.Listener) error {
	srv := p.newServer()
	errs := make(chan error, 3)
	var engine *loopEngine
	if p.opts.Engine == EngineLoop && p.tls == nil {
		handoff := newHandoffListener(p, srv, ln.Addr())
		var err error
		if engine, err = startLoopEngine(p, srv, ln, handoff); err != nil {
			_ = ln.Close()
			return err
		}
		go func() { errs <- srv.Serve(handoff) }()
	} else {
		go func() { errs <- srv.Serve(p.Listener(ln)) }()
	}
	p.serving.Store(true) // the listeners are bound: connections wait in their backlog
	engineName := EngineFasthttp
	if engine != nil {
		engineName = EngineLoop
	}
	logInfo("the proxy listens", "address", ln.Addr().String(), "engine", engineName, "https", p.tls != nil && tln != nil)
	if p.tls != nil && tln != nil {
		p.tls.Certificates.Listening(ln.Addr(), tln.Addr())
		go p.tls.Certificates.Run(ctx)
		limited := &limitListener{Listener: tln, connLimits: p.limits, silent: true}
		secure := newTLSListener(limited, p.tls.Certificates.TLSConfig(), p.opts.ClientHeaderTimeout, p.tls.HandshakeTimeout)
		go func() { errs <- srv.Serve(secure) }()
	}
	select {
	case err := <-errs:
		// One listener failed: the process must end (and restart) rather than serve on
		// the other alone; what is in flight gets the same grace as on shutdown.
		p.drain(srv, engine, 0)
		return err
	case <-ctx.Done():
		p.drain(srv, engine, p.opts.ShutdownDelay)
		return nil
	}
}

// drain shuts the proxy down without failing a request: readiness fails and every
// answer says Connection: close, while the listeners keep accepting for delay (load
// balancers and endpoints stop sending clients meanwhile); then the listeners close,
// idle connections close, and requests, streams and tunnels in flight get
// ShutdownTimeout to finish, tunnels with a close frame to both their ends. What is
// left then is cut.
func (p *Proxy) drain(srv *fasthttp.Server, engine *loopEngine, delay time.Duration) {
	defer flushLogLines(time.Second)
	p.draining.Store(true)
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-p.stopNow:
		}
		t.Stop()
	}
	shutdown, cancel := context.WithTimeout(context.Background(), p.opts.ShutdownTimeout)
	defer cancel()
	p.handed.goAway()
	if engine == nil {
		_ = srv.ShutdownWithContext(shutdown)
		p.handed.wait(shutdown)
		return
	}
	// The loops stop accepting with the server; what they serve, and what they hand
	// over meanwhile, is waited for as the server's own.
	engine.stopAccepting()
	stopped := make(chan struct{})
	go func() { defer close(stopped); _ = srv.ShutdownWithContext(shutdown) }()
	engine.wait(shutdown)
	<-stopped
	p.handed.wait(shutdown)
}

// requestTimeout is the body of the 408 a client gets whose request (its header or
// its body) did not come in time, on either engine.
const requestTimeout = "the request did not come in time\n"

// serverName is the Server field of every answer whose backend named no server of its
// own, and of the proxy's own answers, on either engine.
const serverName = "tenantroute"

// newServer returns the fasthttp server of the proxy. Its own timeouts cover only
// what fasthttp bounds per phase (the header, the keep-alive wait); the time between
// reads and writes of bodies is bounded by the listener's connections.
func (p *Proxy) newServer() *fasthttp.Server {
	return &fasthttp.Server{
		Handler: p.serve,
		Name:    serverName,
		// Applied from a request's first byte to the end of its header (the proxy
		// lifts it once the header is in: bodies are bounded between reads).
		ReadTimeout: p.opts.ClientHeaderTimeout,
		IdleTimeout: p.opts.ClientIdleTimeout,
		// The request line and header must fit in the read buffer (431 past it).
		ReadBufferSize:     p.opts.MaxRequestHeaderBytes,
		MaxRequestBodySize: p.opts.MaxRequestBodyBytes,
		StreamRequestBody:  true,
		// Bodies pass byte for byte: a multipart body is never parsed.
		DisablePreParseMultipartForm: true,
		// Header names are normalised (x-tenant-id -> X-Tenant-Id) so that Peek and Del
		// of hop-by-hop and framing headers match any case a client used.
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		// A client that asks before sending its body learns at once that it is too
		// large (fasthttp would otherwise say 100 Continue first).
		ExpectHandler: func(ctx *fasthttp.RequestCtx) int {
			if ctx.Request.Header.ContentLength() > p.opts.MaxRequestBodyBytes {
				return fasthttp.StatusRequestEntityTooLarge
			}
			return fasthttp.StatusContinue
		},
		ErrorHandler: readFailed,
		Concurrency:  p.opts.MaxConns,
		Logger:       clientErrorFilter{},
		ConnState:    p.handed.connState,
	}
}

// readFailed answers a request fasthttp's server could not read, as its default
// handler does, but for a timeout that the connection's deadline wrapped (which the
// default takes for a malformed request, a 400): a client too slow is told so.
func readFailed(ctx *fasthttp.RequestCtx, err error) {
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		ctx.Error("Too big request header", fasthttp.StatusRequestHeaderFieldsTooLarge)
	case isTimeout(err):
		ctx.Error(requestTimeout, fasthttp.StatusRequestTimeout)
	default:
		ctx.Error("Error when parsing request", fasthttp.StatusBadRequest)
	}
}

// clientErrorFilter drops fasthttp's log line for each connection a client broke (a
// failed TLS handshake, a malformed request): on the internet those come by the
// thousand and say nothing about the proxy; the metrics count them. The others go
// through the proxy's log queue, as its own lines do.
type clientErrorFilter struct{}

func (clientErrorFilter) Printf(format string, args ...any) {
	if strings.HasPrefix(format, "error when serving connection") {
		return
	}
	logInfo("fasthttp's server", "line", fmt.Sprintf(format, args...))
}

// Listener wraps ln with the proxy's connection limits (in total and per client
// address) and with timeouts between reads and between writes of each connection.
func (p *Proxy) Listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, connLimits: p.limits}
}

// connLimits count the client connections of all the proxy's listeners.
type connLimits struct {
	opts  *Options
	total atomic.Int64
	mu    sync.Mutex
	perIP map[netip.Addr]int
}

type limitListener struct {
	net.Listener
	*connLimits
	// silent refuses by closing, without an HTTP answer (which a TLS client could not
	// read).
	silent bool
}

var (
	tooManyConns      = []byte("HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")
	tooManyConnsForIP = []byte("HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")
)

func (l *limitListener) Accept() (net.Conn, error) {
	var wait time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if pendingNetworkError(err) {
				acceptNetwork.Inc()
				continue // the connection's own failure, not the listener's (accept(2))
			}
			if !exhausted(err) {
				return nil, err
			}
			// Out of descriptors or kernel memory: fasthttp would take the error as
			// the listener's end and the proxy would stop, dropping every connection
			// it serves. Those end, and give their descriptors back; the accept is
			// tried again meanwhile (5 ms, doubling up to 1 s, as Go's net/http).
			acceptExhausted.Inc()
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			logAcceptError(err, wait)
			time.Sleep(wait)
			continue
		}
		wait = 0
		ip := remoteAddr(c)
		if reject := l.admit(ip); reject != nil {
			observeRejectedConn(string(reject[9:12]))
			if !l.silent {
				_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
				_, _ = c.Write(reject)
			}
			_ = c.Close()
			continue
		}
		ic := newIdleConn(c, l.opts.ClientReadTimeout, l.opts.ClientWriteTimeout, func() { l.release(ip) })
		ic.linger = lingerTimeout
		return ic, nil
	}
}

// exhausted reports an accept that failed for want of a resource the connections
// being served give back: descriptors (the process' or the system's), buffers, or
// the poller's watches (ENOSPC from registering the new connection).
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.ENOSPC)
}

// pendingNetworkError reports an accept that failed with the error of the
// connection it took (Linux passes such errors on from accept), or that a firewall
// rule refused (EPERM): the next one may succeed at once. Go retries ECONNABORTED
// itself.
func pendingNetworkError(err error) bool {
	for _, e := range []syscall.Errno{syscall.ENETDOWN, syscall.EPROTO, syscall.ENOPROTOOPT, syscall.EHOSTDOWN,
		syscall.EHOSTUNREACH, syscall.EOPNOTSUPP, syscall.ENETUNREACH, syscall.EPERM} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

var lastAcceptLog atomic.Int64

// logAcceptError logs a failed accept, at most once a second.
func logAcceptError(err error, retry time.Duration) {
	now := time.Now().UnixNano()
	if last := lastAcceptLog.Load(); now-last < int64(time.Second) || !lastAcceptLog.CompareAndSwap(last, now) {
		return
	}
	logInfo("accepting a client connection failed; trying again", "error", err.Error(), "retryIn", retry.String())
}

// lingerTimeout is how long a closing client connection is still read from, so that
// the client gets the answer before the socket goes (Go's server waits 500 ms).
const lingerTimeout = 500 * time.Millisecond

// admit counts a new connection, or returns the answer that refuses it.
func (l *connLimits) admit(ip netip.Addr) []byte {
	if l.total.Add(1) > int64(l.opts.MaxConns) {
		l.total.Add(-1)
		return tooManyConns
	}
	key, limited := l.opts.clientKey(ip)
	if !limited {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perIP[key] >= l.opts.MaxConnsPerIP {
		l.total.Add(-1)
		return tooManyConnsForIP
	}
	l.perIP[key]++
	return nil
}

func (l *connLimits) release(ip netip.Addr) {
	l.total.Add(-1)
	key, limited := l.opts.clientKey(ip)
	if !limited {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perIP[key]--; l.perIP[key] <= 0 {
		delete(l.perIP, key)
	}
}

func remoteAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}
