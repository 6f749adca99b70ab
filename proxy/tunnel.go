package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// isWebSocket reports a WebSocket opening handshake (RFC 6455 4.1): a GET without a
// body, with Upgrade: websocket, an upgrade token in Connection, a key and version
// 13. Anything else is an ordinary request, and its Upgrade header is dropped as
// hop-by-hop.
func isWebSocket(h *fasthttp.RequestHeader) bool {
	return h.IsGet() && !hasBody(h) &&
		bytes.EqualFold(h.Peek("Upgrade"), []byte("websocket")) &&
		hasToken(h.Peek("Connection"), "upgrade") &&
		len(h.Peek("Sec-Websocket-Key")) > 0 &&
		bytes.Equal(h.Peek("Sec-Websocket-Version"), []byte("13"))
}

func hasToken(list []byte, token string) bool {
	for len(list) > 0 {
		item := list
		if i := bytes.IndexByte(list, ','); i >= 0 {
			item, list = list[:i], list[i+1:]
		} else {
			list = nil
		}
		if bytes.EqualFold(bytes.TrimSpace(item), []byte(token)) {
			return true
		}
	}
	return false
}

// tunnel passes a WebSocket handshake to a backend on a connection of its own. Only
// when the backend answers 101 Switching Protocols does the client's connection
// become a tunnel; any other answer is relayed as an ordinary response and the
// connection keeps HTTP framing, so a client can never reach a backend with bytes
// the proxy did not read as a request.
func (p *Proxy) tunnel(ctx *fasthttp.RequestCtx, route *CachedRoute, outcome Outcome) {
	u := p.pick(route, nil)
	if u == nil {
		ctx.Response.Header.Set(fasthttp.HeaderRetryAfter, p.retryAfter)
		p.refuse(ctx, fasthttp.StatusServiceUnavailable, outcome, "no backend of region "+route.Region+" is available\n")
		return
	}
	p.prepare(ctx, route)
	ctx.Request.Header.Set("Upgrade", "websocket")
	ctx.Request.Header.Set("Connection", "Upgrade")
	backend, err := u.dial()
	if err != nil {
		u.coolDown()
		logBackendError(u.addr, err)
		p.refuse(ctx, fasthttp.StatusBadGateway, outcome, "the backend did not answer\n")
		return
	}
	bw := bufio.NewWriterSize(backend, 4096)
	if err = ctx.Request.Write(bw); err == nil {
		err = bw.Flush()
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(backend)
	var r *bufio.Reader
	if err == nil {
		r, err = p.readResponseHead(br, &ctx.Response, true)
	}
	if err != nil {
		if r != nil {
			p.putReader(br, r)
		}
		backend.Close()
		logBackendError(u.addr, err)
		ctx.Response.Reset()
		p.refuse(ctx, fasthttp.StatusBadGateway, outcome, "the backend did not answer\n")
		return
	}
	if ctx.Response.StatusCode() != fasthttp.StatusSwitchingProtocols {
		// Refused: an ordinary response on a connection of its own.
		_, streamed, err := p.readResponseBody(br, r, &ctx.Response, false)
		if streamed != nil {
			streamed.done = func(bool) { backend.Close() }
		} else {
			backend.Close()
		}
		if err != nil {
			ctx.Response.Reset()
			p.refuse(ctx, fasthttp.StatusBadGateway, outcome, "the backend did not answer\n")
			return
		}
		stripHopByHop(&ctx.Response.Header)
		observeRequest(ctx.Response.StatusCode(), outcome)
		return
	}
	if !bytes.EqualFold(ctx.Response.Header.Peek("Upgrade"), []byte("websocket")) {
		p.putReader(br, r)
		backend.Close()
		logBackendError(u.addr, errors.New("the backend switched to another protocol than WebSocket"))
		ctx.Response.Reset()
		p.refuse(ctx, fasthttp.StatusBadGateway, outcome, "the backend did not answer\n")
		return
	}
	// Switched: what the backend sent after its 101 is already the tunnel's.
	head := append([]byte(nil), ctx.Response.Header.Header()...)
	pending := make([]byte, r.Buffered())
	_, _ = io.ReadFull(r, pending)
	p.putReader(br, r)
	observeRequest(fasthttp.StatusSwitchingProtocols, outcome)
	idle := p.opts.TunnelIdleTimeout
	p.hijack(ctx, func() { _ = backend.Close() }, func(client net.Conn) {
		defer backend.Close()
		_ = client.SetWriteDeadline(time.Now().Add(idle))
		if _, err := client.Write(head); err != nil {
			return
		}
		t := newTunnel(client, backend)
		defer p.handed.take(client, t)()
		// What the backend sent after its 101 is the tunnel's first frames.
		if len(pending) > 0 {
			if _, err := t.down.forward(pending); err != nil {
				return
			}
		}
		pipe(t, idle)
	})
}

// pipe copies both ways until either side ends or neither has sent anything for
// idle; once one direction ends, the other gets a few seconds to finish. After a
// close frame went one way (a peer's own, or the proxy's when it drains), what comes
// that way is read and dropped until the sender closes.
func pipe(t *tunnel, idle time.Duration) {
	client, backend := t.client, t.backend
	var last atomic.Int64
	var ending atomic.Bool // one direction ended: the other only finishes
	last.Store(time.Now().UnixNano())
	done := make(chan bool, 2) // true: ended because the tunnel was idle
	copyOneWay := func(d *direction, src net.Conn) {
		idleEnd := false
		defer func() { closeWrite(d.dst); done <- idleEnd }()
		buf := make([]byte, 32<<10)
		for {
			if !ending.Load() {
				_ = src.SetReadDeadline(time.Now().Add(idle))
			}
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				_ = d.dst.SetWriteDeadline(time.Now().Add(idle))
				if _, werr := d.forward(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				// This direction was quiet; the tunnel is idle only if the other was too.
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() && !ending.Load() {
					if time.Since(time.Unix(0, last.Load())) < idle {
						continue
					}
					idleEnd = true
				}
				return
			}
		}
	}
	go copyOneWay(&t.up, client)
	go copyOneWay(&t.down, backend)
	deadline := time.Now().Add(5 * time.Second)
	if <-done {
		deadline = time.Now() // idle: both directions end now
	}
	ending.Store(true)
	_ = client.SetDeadline(deadline)
	_ = backend.SetDeadline(deadline)
	<-done
}

// closeWrite tells the peer that nothing more comes (TCP FIN), through the wrappers
// of hijacked and idle-limited connections; a connection that cannot half-close is
// closed.
func closeWrite(c net.Conn) {
	switch w := c.(type) {
	case interface{ CloseWrite() error }:
		_ = w.CloseWrite()
	case *idleConn:
		closeWrite(w.Conn)
	case interface{ UnsafeConn() net.Conn }: // fasthttp's hijacked connection
		closeWrite(w.UnsafeConn())
	default:
		_ = c.Close()
	}
}
