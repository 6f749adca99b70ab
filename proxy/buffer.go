package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// preRead is how much of a body fasthttp's server reads before it calls the handler
// (min(Content-Length, 8 KiB), in readBodyWithStreaming): a body that size or smaller
// is whole already, and copying it again would buy nothing.
const preRead = 8 << 10

// bufferBody reads a body of a declared length above preRead and up to
// RequestBufferBytes whole, within the budget, through body (which keeps the
// client's failures apart), and gives it to the request. The backend connection is
// taken once the body is in, so a client that sends it slowly holds its own
// connection only: streamed, a request that needs one of a backend's pool would wait
// behind every slow upload holding one (nginx buffers bodies for the same reason).
// release, nil when the body streams, lets the bytes go with their share of the
// budget: not when the request is reset, which a streamed answer puts off.
func (p *Proxy) bufferBody(ctx *fasthttp.RequestCtx, body *clientBody) (release func(), err error) {
	req := &ctx.Request
	n := req.Header.ContentLength()
	if n <= preRead || n > p.opts.RequestBufferBytes {
		return nil, nil
	}
	addr, _ := p.opts.clientKey(remoteIP(ctx)) // a trusted proxy's: none, no share of its own
	if !p.buffers.take(n, addr) {
		return nil, nil
	}
	held := bytes.NewReader(nil)
	release = func() { held.Reset(nil); p.buffers.give(n, addr) }
	buf := make([]byte, n)
	if _, err := io.ReadFull(body, buf); err != nil {
		var clientErr *clientBodyError
		if !errors.As(err, &clientErr) {
			err = &clientBodyError{err} // the client closed before the declared end
		}
		return release, err
	}
	// The stream's end, so that the body counts as read to it (no trailers: a body
	// of declared length has none).
	if _, err := body.Read(make([]byte, 1)); err != io.EOF {
		return release, &clientBodyError{errors.New("the body did not end at its declared length")}
	}
	held.Reset(buf)
	req.SetBodyStream(held, n)
	return release, nil
}

// bufferBudget bounds the bytes of request bodies held at once; a body that does not
// fit streams as it comes. The budget is taken for the declared length before a
// byte is read, so that clients declaring bodies they never send cannot hold more
// than it either. One client address holds at most share of it: declaring bodies
// and trickling them, a few addresses at their --max-conns-per-ip could otherwise
// spend it all, and every client's bodies would stream.
type bufferBudget struct {
	limit, share int64
	used         atomic.Int64
	mu           sync.Mutex
	byAddr       map[netip.Addr]int64 // what each address holds; only bodies past preRead come here
}

// addrShares: an address may hold 1/addrShares of the budget, and one body at least.
const addrShares = 16

func newBufferBudget(limit, body int) *bufferBudget {
	return &bufferBudget{limit: int64(limit), share: max(int64(limit)/addrShares, int64(body)), byAddr: map[netip.Addr]int64{}}
}

// take counts n bytes held for addr (the zero Addr: no share of its own), or reports
// that they do not fit.
func (b *bufferBudget) take(n int, addr netip.Addr) bool {
	if addr.IsValid() && !b.takeShare(int64(n), addr) {
		requestBufferFull.Inc()
		return false
	}
	for {
		used := b.used.Load()
		if used+int64(n) > b.limit {
			if addr.IsValid() {
				b.giveShare(int64(n), addr)
			}
			requestBufferFull.Inc()
			return false
		}
		if b.used.CompareAndSwap(used, used+int64(n)) {
			requestBuffered.Add(float64(n))
			return true
		}
	}
}

func (b *bufferBudget) give(n int, addr netip.Addr) {
	if addr.IsValid() {
		b.giveShare(int64(n), addr)
	}
	b.used.Add(-int64(n))
	requestBuffered.Sub(float64(n))
}

func (b *bufferBudget) takeShare(n int64, addr netip.Addr) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byAddr[addr]+n > b.share {
		return false
	}
	b.byAddr[addr] += n
	return true
}

func (b *bufferBudget) giveShare(n int64, addr netip.Addr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byAddr[addr] -= n; b.byAddr[addr] <= 0 {
		delete(b.byAddr, addr)
	}
}
