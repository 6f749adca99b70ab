package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// Options tune the proxy.
type Options struct {
	// UpstreamTimeout bounds writing a request to a backend and reading its response
	// headers and each read of its body.
	UpstreamTimeout time.Duration
	// DialTimeout bounds connecting to a backend.
	DialTimeout time.Duration
	// MaxConnsPerBackend sizes each backend's keep-alive pool.
	MaxConnsPerBackend int
	// BackendCooldown is how long a backend that failed is skipped (passive health).
	BackendCooldown time.Duration
	// RetryAfter is sent with 503 answers.
	RetryAfter time.Duration
	// TrustForwarded keeps the X-Forwarded-* and Forwarded headers clients send,
	// appending to them; only set it behind a load balancer that sets them itself.
	TrustForwarded bool
}

func (o *Options) defaults() {
	if o.UpstreamTimeout == 0 {
		o.UpstreamTimeout = 30 * time.Second
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 3 * time.Second
	}
	if o.MaxConnsPerBackend == 0 {
		o.MaxConnsPerBackend = 1024
	}
	if o.BackendCooldown == 0 {
		o.BackendCooldown = 10 * time.Second
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = 5 * time.Second
	}
}

// Proxy forwards each request to a backend of its tenant's region.
type Proxy struct {
	chain *Chain
	opts  Options

	mu         sync.Mutex
	upstreams  map[string]*upstream // by backend URL
	retryAfter string
}

// New returns a proxy that looks routes up through chain.
func New(chain *Chain, opts Options) *Proxy {
	opts.defaults()
	return &Proxy{chain: chain, opts: opts, upstreams: map[string]*upstream{},
		retryAfter: strconv.Itoa(int(opts.RetryAfter.Seconds()))}
}

// upstream is one backend with its keep-alive pool and passive health.
type upstream struct {
	url       string
	addr      string
	tls       bool
	client    *fasthttp.HostClient
	downUntil atomic.Int64
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
	u := &upstream{url: rawURL, addr: addr, tls: parsed.Scheme == "https"}
	u.client = &fasthttp.HostClient{
		Addr:                addr,
		IsTLS:               u.tls,
		TLSConfig:           &tls.Config{MinVersion: tls.VersionTLS12, ServerName: parsed.Hostname()},
		MaxConns:            p.opts.MaxConnsPerBackend,
		MaxConnWaitTimeout:  p.opts.DialTimeout,
		MaxIdleConnDuration: 90 * time.Second,
		ReadTimeout:         p.opts.UpstreamTimeout,
		WriteTimeout:        p.opts.UpstreamTimeout,
		Dial: func(addr string) (net.Conn, error) {
			return fasthttp.DialDualStackTimeout(addr, p.opts.DialTimeout)
		},
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		NoDefaultUserAgentHeader:      true,
		StreamResponseBody:            true,
	}
	p.upstreams[rawURL] = u
	return u, nil
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

func containsUpstream(list []*upstream, u *upstream) bool {
	for _, x := range list {
		if x == u {
			return true
		}
	}
	return false
}

// smallBody is the largest response body read whole before it is forwarded.
const smallBody = 64 << 10

var hostBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// ServeFastHTTP is the proxy's request handler.
func (p *Proxy) ServeFastHTTP(ctx *fasthttp.RequestCtx) {
	bufp := hostBufs.Get().(*[]byte)
	defer hostBufs.Put(bufp)
	host, err := normalizeHost(ctx.Host(), *bufp)
	if err != nil {
		p.finish(ctx, fasthttp.StatusBadRequest, OutcomeError, "invalid host\n")
		return
	}
	route, outcome := p.chain.LookupAt(ctx, host, ctx.Time().UnixNano())
	observeLookup(outcome)
	switch outcome {
	case OutcomeNotFound:
		p.finish(ctx, fasthttp.StatusNotFound, outcome, "no tenant is served at this host\n")
		return
	case OutcomeError:
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, p.retryAfter)
		p.finish(ctx, fasthttp.StatusServiceUnavailable, outcome, "the route of this host cannot be looked up right now\n")
		return
	}
	if isUpgrade(&ctx.Request.Header) {
		p.tunnel(ctx, route, outcome)
		return
	}
	p.prepare(ctx, route)
	idempotent := isIdempotent(ctx.Request.Header.Method()) && len(ctx.Request.Body()) == 0 && ctx.Request.Header.ContentLength() <= 0
	var tried []*upstream
	for {
		u := p.pick(route, tried)
		if u == nil {
			break
		}
		tried = append(tried, u)
		err := u.client.Do(&ctx.Request, &ctx.Response)
		// From the request's arrival to the backend's answer: one clock read, not two.
		route.observeUpstream(time.Since(ctx.Time()))
		if err == nil {
			u.downUntil.Store(0)
			// Small bodies of known length are read whole and written with the headers
			// in one go; others (chunked, long, slow) stream through as they come.
			if cl := ctx.Response.Header.ContentLength(); cl >= 0 && cl <= smallBody {
				_ = ctx.Response.Body()
			}
			stripHopByHop(&ctx.Response.Header)
			p.finish(ctx, ctx.Response.StatusCode(), outcome, "")
			return
		}
		// Only a backend that cannot be reached cools down; a slow answer or a full
		// connection pool says nothing about the next request.
		if isDialError(err) {
			u.downUntil.Store(time.Now().Add(p.opts.BackendCooldown).UnixNano())
		}
		ctx.Response.Reset()
		if !idempotent {
			status := fasthttp.StatusBadGateway
			if errors.Is(err, fasthttp.ErrTimeout) {
				status = fasthttp.StatusGatewayTimeout
			}
			p.finish(ctx, status, outcome, "the backend did not answer\n")
			return
		}
	}
	// Data residency: a tenant is only ever served by its own region.
	ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, p.retryAfter)
	p.finish(ctx, fasthttp.StatusServiceUnavailable, outcome, "no backend of region "+route.Region+" is available\n")
}

// finish writes an error body when given and records the request.
func (p *Proxy) finish(ctx *fasthttp.RequestCtx, status int, outcome Outcome, body string) {
	if body != "" {
		ctx.Response.SetStatusCode(status)
		ctx.Response.Header.SetContentType("text/plain; charset=utf-8")
		ctx.Response.SetBodyString(body)
	}
	observeRequest(status, outcome)
}

// prepare turns the client's request into the backend's: hop-by-hop headers go,
// forwarding headers and the tenant come. Values are built in a pooled buffer.
func (p *Proxy) prepare(ctx *fasthttp.RequestCtx, route *CachedRoute) {
	h := &ctx.Request.Header
	stripHopByHop(h)
	bufp := valueBufs.Get().(*[]byte)
	defer valueBufs.Put(bufp)
	buf := (*bufp)[:0]
	proto := "http"
	if ctx.IsTLS() {
		proto = "https"
	}
	ip := ctx.RemoteIP()
	trusted := p.opts.TrustForwarded
	if !trusted {
		h.Del("X-Forwarded-Host")
		h.Del("X-Forwarded-Proto")
	}
	// X-Forwarded-For: prior hops (when trusted, every header of that name), then the client.
	if trusted {
		if buf = appendAll(buf, h.PeekAll("X-Forwarded-For")); len(buf) > 0 {
			buf = append(buf, ", "...)
		}
	}
	buf = appendIP(buf, ip)
	h.Del("X-Forwarded-For")
	h.SetBytesV("X-Forwarded-For", buf)
	if len(h.Peek("X-Forwarded-Host")) == 0 {
		h.SetBytesV("X-Forwarded-Host", ctx.Host())
	}
	if len(h.Peek("X-Forwarded-Proto")) == 0 {
		h.Set("X-Forwarded-Proto", proto)
	}
	// Forwarded (RFC 7239): prior elements (when trusted), then ours.
	buf = buf[:0]
	if trusted {
		if buf = appendAll(buf, h.PeekAll("Forwarded")); len(buf) > 0 {
			buf = append(buf, ", "...)
		}
	}
	buf = append(buf, "for="...)
	if ip.To4() == nil {
		buf = append(appendIP(append(buf, `"[`...), ip), `]"`...)
	} else {
		buf = appendIP(buf, ip)
	}
	buf = strconv.AppendQuote(append(buf, ";host="...), unsafeString(ctx.Host()))
	buf = append(append(buf, ";proto="...), proto...)
	h.Del("Forwarded")
	h.SetBytesV("Forwarded", buf)
	// Del first: Set replaces only the first of several headers of one name.
	h.Del("X-Tenant-ID")
	h.Set("X-Tenant-ID", route.Tenant)
	*bufp = buf
}

var valueBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// hopByHop are the headers of one connection, never forwarded (RFC 9110 7.6.1).
// Transfer-Encoding is left out: fasthttp frames bodies itself.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Upgrade"}

type headers interface {
	Peek(key string) []byte
	Del(key string)
}

// stripHopByHop deletes the hop-by-hop headers and those named in Connection. Header
// names are normalised, so Peek finds them in any case the client used.
func stripHopByHop(h headers) {
	// The tokens of Connection are read in place: browsers send "keep-alive" on every
	// request, and only a header it names (rare) costs a string.
	for c := h.Peek("Connection"); len(c) > 0; {
		token := c
		if i := bytes.IndexByte(c, ','); i >= 0 {
			token, c = c[:i], c[i+1:]
		} else {
			c = nil
		}
		token = bytes.TrimSpace(token)
		if len(token) > 0 && !bytes.EqualFold(token, []byte("close")) && !bytes.EqualFold(token, []byte("keep-alive")) {
			h.Del(string(token))
		}
	}
	for _, name := range hopByHop {
		if len(h.Peek(name)) > 0 {
			h.Del(name)
		}
	}
}

func isIdempotent(method []byte) bool {
	switch string(method) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace:
		return true
	}
	return false
}

func isUpgrade(h *fasthttp.RequestHeader) bool {
	return bytes.EqualFold(h.Peek("Upgrade"), []byte("websocket")) &&
		bytes.Contains(bytes.ToLower(h.Peek("Connection")), []byte("upgrade"))
}

// tunnel passes a WebSocket upgrade through: the request goes to a backend as is
// (with forwarding headers), then bytes flow both ways until either side closes.
func (p *Proxy) tunnel(ctx *fasthttp.RequestCtx, route *CachedRoute, outcome Outcome) {
	u := p.pick(route, nil)
	if u == nil {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, p.retryAfter)
		p.finish(ctx, fasthttp.StatusServiceUnavailable, outcome, "no backend of region "+route.Region+" is available\n")
		return
	}
	upgrade, connection := string(ctx.Request.Header.Peek("Upgrade")), "Upgrade"
	p.prepare(ctx, route)
	ctx.Request.Header.Set("Upgrade", upgrade)
	ctx.Request.Header.Set("Connection", connection)
	var backend net.Conn
	var err error
	dialer := &net.Dialer{Timeout: p.opts.DialTimeout}
	if u.tls {
		backend, err = tls.DialWithDialer(dialer, "tcp", u.addr, &tls.Config{MinVersion: tls.VersionTLS12})
	} else {
		backend, err = dialer.Dial("tcp", u.addr)
	}
	if err != nil {
		u.downUntil.Store(time.Now().Add(p.opts.BackendCooldown).UnixNano())
		p.finish(ctx, fasthttp.StatusBadGateway, outcome, "the backend did not answer\n")
		return
	}
	if _, err := ctx.Request.WriteTo(backend); err != nil {
		backend.Close()
		p.finish(ctx, fasthttp.StatusBadGateway, outcome, "the backend did not answer\n")
		return
	}
	observeRequest(fasthttp.StatusSwitchingProtocols, outcome)
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(client net.Conn) {
		defer backend.Close()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(backend, client); closeWrite(backend); done <- struct{}{} }()
		go func() { _, _ = io.Copy(client, bufio.NewReader(backend)); closeWrite(client); done <- struct{}{} }()
		<-done
		// One side is done: the other gets a few seconds to finish, not forever.
		deadline := time.Now().Add(5 * time.Second)
		_ = client.SetDeadline(deadline)
		_ = backend.SetDeadline(deadline)
		<-done
	})
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = c.Close()
	}
}

// Server serves the proxy on a listener until its context ends.
type Server struct {
	Proxy *Proxy
	// Listen address, e.g. ":8088".
	Listen string
}

// NewFastHTTPServer returns the fasthttp server of a proxy, with a timeout on every
// phase and streamed request bodies.
func NewFastHTTPServer(p *Proxy) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:            p.ServeFastHTTP,
		Name:               "tenantroute",
		ReadTimeout:        60 * time.Second,
		WriteTimeout:       60 * time.Second,
		IdleTimeout:        120 * time.Second,
		ReadBufferSize:     16 << 10,
		MaxRequestBodySize: 64 << 20,
		StreamRequestBody:  true,
		// Header names are normalised (x-tenant-id -> X-Tenant-Id) so that the proxy's
		// Del and Set of forwarding, hop-by-hop and tenant headers match whatever case
		// a client used: a client must not be able to send its own X-Tenant-ID.
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		CloseOnShutdown:       true,
	}
}

// Start implements manager.Runnable: it serves until ctx is done, then drains.
func (s *Server) Start(ctx context.Context) error {
	srv := NewFastHTTPServer(s.Proxy)
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return err
	}
	errs := make(chan error, 1)
	go func() { errs <- srv.Serve(ln) }()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.ShutdownWithContext(shutdown)
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// unsafeString views bytes as a string for a call that does not keep it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// appendAll joins the values of a repeated header with ", ".
func appendAll(buf []byte, values [][]byte) []byte {
	for i, v := range values {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, v...)
	}
	return buf
}

func appendIP(buf []byte, ip net.IP) []byte {
	if addr, ok := netip.AddrFromSlice(ip); ok {
		return addr.Unmap().AppendTo(buf)
	}
	return append(buf, "unknown"...)
}

// isDialError reports a failure to connect to a backend at all.
func isDialError(err error) bool {
	var opErr *net.OpError
	return errors.Is(err, fasthttp.ErrDialTimeout) || (errors.As(err, &opErr) && opErr.Op == "dial")
}
