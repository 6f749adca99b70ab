package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// upstream is one backend: its keep-alive pool and passive health. The pool is
// fasthttp's HostClient used for its connections only (dialing, TLS, limits, idle
// retirement); the exchange on a connection is the proxy's own (roundTrip), so that
// reuse, retries, header limits and streaming follow the rules a proxy needs.
type upstream struct {
	url       string
	addr      string
	tls       *tls.Config // nil for plain HTTP
	pool      *fasthttp.HostClient
	p         *Proxy
	downUntil atomic.Int64

	// held counts the pool's connections each tenant's requests hold, for
	// Options.MaxConnsPerTenant; a tenant holding none has no entry.
	heldMu sync.Mutex
	held   map[string]int

	// The loop engine's: its connections to the backend, and the backend's address
	// as it dials it (see sockaddr).
	loopConns     atomic.Int64
	loopWaiting   atomic.Int32 // requests waiting for a connection, on either engine
	poolWaiting   atomic.Int32 // those of the fasthttp engine
	loopAddr      atomic.Pointer[loopAddr]
	loopResolving atomic.Bool
}

// loopAddr is a backend's address as the loop engine dials it: ap, or none (a name of
// several addresses, or that did not resolve); until is when a name is resolved again
// (0: an address, for good).
type loopAddr struct {
	ap    netip.AddrPort
	until int64
}

// errTenantShare: the request's tenant holds its share of the backend's connections.
var errTenantShare = errors.New("the tenant's requests hold their share of the backend's connections")

// take counts one more connection held for tenant, unless it holds its share already.
// The tenant is the route's own string: the map keeps it without a copy.
func (u *upstream) take(tenant string) bool {
	u.heldMu.Lock()
	defer u.heldMu.Unlock()
	n := u.held[tenant]
	if n >= u.p.opts.MaxConnsPerTenant {
		return false
	}
	u.held[tenant] = n + 1
	return true
}

// give gives back a connection take counted.
func (u *upstream) give(tenant string) {
	u.heldMu.Lock()
	defer u.heldMu.Unlock()
	if n := u.held[tenant] - 1; n > 0 {
		u.held[tenant] = n
	} else {
		delete(u.held, tenant)
	}
}

func (p *Proxy) upstream(rawURL string) (*upstream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u, ok := p.upstreams[rawURL]; ok {
		return u, nil
	}
	parsed, err := url.Parse(rawURL)
	if err != nil || parsed.Host == "" || (parsed.Scheme != "http" && parsed.Scheme != "https") {
		return nil, errors.New("invalid backend URL " + rawURL)
	}
	addr := parsed.Host
	if parsed.Port() == "" {
		addr = net.JoinHostPort(parsed.Hostname(), map[bool]string{true: "443", false: "80"}[parsed.Scheme == "https"])
	}
	u := &upstream{url: rawURL, addr: addr, p: p, held: map[string]int{}}
	if parsed.Scheme == "https" {
		u.tls = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: parsed.Hostname()}
	}
	u.pool = &fasthttp.HostClient{
		Addr:                addr,
		MaxConns:            p.opts.MaxConnsPerBackend,
		MaxConnWaitTimeout:  p.opts.DialTimeout,
		MaxIdleConnDuration: p.opts.UpstreamIdleConnTimeout,
		// The TLS handshake happens here, within the dial timeout, so that a backend
		// whose TLS fails is a dial error (cool-down, next backend), not a 502.
		Dial: func(string) (net.Conn, error) {
			// The loop engine's connections to the backend count in its pool too
			// (fasthttp counts the one being dialed already).
			if !u.loopRoom() {
				return nil, fasthttp.ErrNoFreeConns
			}
			return u.dial()
		},
	}
	p.upstreams[rawURL] = u
	return u, nil
}

// loopRoom waits, up to the dial timeout, until the loop engine's connections to the
// backend leave the pool room for one more of fasthttp's (the loops close their idle
// ones meanwhile); false if they do not.
func (u *upstream) loopRoom() bool {
	full := func() bool {
		n := u.loopConns.Load()
		return n > 0 && n+int64(u.pool.ConnsCount()) > int64(u.p.opts.MaxConnsPerBackend)
	}
	if !full() {
		return true
	}
	u.loopWaiting.Add(1)
	u.poolWaiting.Add(1)
	defer u.loopWaiting.Add(-1)
	defer u.poolWaiting.Add(-1)
	deadline := time.Now().Add(u.p.opts.DialTimeout)
	for full() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

func (u *upstream) dialTCP() (net.Conn, error) {
	c, err := u.p.dialer.DialDualStackTimeout(u.addr, u.p.opts.DialTimeout)
	if err != nil {
		return nil, err
	}
	return newIdleConn(c, u.p.opts.UpstreamTimeout, u.p.opts.UpstreamTimeout, nil), nil
}

// dial opens a backend connection, TLS included.
func (u *upstream) dial() (net.Conn, error) {
	c, err := u.dialTCP()
	if err != nil || u.tls == nil {
		return c, err
	}
	tc := tls.Client(c, u.tls)
	_ = tc.SetDeadline(time.Now().Add(u.p.opts.DialTimeout))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	_ = tc.SetDeadline(time.Time{})
	return tc, nil
}

func (u *upstream) coolDown() {
	u.downUntil.Store(time.Now().Add(u.p.opts.BackendCooldown).UnixNano())
}

// answered ends a cool-down: the backend answered. Written only when it was down: a
// store at every answer would move the field's cache line between the CPUs that
// serve the backend's requests.
func (u *upstream) answered() {
	if u.downUntil.Load() != 0 {
		u.downUntil.Store(0)
	}
}

// upstreamError is a failed exchange with what the retry rules need to know.
type upstreamError struct {
	err    error
	reused bool // the connection had carried a request before
	// nothing says no byte of a response arrived before the connection ended.
	nothing bool
}

func (e *upstreamError) Error() string { return e.err.Error() }
func (e *upstreamError) Unwrap() error { return e.err }

// lostOnReusedConn reports a request that a reused connection lost before any answer
// (the backend closed it as the request went out): Go's Transport replays such a
// request on a new connection when it is replayable.
func lostOnReusedConn(err error) bool {
	var ue *upstreamError
	return errors.As(err, &ue) && ue.reused && ue.nothing
}

var (
	errHeaderTooLarge = errors.New("the backend's response header is larger than the limit")
	errUnaskedSwitch  = errors.New("the backend switched protocols on a request that did not ask to")
)

// earlyAnswerGrace is how long an answer is awaited once sending the request failed.
const earlyAnswerGrace = 500 * time.Millisecond

// maxReuseChecks bounds how many pooled connections one request discards as closed
// before it dials a new one.
const maxReuseChecks = 8

// roundTrip sends req on a pooled connection, counted in tenant's share of the pool
// (errTenantShare when it is full), and reads the response header into resp. A small
// body of known length is read whole, so that it is written to the client with the
// header in one go; any other body streams, and its connection returns to the pool
// once it was read to the end.
//
// A request body is sent while the response is awaited, as Go's Transport and nginx
// do: a backend may answer before it read the body (401, 413), and that answer is the
// client's, not a 502. Until the body is sent the backend is not hurried; after, it
// has UpstreamTimeout to answer. body is the request's body reader (nil without one);
// stopClient unblocks a read of the client's body so that the sender can be stopped.
func (u *upstream) roundTrip(tenant string, req *fasthttp.Request, resp *fasthttp.Response, head bool, body *clientBody, stopClient func()) error {
	if !u.take(tenant) {
		return errTenantShare
	}
	cc, err := u.pool.AcquireConn(0, false)
	for checks := 0; err == nil && !cc.LastUseTime().IsZero() && !reusable(cc.Conn()); checks++ {
		u.pool.CloseConn(cc)
		if checks == maxReuseChecks {
			u.pool.CloseIdleConnections()
		}
		cc, err = u.pool.AcquireConn(0, false)
	}
	if err != nil {
		u.give(tenant)
		return err
	}
	reused := !cc.LastUseTime().IsZero()
	conn := cc.Conn()
	release := func(reuse bool) {
		if reuse {
			u.pool.ReleaseConn(cc)
		} else {
			u.pool.CloseConn(cc)
		}
		u.give(tenant)
	}

	var sent chan error
	if body == nil {
		if err := writeRequest(conn, req); err != nil {
			release(false)
			return &upstreamError{err: fmt.Errorf("writing the request: %w", err), reused: reused}
		}
	} else {
		sent = make(chan error, 1)
		_ = conn.SetReadDeadline(time.Now().Add(24 * time.Hour)) // the upload's own pace
		go func() {
			err := writeRequest(conn, req)
			if err != nil {
				// The exchange failed, but an answer may be in already: a backend that
				// answers before reading the body closes with the body unread, and the
				// reset that fails this write arrives with its answer. A deadline of now
				// would refuse to read what is buffered.
				_ = conn.SetReadDeadline(time.Now().Add(earlyAnswerGrace))
			} else {
				_ = conn.SetReadDeadline(time.Now().Add(u.p.opts.UpstreamTimeout))
			}
			sent <- err
		}()
	}

	br := readers.Get().(*bufio.Reader)
	br.Reset(conn)
	r, err := u.p.readResponseHead(br, resp, false)
	early := false
	if sent != nil {
		var sendErr error
		stopped := false
		select {
		case sendErr = <-sent:
		default:
			// Answered (or failed) while the body was still going out: stop sending. The
			// sender may be waiting on the client or on the backend.
			_ = conn.SetWriteDeadline(time.Now())
			stopClient()
			stopped = true
			if sendErr = <-sent; sendErr == nil {
				// The last byte went out as the answer came in: nothing was cut short,
				// and the connection goes back to the pool with no deadline of the past
				// to fail its next request. (The client's connection needs no undoing:
				// its body is read, and the server sets a deadline for its next request.)
				_ = conn.SetWriteDeadline(time.Time{})
			}
		}
		_ = conn.SetReadDeadline(time.Time{}) // between reads again, for the body
		switch {
		case sendErr == nil:
		case err == nil:
			early = true // a whole answer, although the body did not all go out
		case stopped && !errors.Is(body.err, fasthttp.ErrBodyTooLarge) && !body.stalled():
			// The backend failed first (err, below), and the sender failed only because
			// the stop above cut it off, in a read of the client or a write to the
			// backend: the backend's failure, neither the client's nor a timeout.
		default:
			u.p.putReader(br, r)
			release(false)
			if body.err != nil {
				return body.err // the client's body failed, not the backend
			}
			return &upstreamError{err: fmt.Errorf("writing the request: %w", sendErr), reused: reused}
		}
	}
	if err != nil {
		// Nothing of a response arrived only if the reader never saw a byte: a
		// truncated header is an answer begun.
		nothing := err == io.EOF && br.Buffered() == 0 && (r == br || r.Buffered() == 0)
		u.p.putReader(br, r)
		release(false)
		return &upstreamError{err: fmt.Errorf("reading the response: %w", err), reused: reused, nothing: nothing}
	}
	reuse, streamed, err := u.p.readResponseBody(br, r, resp, head)
	// After an early answer the backend connection carries a request cut short: it
	// is not reused.
	if streamed == nil {
		release(reuse && !early)
		return err
	}
	held := cc // captured in this branch only: a closure per streamed response, none otherwise
	streamed.done = func(reuse bool) {
		if reuse && !early {
			u.pool.ReleaseConn(held)
		} else {
			u.pool.CloseConn(held)
		}
		u.give(tenant)
	}
	return nil
}

func writeRequest(conn net.Conn, req *fasthttp.Request) error {
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(conn)
	err := req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	return err
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}
)

// readResponseHead reads a response header into resp, skipping interim (1xx)
// answers; a 101 is an answer only to an upgrade. A header that does not fit the
// pooled reader is read again through a larger one, up to MaxResponseHeaderBytes; the
// reader returned is the one the body must be read from.
func (p *Proxy) readResponseHead(br *bufio.Reader, resp *fasthttp.Response, upgrade bool) (*bufio.Reader, error) {
	r := br
	for interim := 0; ; interim++ {
		err := resp.Header.Read(r)
		if err != nil && tooSmall(err) && r == br && p.opts.MaxResponseHeaderBytes > br.Size() {
			r = p.bigReaders.Get().(*bufio.Reader)
			r.Reset(br)
			err = resp.Header.Read(r)
		}
		if err != nil {
			if tooSmall(err) {
				return r, errHeaderTooLarge
			}
			return r, err
		}
		switch status := resp.StatusCode(); {
		case status >= 200:
			return r, nil
		case status == fasthttp.StatusSwitchingProtocols && upgrade:
			return r, nil
		case status == fasthttp.StatusSwitchingProtocols:
			// Nobody asked to switch: the connection is no longer HTTP.
			return r, errUnaskedSwitch
		}
		if interim == 4 {
			return r, errors.New("too many interim responses")
		}
	}
}

// tooSmall reports a header that did not fit the reader.
func tooSmall(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}

func (p *Proxy) putReader(br, r *bufio.Reader) {
	if r != br && r != nil {
		r.Reset(nil)
		p.bigReaders.Put(r)
	}
	br.Reset(nil)
	readers.Put(br)
}

// drained reports that a response left nothing unread in its readers: bytes past a
// response mean the backend and the proxy disagree on framing, and such a connection
// is never reused.
func drained(br, r *bufio.Reader) bool { return r.Buffered() == 0 && br.Buffered() == 0 }

// readResponseBody reads or streams the body of a response whose header is in resp.
// A body it reads whole (none, or small of known length) returns its readers at once
// and says whether the connection may carry another request. A streamed body is set
// on resp and returned: its connection is decided once the server has written it,
// through the body's done, which the caller sets.
func (p *Proxy) readResponseBody(br, r *bufio.Reader, resp *fasthttp.Response, head bool) (reuse bool, streamed *upstreamBody, err error) {
	keep := !resp.Header.ConnectionClose()
	cl := resp.Header.ContentLength()
	status := resp.StatusCode()
	switch {
	case head || status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified || status < 200:
		// No body: a response without a length is not close-delimited here, though
		// fasthttp marks it so. A backend that does close is seen at the next reuse.
		reuse = (keep || cl == -2) && drained(br, r)
		p.putReader(br, r)
		return reuse, nil, nil
	case cl >= 0 && cl <= smallBody:
		resp.StreamBody = false
		err := resp.ReadBody(r, 0)
		reuse = keep && drained(br, r)
		p.putReader(br, r)
		if err != nil {
			return false, nil, &upstreamError{err: fmt.Errorf("reading the response body: %w", err)}
		}
		return reuse, nil, nil
	}
	// Larger, chunked or close-delimited: stream it through fasthttp's own decoder.
	dec := fasthttp.AcquireResponse()
	dec.Header.SetContentLength(cl)
	dec.StreamBody = true
	if err := dec.ReadBody(r, 0); err != nil {
		fasthttp.ReleaseResponse(dec)
		p.putReader(br, r)
		return false, nil, &upstreamError{err: fmt.Errorf("reading the response body: %w", err)}
	}
	body := &upstreamBody{dec: dec, stream: dec.BodyStream(), p: p, br: br, r: r, keep: keep && cl != -2}
	if cl == -2 {
		cl = -1 // close-delimited from the backend, chunked to the client
	}
	resp.SetBodyStream(body, cl)
	return false, body, nil
}

// upstreamBody is a streamed response body; the server closes it once written (or
// abandoned), which returns its connection to the pool only if it was read to the end.
type upstreamBody struct {
	dec    *fasthttp.Response
	stream io.Reader
	err    error // held back until the next read (see limitedBody)
	eof    bool
	closed bool
	// detached: the body is sent by a hijacked connection, which finishes it; the
	// server's Close must not pull it away meanwhile.
	detached bool
	p        *Proxy
	br, r    *bufio.Reader // returned to their pools once the body is through
	keep     bool          // the connection may carry another request if read to the end
	done     func(reuse bool)
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.stream.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return holdError(n, err, &b.err)
}

// Close is called by the server once the body is written, or abandoned.
func (b *upstreamBody) Close() error {
	if b.detached {
		return nil
	}
	b.finish()
	return nil
}

// finish returns the body's connection, once.
func (b *upstreamBody) finish() {
	if b.closed {
		return
	}
	b.closed = true
	_ = b.dec.CloseBodyStream()
	fasthttp.ReleaseResponse(b.dec)
	clean := drained(b.br, b.r)
	b.p.putReader(b.br, b.r)
	b.done(b.eof && b.keep && clean)
}

// pick returns the next backend of the route in round robin that is not cooling down
// and not in tried.
func (p *Proxy) pick(r *CachedRoute, tried []*upstream) *upstream {
	ups := p.upstreamsOf(r)
	n := len(ups)
	if n == 0 {
		return nil
	}
	var now int64 // read the clock only when a backend is cooling down
	start := r.next.Add(1)
	for i := range n {
		u := ups[(start+uint64(i))%uint64(n)]
		if down := u.downUntil.Load(); down != 0 {
			if now == 0 {
				now = time.Now().UnixNano()
			}
			if down > now {
				continue
			}
		}
		if !containsUpstream(tried, u) {
			return u
		}
	}
	return nil
}

// upstreamsOf resolves a route's backends once and keeps them on the cached route.
func (p *Proxy) upstreamsOf(r *CachedRoute) []*upstream {
	if ups := r.upstreams.Load(); ups != nil {
		return *ups
	}
	ups := make([]*upstream, 0, len(r.Backends))
	for _, b := range r.Backends {
		if u, err := p.upstream(b); err == nil {
			ups = append(ups, u)
		}
	}
	r.upstreams.Store(&ups)
	return ups
}

func containsUpstream(list []*upstream, u *upstream) bool {
	for _, x := range list {
		if x == u {
			return true
		}
	}
	return false
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isDialError reports a failure to connect to a backend at all: nothing was sent.
func isDialError(err error) bool {
	var opErr *net.OpError
	return errors.Is(err, fasthttp.ErrDialTimeout) || (errors.As(err, &opErr) && opErr.Op == "dial")
}
