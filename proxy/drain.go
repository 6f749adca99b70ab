package proxy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// A proxy that is told to stop drains: it fails its readiness, answers every request
// with Connection: close while it still accepts (Options.ShutdownDelay), then stops
// listening, lets what is in flight finish and closes each WebSocket tunnel with a
// close frame (1001, going away) to both its ends (Options.ShutdownTimeout). fasthttp
// waits for the requests and streams it serves; the connections it hands over
// (tunnels, HTTP/1.0 streams) are tracked here.

// StopNow makes the drain skip what is left of its delay (Options.ShutdownDelay): the
// listeners close at once, and only what is in flight is let finish. For a proxy
// whose routes stopped following their changes: the embedded proxy of a manager that
// lost its lease, whose caches stop with it, must not route new clients from them.
func (p *Proxy) StopNow() { p.stopNowOnce.Do(func() { close(p.stopNow) }) }

// Draining reports whether the proxy is shutting down: its readiness fails.
func (p *Proxy) Draining() bool { return p.draining.Load() }

// Ready says why the proxy should not be sent clients, or nil: it does not listen yet
// (the manager starts it only once its caches are in, seconds or minutes after its
// health endpoint answers), or it is shutting down.
func (p *Proxy) Ready() error {
	switch {
	case !p.serving.Load():
		return errors.New("the proxy does not listen yet")
	case p.draining.Load():
		return errors.New("the proxy is shutting down")
	}
	return nil
}

// handedOver tracks the connections fasthttp no longer sees.
type handedOver struct {
	mu sync.Mutex
	// n counts the hand-overs begun and not ended; ended is closed when n falls to 0.
	// (A WaitGroup would panic when a hand-over begins just as the last one ends while
	// wait waits: that is what a drain whose requests outlive its timeout does.)
	n       int
	ended   chan struct{}
	tunnels map[*tunnel]struct{}
	conns   map[net.Conn]struct{} // HTTP/1.0 streams
	away    bool                  // goAway was called: a tunnel opened since is closed at once
	cut     bool                  // wait timed out: a connection handed over since is closed
	// pending: what the hijack handler of each connection that asked for one would
	// release (see hijack); pendingN is its length, read without mu.
	pending  map[net.Conn]func()
	pendingN atomic.Int32
	// abandoned counts the hand-overs released by connState rather than by their
	// handler: the tests read it to know which of the two paths they took.
	abandoned atomic.Int64
}

// hijack hands ctx's connection to h, which is given what release frees (a backend
// connection) and frees it itself. fasthttp calls h only after it has sent what it
// held back for the requests pipelined before this one; when that send fails (the
// client went away) it closes the connection without calling h, and nothing else
// would free what h was given: connState runs release then.
//
// The hand-over is counted from here, while fasthttp still counts the connection as
// served: fasthttp stops counting it before h starts, and a shutdown that waited
// for fasthttp and then for the connections h counted could end between the two.
func (p *Proxy) hijack(ctx *fasthttp.RequestCtx, release func(), h fasthttp.HijackHandler) {
	hs := &p.handed
	hs.mu.Lock()
	if hs.pending == nil {
		hs.pending = map[net.Conn]func(){}
	}
	hs.pending[ctx.Conn()] = release
	hs.pendingN.Store(int32(len(hs.pending)))
	hs.beginLocked()
	hs.mu.Unlock()
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) {
		defer hs.end()
		h(c)
	})
}

// beginLocked counts a hand-over until end; h.mu is held.
func (h *handedOver) beginLocked() {
	if h.n == 0 {
		h.ended = make(chan struct{})
	}
	h.n++
}

func (h *handedOver) end() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n--; h.n == 0 {
		close(h.ended)
	}
}

// idle returns a channel closed once no hand-over is left.
func (h *handedOver) idle() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		done := make(chan struct{})
		close(done)
		return done
	}
	return h.ended
}

// connState is the server's ConnState hook: a connection that asked for a hijack
// ends either handed over (its handler runs and releases) or closed (release runs
// here). Every other change of state, twice per request, costs two comparisons.
func (h *handedOver) connState(c net.Conn, state fasthttp.ConnState) {
	if (state != fasthttp.StateClosed && state != fasthttp.StateHijacked) || h.pendingN.Load() == 0 {
		return
	}
	h.mu.Lock()
	release, ok := h.pending[c]
	delete(h.pending, c)
	h.pendingN.Store(int32(len(h.pending)))
	h.mu.Unlock()
	if ok && state == fasthttp.StateClosed {
		release()
		h.abandoned.Add(1)
		h.end()
	}
}

// take tracks a handed-over connection, for goAway and for what wait closes at its
// timeout, until the returned func is called. (hijack counts it.)
func (h *handedOver) take(c net.Conn, t *tunnel) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cut {
		closeConn(c)
		if t != nil {
			_ = t.backend.Close()
		}
	}
	if t != nil {
		if h.tunnels == nil {
			h.tunnels = map[*tunnel]struct{}{}
		}
		h.tunnels[t] = struct{}{}
		if h.away {
			go t.goAway()
		}
	} else {
		if h.conns == nil {
			h.conns = map[net.Conn]struct{}{}
		}
		h.conns[c] = struct{}{}
	}
	return func() {
		if t != nil {
			t.end()
		}
		h.mu.Lock()
		delete(h.tunnels, t)
		delete(h.conns, c)
		h.mu.Unlock()
	}
}

// goAway sends every tunnel's ends a close frame, each at its next frame boundary.
func (h *handedOver) goAway() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.away = true
	for t := range h.tunnels {
		go t.goAway()
	}
}

// wait waits for every handed-over connection to end, or for ctx, after which it
// closes those left.
func (h *handedOver) wait(ctx context.Context) {
	select {
	case <-h.idle():
		return
	case <-ctx.Done():
	}
	h.mu.Lock()
	h.cut = true
	for t := range h.tunnels {
		closeConn(t.client)
		_ = t.backend.Close()
	}
	for c := range h.conns {
		closeConn(c)
	}
	h.mu.Unlock()
	<-h.idle()
}

// closeConn closes c. A connection fasthttp handed over is closed through to its
// socket: the Close of fasthttp's wrapper does nothing until the handler returns.
func closeConn(c net.Conn) {
	if u, ok := c.(interface{ UnsafeConn() net.Conn }); ok {
		c = u.UnsafeConn()
	}
	_ = c.Close()
}

// tunnel is a WebSocket connection passing through: client to backend and back.
type tunnel struct {
	client, backend net.Conn
	up, down        direction // client to backend (masked frames), backend to client
}

func newTunnel(client, backend net.Conn) *tunnel {
	return &tunnel{client: client, backend: backend,
		up: direction{dst: backend, masked: true}, down: direction{dst: client}}
}

// end stops every write to the tunnel's ends, before its handler returns: fasthttp
// then puts the client connection's wrapper back in its pool, and a close frame that
// a drain's goAway, started a moment before, wrote later would go to a nil connection
// (a panic) or to the connection the wrapper holds next.
func (t *tunnel) end() {
	for _, d := range []*direction{&t.up, &t.down} {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
	}
}

func (t *tunnel) goAway() {
	t.down.goAway()
	t.up.goAway()
}

// direction is one way through a tunnel. Its writes and its frame boundaries are
// kept under mu, so that a close frame is only ever put between two frames.
type direction struct {
	mu     sync.Mutex
	dst    net.Conn
	masked bool // frames to dst are masked (RFC 6455 5.3): toward the backend
	frames frameBoundaries
	// wantClose: a close frame goes to dst at the next boundary; closed: one went (the
	// proxy's, or the sender's own), after which nothing more is forwarded.
	wantClose, closed bool
}

// forward writes what src sent to dst, up to a close frame of the proxy's when one is
// wanted; it reports false once nothing more is forwarded.
func (d *direction) forward(data []byte) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false, nil
	}
	if d.wantClose {
		cut := d.frames.boundaryIn(data)
		if cut < 0 { // still inside a frame: it passes whole
			_, err := d.dst.Write(data)
			return true, err
		}
		if _, err := d.dst.Write(data[:cut]); err != nil {
			return false, err
		}
		return false, d.sendClose()
	}
	if d.frames.advance(data) {
		d.closed = true // the sender's own close frame went through
	}
	_, err := d.dst.Write(data)
	return !d.closed, err
}

func (d *direction) goAway() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if d.frames.atBoundary() {
		_ = d.sendClose()
		return
	}
	d.wantClose = true
}

// sendClose writes a close frame with status 1001 (going away); d.mu is held.
func (d *direction) sendClose() error {
	d.closed = true
	frame := []byte{0x88, 0x02, 0x03, 0xe9} // FIN, close; 2 bytes; 1001
	if d.masked {
		var key [4]byte
		_, _ = rand.Read(key[:])
		frame = []byte{0x88, 0x82, key[0], key[1], key[2], key[3], 0x03 ^ key[0], 0xe9 ^ key[1]}
	}
	_, err := d.dst.Write(frame)
	return err
}

// frameBoundaries follows a WebSocket stream's frames (RFC 6455 5.2) as its bytes
// pass, without holding them: only where each frame ends. A stream that is not made
// of frames (a hostile client) never reaches a boundary, and its tunnel is closed
// without a close frame when the drain times out.
type frameBoundaries struct {
	head   [14]byte // the header being read: 2 bytes, a 2 or 8 byte length, a 4 byte mask
	have   int      // its bytes read so far
	left   uint64   // payload bytes of the current frame still to pass
	closer bool     // the current frame is a close frame
}

func (f *frameBoundaries) atBoundary() bool { return f.have == 0 && f.left == 0 }

// headerLen is the length of the header being read, once its first 2 bytes are in.
func (f *frameBoundaries) headerLen() int {
	n := 2
	switch f.head[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if f.head[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// step passes one frame's worth of b at most and returns how much it took, and
// whether a close frame just ended.
func (f *frameBoundaries) step(b []byte) (int, bool) {
	if f.left > 0 {
		n := uint64(len(b))
		if n > f.left {
			n = f.left
		}
		f.left -= n
		return int(n), f.left == 0 && f.closer
	}
	n := 0
	for n < len(b) {
		f.head[f.have] = b[n]
		f.have++
		n++
		if f.have < 2 || f.have < f.headerLen() {
			continue
		}
		switch l := f.head[1] & 0x7f; l {
		case 126:
			f.left = uint64(binary.BigEndian.Uint16(f.head[2:4]))
		case 127:
			f.left = binary.BigEndian.Uint64(f.head[2:10])
		default:
			f.left = uint64(l)
		}
		f.closer = f.head[0]&0x0f == 0x8
		f.have = 0
		return n, f.left == 0 && f.closer
	}
	return n, false
}

// advance passes b and reports whether a close frame ended in it.
func (f *frameBoundaries) advance(b []byte) bool {
	closed := false
	for len(b) > 0 {
		n, c := f.step(b)
		closed = closed || c
		b = b[n:]
	}
	return closed
}

// boundaryIn passes b up to its first frame boundary and returns its offset, or -1
// (having passed all of b) when there is none.
func (f *frameBoundaries) boundaryIn(b []byte) int {
	off := 0
	for {
		if f.atBoundary() {
			return off
		}
		if off == len(b) {
			return -1
		}
		n, _ := f.step(b[off:])
		off += n
	}
}
