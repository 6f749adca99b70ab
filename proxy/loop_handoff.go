package proxy

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// Engines that serve the plain listener (Options.Engine).
const (
	// EngineFasthttp serves every connection on a goroutine of fasthttp's server.
	EngineFasthttp = "fasthttp"
	// EngineLoop serves plain HTTP on event loops (Linux only), handing what they do
	// not read to fasthttp's server; see loopEngine.
	EngineLoop = "loop"
)

// handoffListener is how the loop engine gives connections to the fasthttp server:
// its Accept returns them. Once it is closed (the drain), a connection handed over
// is served on a goroutine of its own, counted by the drain.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	p     *Proxy
	srv   *fasthttp.Server
	// mu orders push with Close: a connection queued is either accepted or, once
	// the listener closed, served on a goroutine of its own; none is left behind.
	mu     sync.Mutex
	closed bool
}

func newHandoffListener(p *Proxy, srv *fasthttp.Server, addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn, 1024), done: make(chan struct{}), p: p, srv: srv}
}

func (h *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoffListener) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	close(h.done)
	for {
		select {
		case c := <-h.conns:
			h.serveLate(c)
		default:
			return nil
		}
	}
}

func (h *handoffListener) Addr() net.Addr { return h.addr }

// push hands c to the server without blocking the loop.
func (h *handoffListener) push(c net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		select {
		case h.conns <- c:
			return
		default:
		}
	}
	h.serveLate(c)
}

// serveLate serves c on a goroutine of its own: the listener is closed, or its queue
// is full.
func (h *handoffListener) serveLate(c net.Conn) {
	h.p.handed.begin()
	go func() {
		defer h.p.handed.end()
		defer h.p.handed.take(c, nil)()
		_ = h.srv.ServeConn(c)
	}()
}

// prefixConn reads what the loop had read of a connection before the connection
// itself.
type prefixConn struct {
	*net.TCPConn
	pending []byte
}

func (c *prefixConn) Read(b []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(b, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.TCPConn.Read(b)
}

// begin counts a hand-over until end.
func (h *handedOver) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beginLocked()
}

// finishExchange reads a backend's answer that the loop engine did not, and writes it
// to the client, as serve and roundTrip do: a stream, a body too large to read
// whole, a chunked or close-delimited one, interim answers, and every header the
// loop does not read (fasthttp's reader refuses what must be refused: a 502). The
// backend connection is closed after. It reports whether the client connection may
// carry another request.
func (p *Proxy) finishExchange(client, backend net.Conn, unsent []byte, u *upstream, tenant string, route *CachedRoute,
	outcome Outcome, head, closeClient bool, start time.Time) bool {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	// As the server's own answers: no Content-Type the backend did not send. (Unlike
	// them, fasthttp's writer sets the Date of its clock: its switch for that is not
	// public.)
	resp.Header.SetNoDefaultContentType(true)
	released := false
	release := func(bool) {
		if !released {
			released = true
			_ = backend.Close()
			u.loopConns.Add(-1) // the loop engine's connection, counted until here
			u.give(tenant)
		}
	}
	defer release(false)
	if len(unsent) > 0 {
		// The request's end, which the loop had not sent yet when the answer began:
		// the backend may wait for it (after an interim answer) before it answers.
		_, _ = backend.Write(unsent)
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(backend)
	r, err := p.readResponseHead(br, resp, false)
	route.observeUpstream(time.Since(start))
	var streamed *upstreamBody
	if err == nil {
		_, streamed, err = p.readResponseBody(br, r, resp, head)
	} else {
		p.putReader(br, r)
	}
	if err != nil {
		status := fasthttp.StatusBadGateway
		if errors.Is(err, fasthttp.ErrTimeout) || isTimeout(err) {
			status = fasthttp.StatusGatewayTimeout
		}
		logBackendError(u.addr, err)
		resp.Reset()
		resp.SetStatusCode(status)
		resp.Header.SetContentType("text/plain; charset=utf-8")
		resp.Header.SetServer(serverName)
		resp.SetBodyString("the backend did not answer\n")
	} else {
		u.answered()
		stripHopByHop(&resp.Header)
		inHTTP11(&resp.Header)
		if len(resp.Header.Server()) == 0 {
			resp.Header.SetServer(serverName)
		}
		if streamed != nil {
			streamed.done = release
		}
	}
	if streamed == nil {
		// Read whole (or failed): the backend and the tenant's share go back before
		// a slow client reads the answer, as roundTrip gives them back.
		release(false)
	}
	if closeClient {
		resp.SetConnectionClose()
	}
	observeRequest(resp.StatusCode(), outcome)
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(client)
	if head {
		resp.SkipBody = true
	}
	err = resp.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	bw.Reset(nil)
	writers.Put(bw)
	return err == nil && !closeClient && !resp.ConnectionClose()
}
