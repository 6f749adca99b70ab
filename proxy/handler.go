package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/valyala/fasthttp"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenantroute/tenantroute-operator/proxy/certs"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// Proxy forwards each request to a backend of its tenant's region.
type Proxy struct {
	chain *Chain
	opts  Options
	tls   *TLSOptions // nil: plain HTTP only
	// limits count client connections across the listeners.
	limits *connLimits
	// serving: its listeners are bound (ServeUntil). draining: the proxy is shutting
	// down (see drain.go); handed: the connections handed over by fasthttp (tunnels,
	// HTTP/1.0 streams), which it does not wait for.
	serving  atomic.Bool
	draining atomic.Bool
	handed   handedOver
	// stopNow is closed by StopNow: a drain's delay ends there.
	stopNow     chan struct{}
	stopNowOnce sync.Once

	mu         sync.Mutex
	upstreams  map[string]*upstream // by backend URL
	retryAfter string
	bigReaders sync.Pool // response-header readers of MaxResponseHeaderBytes
	buffers    *bufferBudget
	// dialer dials backends for the fasthttp engine; the loop engine resolves names
	// with its resolver too (each engine keeps its answers a minute).
	dialer *fasthttp.TCPDialer
}

// New returns a proxy that looks routes up through chain.
func New(chain *Chain, opts Options) *Proxy {
	opts.defaults()
	p := &Proxy{chain: chain, opts: opts, upstreams: map[string]*upstream{}, stopNow: make(chan struct{}),
		retryAfter: strconv.Itoa(int(opts.RetryAfter.Seconds()))}
	p.limits = &connLimits{opts: &p.opts, perIP: map[netip.Addr]int{}}
	p.buffers = newBufferBudget(opts.RequestBufferMemoryBytes, opts.RequestBufferBytes)
	p.bigReaders.New = func() any { return bufio.NewReaderSize(nil, opts.MaxResponseHeaderBytes) }
	p.dialer = &fasthttp.TCPDialer{Concurrency: 1000, Resolver: net.DefaultResolver} // fasthttp's default, with its resolver named
	return p
}

// smallBody is the largest response body read whole before it is forwarded.
const smallBody = 64 << 10

var hostBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// serve is the proxy's request handler. It is only served by newServer's server,
// whose ConnState hook releases what a hand-over that never came holds (hijack).
func (p *Proxy) serve(ctx *fasthttp.RequestCtx) {
	bufp := hostBufs.Get().(*[]byte)
	defer hostBufs.Put(bufp)
	req := &ctx.Request
	// Taken at once: a request answered before its lookup leaves no mark for the next.
	ic, handed := ctx.Conn().(*idleConn)
	counted := handed && ic.lookupCounted.Load() && ic.lookupCounted.Swap(false)
	if p.draining.Load() {
		// Shutting down: this client's next request goes to another replica. Said once
		// the answer is made: a backend's answer, and an error answer after a failed
		// exchange (Response.Reset), replace the header set before.
		defer ctx.SetConnectionClose()
	}
	// The header is in: a body is bounded between reads from now on, not by the
	// header's deadline.
	if hasBody(&req.Header) {
		_ = ctx.SetReadDeadline(time.Time{})
	}
	// Only HTTP/1.1 and 1.0 are spoken; anything else is refused rather than guessed.
	if !req.Header.IsHTTP11() && string(req.Header.Protocol()) != "HTTP/1.0" {
		p.refuse(ctx, fasthttp.StatusHTTPVersionNotSupported, OutcomeError, "HTTP/1.1 or HTTP/1.0 only\n")
		ctx.SetConnectionClose()
		return
	}
	if !validTarget(req.Header.RequestURI(), req.Header.IsOptions()) {
		p.refuse(ctx, fasthttp.StatusBadRequest, OutcomeError, "invalid request target\n")
		ctx.SetConnectionClose()
		return
	}
	// fasthttp streams a declared body whatever its length: the limit is kept here
	// (and for chunked bodies as they are read, below).
	if req.Header.ContentLength() > p.opts.MaxRequestBodyBytes {
		p.refuse(ctx, fasthttp.StatusRequestEntityTooLarge, OutcomeError, "the request body is larger than the limit\n")
		return
	}
	host, err := routes.NormalizeHost(ctx.Host(), *bufp)
	if err != nil {
		p.refuse(ctx, fasthttp.StatusBadRequest, OutcomeError, "invalid host\n")
		return
	}
	route, outcome := p.chain.LookupAt(ctx, host, ctx.Time().UnixNano())
	if !counted {
		observeLookup(outcome)
	}
	switch outcome {
	case OutcomeNotFound:
		p.refuse(ctx, fasthttp.StatusNotFound, outcome, "no tenant is served at this host\n")
		return
	case OutcomeError:
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, p.retryAfter)
		p.refuse(ctx, fasthttp.StatusServiceUnavailable, outcome, "the route of this host cannot be looked up right now\n")
		return
	}
	if p.tls != nil && !ctx.IsTLS() && p.plainForTLS(ctx, host, outcome) {
		return
	}
	if isWebSocket(&req.Header) {
		p.tunnel(ctx, route, outcome)
		return
	}
	p.prepare(ctx, route)
	var body *clientBody
	if hasBody(&req.Header) {
		body = &clientBody{r: req.BodyStream(), header: &req.Header, left: int64(p.opts.MaxRequestBodyBytes), last: ctx.Time()}
		req.SetBodyStream(body, req.Header.ContentLength())
	}
	stopClient := func() { _ = ctx.SetReadDeadline(time.Now()) }
	replayable := isReplayable(&req.Header)
	head := req.Header.IsHead()
	var tried []*upstream
	var lastErr error
	var lastBackend *upstream
	shareRefused := 0  // backends that refused for the tenant's share
	var release func() // gives back the memory of a body read whole
	defer func() {
		if release != nil {
			release()
		}
	}()
	// Each backend once, and one more try for a request a reused connection lost.
	for attempts := len(route.Backends) + 1; attempts > 0; attempts-- {
		u := p.pick(route, tried)
		if u == nil {
			break
		}
		// Read whole on the first attempt, once a backend is there to send it to
		// (none: the 503 below comes at once), before one of its connections is
		// taken. Later attempts follow a backend that took nothing of it.
		if body != nil && tried == nil {
			var err error
			if release, err = p.bufferBody(ctx, body); err != nil {
				if isTimeout(err) {
					p.refuse(ctx, fasthttp.StatusRequestTimeout, outcome, requestTimeout)
				} else {
					p.refuse(ctx, fasthttp.StatusBadRequest, outcome, "the request body could not be read\n")
				}
				ctx.SetConnectionClose()
				return
			}
		}
		err := u.roundTrip(route.Tenant, req, &ctx.Response, head, body, stopClient)
		// From the request's arrival to the backend's answer: one clock read, not two. A
		// request its tenant's share refused asked no backend, and has no such time.
		if err != errTenantShare {
			route.observeUpstream(time.Since(ctx.Time()))
		}
		if err == nil {
			u.answered()
			stripHopByHop(&ctx.Response.Header)
			inHTTP11(&ctx.Response.Header)
			if body != nil && !body.eof {
				ctx.SetConnectionClose() // answered before the whole body was read
			}
			if !req.Header.IsHTTP11() && ctx.Response.IsBodyStream() && ctx.Response.Header.ContentLength() < 0 {
				p.streamToHTTP10(ctx)
			}
			observeRequest(ctx.Response.StatusCode(), outcome)
			return
		}
		ctx.Response.Reset()
		var clientErr *clientBodyError
		switch {
		case errors.Is(err, fasthttp.ErrBodyTooLarge):
			p.refuse(ctx, fasthttp.StatusRequestEntityTooLarge, outcome, "the request body is larger than the limit\n")
			return
		case errors.As(err, &clientErr):
			p.refuse(ctx, fasthttp.StatusBadRequest, outcome, "the request body could not be read\n")
			return
		case isDialError(err):
			// Nothing was sent: another backend of the region may take it. Only a
			// backend that cannot be reached cools down; a slow answer or a full
			// pool says nothing about the next request.
			u.coolDown()
			tried = append(tried, u)
			continue
		case err == errTenantShare:
			// Nothing was taken or sent; the tenant may still have room at another
			// backend of the region.
			shareRefused++
			tried = append(tried, u)
			continue
		case errors.Is(err, fasthttp.ErrNoFreeConns):
			// Every connection the proxy may open to this backend stayed busy for the
			// dial timeout: nothing was sent, and another backend of the region may
			// have room. With none left, the region has no backend available (503,
			// with Retry-After), not one that failed to answer (502). Logged, so
			// that the 503 says why.
			logBackendError(u.addr, err)
			tried = append(tried, u)
			continue
		}
		lastErr, lastBackend = err, u
		if replayable && lostOnReusedConn(err) {
			continue
		}
		break
	}
	if lastErr != nil {
		// A backend was reached and failed: that is a 502 (504 on a timeout), never
		// "no backend".
		status := fasthttp.StatusBadGateway
		if errors.Is(lastErr, fasthttp.ErrTimeout) || isTimeout(lastErr) {
			status = fasthttp.StatusGatewayTimeout
		}
		logBackendError(lastBackend.addr, lastErr)
		p.refuse(ctx, status, outcome, "the backend did not answer\n")
		return
	}
	// Data residency: a tenant is only ever served by its own region.
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, p.retryAfter)
	if shareRefused > 0 && shareRefused == len(p.upstreamsOf(route)) {
		// Every backend of the region refused for the tenant's share (none failed,
		// cooled down or had its pool full): the tenant's doing, not the backends'.
		tenantShareFull.Inc()
		logTenantShareFull(route)
		p.refuse(ctx, fasthttp.StatusServiceUnavailable, outcome, "this site has as many requests in progress as it may; try again shortly\n")
		return
	}
	p.refuse(ctx, fasthttp.StatusServiceUnavailable, outcome, "no backend of region "+route.Region+" is available\n")
}

// streamToHTTP10 sends a streamed body of unknown length to an HTTP/1.0 client, which
// cannot read chunked encoding (fasthttp would chunk it): the header without
// framing, then the body until its end, then the connection closes.
func (p *Proxy) streamToHTTP10(ctx *fasthttp.RequestCtx) {
	resp := &ctx.Response
	body, ok := resp.BodyStream().(*upstreamBody)
	if !ok {
		return
	}
	// The hijacked connection's goroutine owns the body from here; the response
	// only points at it until the request is reset.
	body.detached = true
	resp.Header.Del(fasthttp.HeaderTransferEncoding)
	resp.Header.SetContentLength(-2) // identity: delimited by the connection's close
	resp.Header.SetConnectionClose()
	head := append([]byte(nil), resp.Header.Header()...)
	p.hijack(ctx, body.finish, func(c net.Conn) {
		defer p.handed.take(c, nil)()
		defer body.finish()
		if _, err := c.Write(head); err == nil {
			_, _ = io.Copy(c, body)
		}
	})
}

var (
	challengePrefix = []byte(certs.ChallengePath)
	httpsProto      = []byte("https")
)

// plainForTLS answers a plain-HTTP request when HTTPS is on: an ACME HTTP-01
// challenge for a hostname being validated, or a redirect to HTTPS for a hostname the
// proxy has a certificate for (unless a trusted proxy in front, such as the CDN, says
// the client already spoke HTTPS to it). It reports whether it answered.
func (p *Proxy) plainForTLS(ctx *fasthttp.RequestCtx, host []byte, outcome Outcome) bool {
	req := &ctx.Request
	// Only a GET for the challenge path, as a CA sends it (origin form), is looked at:
	// every other plain request passes without a conversion or a parse of its target.
	if target := req.Header.RequestURI(); req.Header.IsGet() && bytes.HasPrefix(target, challengePrefix) {
		if i := bytes.IndexByte(target, '?'); i >= 0 {
			target = target[:i]
		}
		if status, body, ok := p.tls.Certificates.HTTPChallenge(ctx, string(host), string(target)); ok {
			ctx.Response.SetStatusCode(status)
			ctx.Response.Header.SetContentType("text/plain")
			ctx.Response.SetBody(body)
			observeRequest(status, outcome)
			return true
		}
	}
	if p.tls.RedirectPort == 0 {
		return false
	}
	// Behind the CDN most plain requests say they came over HTTPS: that is answered
	// before the certificate lookup.
	if p.opts.trusted(remoteIP(ctx)) && bytes.EqualFold(req.Header.Peek("X-Forwarded-Proto"), httpsProto) {
		return false
	}
	if !p.tls.Certificates.CanServe(string(host)) {
		return false
	}
	bufp := valueBufs.Get().(*[]byte)
	defer valueBufs.Put(bufp)
	target := req.Header.RequestURI()
	if len(target) == 0 || target[0] != '/' {
		target = req.URI().RequestURI() // absolute form: its path and query only
	}
	*bufp = p.tls.redirectTarget((*bufp)[:0], host, target)
	ctx.Response.SetStatusCode(fasthttp.StatusPermanentRedirect)
	ctx.Response.Header.SetBytesV(fasthttp.HeaderLocation, *bufp)
	if hasBody(&req.Header) {
		ctx.SetConnectionClose() // the body is not read
	}
	observeRequest(fasthttp.StatusPermanentRedirect, outcome)
	return true
}

// refuse answers the request itself. The request body may not have been read to
// its end: the connection is closed after the answer, so that no unread body byte is
// ever taken for the next request.
func (p *Proxy) refuse(ctx *fasthttp.RequestCtx, status int, outcome Outcome, body string) {
	ctx.Response.SetStatusCode(status)
	ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
	ctx.Response.SetBodyString(body)
	if hasBody(&ctx.Request.Header) {
		ctx.SetConnectionClose()
	}
	observeRequest(status, outcome)
}

// hasBody reports whether a request has a body (a positive Content-Length, or
// chunked).
func hasBody(h *fasthttp.RequestHeader) bool {
	cl := h.ContentLength()
	return cl > 0 || cl == -1
}

// isReplayable reports a request that can be sent again after a connection lost it,
// by the rules of Go's Transport: no body, and an idempotent method or an idempotency
// key.
func isReplayable(h *fasthttp.RequestHeader) bool {
	if hasBody(h) {
		return false
	}
	switch string(h.Method()) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace:
		return true
	}
	return len(h.Peek("Idempotency-Key")) > 0 || len(h.Peek("X-Idempotency-Key")) > 0
}

var (
	backendLog                = logf.Log.WithName("proxy")
	backendErrors, sharesFull oncePerSecond
)

// logLines carries the proxy's log lines to the one goroutine that writes them: a log
// that takes no lines for a while (a node's log agent behind, its pipe full) must not
// stall the request that logs, nor, on the loop engine, every connection of its loop.
// Past its room, lines are dropped and counted.
var (
	logLines        = make(chan logLine, 64)
	startLogWriter  sync.Once
	logLinesDropped atomic.Int64
)

type logLine struct {
	log  logr.Logger
	err  error // nil: an Info line
	msg  string
	kv   []any
	done chan struct{} // flushLogLines' mark, closed once reached
}

// logInfo and logError write a line later, off the caller's thread.
func logInfo(msg string, kv ...any) { logLater(logLine{log: backendLog, msg: msg, kv: kv}) }
func logError(err error, msg string, kv ...any) {
	logLater(logLine{log: backendLog, err: err, msg: msg, kv: kv})
}

// flushLogLines waits, up to d, for the lines queued so far to be written: the
// process exits once the proxy drained, and lines still queued would be lost.
func flushLogLines(d time.Duration) {
	done := make(chan struct{})
	logLater(logLine{done: done})
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func logLater(line logLine) {
	startLogWriter.Do(func() { go writeLogLines() })
	select {
	case logLines <- line:
	default:
		logLinesDropped.Add(1)
	}
}

func writeLogLines() {
	for line := range logLines {
		switch {
		case line.done != nil:
			close(line.done)
			continue
		case line.err != nil:
			line.log.Error(line.err, line.msg, line.kv...)
		default:
			line.log.Info(line.msg, line.kv...)
		}
		if n := logLinesDropped.Swap(0); n > 0 {
			line.log.Info("log lines were dropped while the log took none", "dropped", n)
		}
	}
}

// oncePerSecond lets one log line a second through, and counts the others: a flood
// of failures must not flood the log.
type oncePerSecond struct{ last, suppressed atomic.Int64 }

// allow reports whether a line may be logged now, and how many were not since the last.
func (o *oncePerSecond) allow() (bool, int64) {
	now := time.Now().UnixNano()
	last := o.last.Load()
	if now-last < int64(time.Second) || !o.last.CompareAndSwap(last, now) {
		o.suppressed.Add(1)
		return false, 0
	}
	return true, o.suppressed.Swap(0)
}

// logBackendError says why a backend's answer failed, at most once a second: a
// broken backend under load must not flood the log.
func logBackendError(backend string, err error) {
	if ok, suppressed := backendErrors.allow(); ok {
		logInfo("backend request failed", "backend", backend, "error", err.Error(), "suppressedSinceLast", suppressed)
	}
}

// logTenantShareFull names the tenant whose requests were refused for holding their
// share of its region's backends: the metric has no tenant label.
func logTenantShareFull(route *CachedRoute) {
	if ok, suppressed := sharesFull.allow(); ok {
		logInfo("a tenant's requests hold their share of every backend of its region; refusing more",
			"tenant", route.Tenant, "region", route.Region, "suppressedSinceLast", suppressed)
	}
}

// clientBody is a request body on its way to a backend. It keeps the body limit,
// tells the client's failures apart from the backend's, drops the body's trailers
// (a trailer is a header the proxy never saw: X-Tenant-ID could come that way) and
// holds back an error that arrives with data: fasthttp's chunked writer sends the data
// and drops the error, so a broken chunk would otherwise end the body as if complete,
// and the backend would take a body the client never framed.
type clientBody struct {
	r      io.Reader
	header *fasthttp.RequestHeader
	left   int64
	err    error     // the client's failure, ErrBodyTooLarge included
	held   error     // returned on the next read
	eof    bool      // read to its end
	last   time.Time // when the client last sent some of it
	read   int64
}

// stallGrace is how long a client may have sent nothing of its body when the backend
// gives up on it for the failure to be the client's: a backend that closes on a body
// that stopped coming (its own read timeout) must not turn a stalled upload into a
// 502, which the proxy's 5xx alert pages for.
const stallGrace = time.Second

// stalled tells, once the sender has stopped, whether it was waiting on a client that
// had gone quiet: a body read that failed, and nothing received for stallGrace.
func (b *clientBody) stalled() bool {
	return b.err != nil && time.Since(b.last) >= stallGrace
}

// clientBodyError is a failure to read the client's body.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string { return "reading the request body: " + e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

func (b *clientBody) Read(p []byte) (int, error) {
	if b.held != nil {
		return 0, b.held
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if n > 0 {
		b.last = time.Now()
	}
	b.read += int64(n)
	if b.left -= int64(n); b.left < 0 {
		b.err, b.held = fasthttp.ErrBodyTooLarge, fasthttp.ErrBodyTooLarge
		return 0, b.err
	}
	switch {
	case err == io.EOF && b.read < int64(b.header.ContentLength()):
		// fasthttp ends a body of declared length with io.EOF when its client closes
		// early: cut short, not complete. Taken for its end, it would reach the
		// backend short of its declared length, and the client's failure would be
		// answered 502.
		b.err = &clientBodyError{io.ErrUnexpectedEOF}
		err = b.err
	case err == io.EOF:
		b.eof = true
		b.dropTrailers()
	case err != nil:
		b.err = &clientBodyError{err}
		err = b.err
	}
	return holdError(n, err, &b.held)
}

// dropTrailers forgets the trailer fields fasthttp read at the end of a chunked body;
// the header went out before, so only the trailer section loses them.
func (b *clientBody) dropTrailers() {
	var names [][]byte
	for name := range b.header.Trailers() {
		names = append(names, append([]byte(nil), name...))
	}
	for _, name := range names {
		b.header.DelBytes(name)
	}
}

// holdError returns data now and its error on the next read.
func holdError(n int, err error, held *error) (int, error) {
	if n > 0 && err != nil {
		*held = err
		return n, nil
	}
	return n, err
}
