package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"sync/atomic"
	"time"
)

// tlsListener makes each accepted connection a TLS server whose handshake is bounded
// by a context, not only by socket deadlines: a certificate obtained on demand is
// waited for inside the handshake (GetCertificate), where no read deadline reaches,
// and the ACME library retries a failed order for minutes unless the handshake's
// context ends. With it, a handshake waits at most timeout, then fails and frees its
// goroutine.
type tlsListener struct {
	net.Listener
	config  *tls.Config
	timeout time.Duration
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, l.config), timeout: l.timeout}, nil
}

// handshakeConn runs the handshake with its deadline on first use. It embeds
// *tls.Conn, so fasthttp sees a TLS connection (ConnectionState) and tunnels can
// half-close it.
type handshakeConn struct {
	*tls.Conn
	timeout time.Duration
	done    atomic.Bool
}

func (c *handshakeConn) handshake() error {
	if c.done.Load() {
		return nil
	}
	// fasthttp set its header timeout as the read deadline; the handshake (an order on
	// demand included) has its own, longer one. fasthttp sets the deadline of each
	// request afterwards.
	_ = c.SetReadDeadline(time.Now().Add(c.timeout))
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if err := c.HandshakeContext(ctx); err != nil {
		return err
	}
	c.done.Store(true)
	return nil
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *handshakeConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Handshake is what fasthttp calls first on a TLS connection.
func (c *handshakeConn) Handshake() error { return c.handshake() }
