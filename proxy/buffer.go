package proxy

import (
	"bytes"
	"errors"
	"io"
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
func (p *Proxy) bufferBody(req *fasthttp.Request, body *clientBody) (release func(), err error) {
	n := req.Header.ContentLength()
	if n <= preRead || n > p.opts.RequestBufferBytes || !p.buffers.take(n) {
		return nil, nil
	}
	held := bytes.NewReader(nil)
	release = func() { held.Reset(nil); p.buffers.give(n) }
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
// than it either.
type bufferBudget struct {
	limit int64
	used  atomic.Int64
}

func (b *bufferBudget) take(n int) bool {
	for {
		used := b.used.Load()
		if used+int64(n) > b.limit {
			requestBufferFull.Inc()
			return false
		}
		if b.used.CompareAndSwap(used, used+int64(n)) {
			requestBuffered.Add(float64(n))
			return true
		}
	}
}

func (b *bufferBudget) give(n int) {
	b.used.Add(-int64(n))
	requestBuffered.Sub(float64(n))
}
