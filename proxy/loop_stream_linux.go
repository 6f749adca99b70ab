//go:build linux

package proxy

import (
	"time"

	"golang.org/x/sys/unix"
)

// An answer whose body is not read whole (larger than smallBody, chunked, or
// delimited by the backend's close) passes as it comes: its header at once, then each
// read of the backend as one write to the client. A client that reads slower than the
// backend sends holds the backend back (its reads stop until the client took what was
// written), so a loop holds one read of each stream at most.

// How a streamed body is framed.
const (
	streamLength  = iota + 1 // Content-Length
	streamChunked            // chunked, framed again (chunks)
	streamClose              // until the backend closes; chunked to the client
)

// startStream writes the answer's header and what came of its body with it.
func (l *loop) startStream(c, b *lconn, r *loopResponse, end int) {
	ex := &c.ex
	switch {
	case r.length >= 0:
		ex.mode, ex.left = streamLength, r.length
	case r.chunked:
		ex.mode, ex.chunks = streamChunked, chunks{line: ex.chunks.line[:0]}
	default:
		ex.mode = streamClose
	}
	ex.keepBackend = r.keep && ex.mode != streamClose
	l.tally.upstreamTime(ex.route, time.Duration(l.now-ex.start.UnixNano()))
	b.u.answered()
	l.tally.answer(r.status, ex.outcome)
	closeClient := ex.close || l.stopping || l.p.draining.Load()
	out := appendClientResponse(l.out[:0], r, closeClient, ex.mode == streamClose)
	l.beginAnswer(c, closeClient)
	c.streaming = true
	body := b.in[end:]
	b.in, b.headerEnd = emptied(b.in), 0 // the body is not kept: it passes
	l.pass(c, b, out, body)
}

// pass writes out and the part of data that is the body's to the client.
func (l *loop) pass(c, b *lconn, out, data []byte) {
	ex := &c.ex
	done, extra := false, false
	switch ex.mode {
	case streamLength:
		n := min(int64(len(data)), ex.left)
		out = append(out, data[:n]...)
		ex.left -= n
		done, extra = ex.left == 0, int64(len(data)) > n
	case streamChunked:
		var took int
		var err error
		if out, took, err = ex.chunks.feed(out, data); err != nil {
			l.out = out[:0]
			logBackendError(b.u.addr, err)
			l.closeClient(c) // the header is out: the client sees the body cut short
			return
		}
		done, extra = ex.chunks.done(), took < len(data)
	case streamClose:
		out = appendChunk(out, data)
	}
	l.out = out[:0]
	if err := l.write(c, out); err != nil {
		l.closeClient(c)
		return
	}
	if done {
		l.releaseBackend(b, ex.keepBackend && !extra)
		l.endAnswer(c)
		return
	}
	if len(c.out) > 0 {
		// The client is slower than the backend: the backend waits for it, with no
		// deadline of its own meanwhile; the client has ClientWriteTimeout. Edge-
		// triggered meanwhile: a reset is reported once, not at every round, and read
		// when the client took what was written (what came before it may end the
		// body).
		l.interest(b, b.events&^unix.EPOLLIN|unix.EPOLLET)
		b.deadline = 0
		c.deadline = l.now + int64(l.p.opts.ClientWriteTimeout)
	}
}

// resume reads the backend of a stream again once its client took what was written.
func (l *loop) resume(c *lconn) {
	if b := c.peer; b != nil && !b.closed {
		l.interest(b, (b.events|unix.EPOLLIN)&^unix.EPOLLET)
		b.deadline = l.now + int64(l.p.opts.UpstreamTimeout)
	}
	c.deadline = 0
}

// streamEnded: the backend's connection ended (or failed, or timed out) during a
// stream. A body delimited by the close is whole; any other is cut short, and so is
// the client's connection: its header said more would come.
func (l *loop) streamEnded(c, b *lconn, err error) {
	if c.ex.mode == streamClose && err == errBackendClosed {
		l.closeBackend(b)
		if err := l.write(c, append(l.out[:0], "0\r\n\r\n"...)); err != nil {
			l.closeClient(c)
			return
		}
		l.endAnswer(c)
		return
	}
	logBackendError(b.u.addr, err)
	l.closeClient(c)
}
