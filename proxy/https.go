package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Certificates is what the proxy needs of its certificate work (proxy/certs
// implements it): a certificate for each TLS handshake, the answer to an ACME
// HTTP-01 challenge, and whether a hostname can be served over HTTPS now.
type Certificates interface {
	// TLSConfig is the TLS listener's configuration, certificate selection included.
	TLSConfig() *tls.Config
	// HTTPChallenge answers a plain-HTTP ACME challenge; ok is false when path is
	// not one being solved.
	HTTPChallenge(ctx context.Context, host, path string) (status int, body []byte, ok bool)
	// CanServe reports whether a handshake for host finds a certificate now.
	CanServe(host string) bool
	// Listening says where the proxy listens, so that challenges are answered there.
	Listening(plain, secure net.Addr)
	// Run keeps the certificates current until ctx ends.
	Run(ctx context.Context)
}

// TLSOptions configure the proxy's HTTPS listener.
type TLSOptions struct {
	// Listen is the HTTPS listener's address, e.g. ":8443".
	Listen string
	// Certificates chooses each handshake's certificate.
	Certificates Certificates
	// HandshakeTimeout bounds a TLS handshake, the wait for a certificate ordered on
	// demand included (an ACME validation takes seconds; a failed order is not
	// retried within the handshake).
	HandshakeTimeout time.Duration
	// RedirectPort: plain-HTTP requests for a hostname the proxy holds a certificate
	// for are redirected to HTTPS on this port (443 is left out of the URL); ACME
	// challenges never are. 0 turns the redirect off.
	RedirectPort int
}

// DefaultHandshakeTimeout is TLSOptions.HandshakeTimeout's default.
const DefaultHandshakeTimeout = 30 * time.Second

// EnableTLS adds the HTTPS listener; Server serves it.
func (p *Proxy) EnableTLS(opts TLSOptions) error {
	if opts.Certificates == nil {
		return errors.New("HTTPS needs certificates")
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	p.tls = &opts
	return nil
}

// redirectTarget is where a plain request for host (normalised: a DNS name, no port)
// goes over HTTPS.
func (o *TLSOptions) redirectTarget(buf []byte, host, requestURI []byte) []byte {
	buf = append(buf, "https://"...)
	buf = append(buf, host...)
	if o.RedirectPort != 443 {
		buf = append(buf, ':')
		buf = strconv.AppendInt(buf, int64(o.RedirectPort), 10)
	}
	return append(buf, requestURI...)
}

// tlsListener makes each accepted connection a TLS server whose handshake is bounded
// by a context, not only by socket deadlines: a certificate obtained on demand is
// waited for inside the handshake (GetCertificate), where no read deadline reaches,
// and the ACME library retries a failed order for minutes unless the handshake's
// context ends. With it, a handshake waits at most timeout, then fails and frees its
// goroutine.
//
// The ClientHello itself must come within hello (the client header timeout, as a
// plain request's header must): the longer timeout is for the certificate, and a
// client that opens a connection and sends nothing would otherwise hold one of
// --max-conns, shared with plain HTTP, three times as long as over plain HTTP.
type tlsListener struct {
	net.Listener
	config         *tls.Config
	hello, timeout time.Duration
}

func newTLSListener(ln net.Listener, config *tls.Config, hello, timeout time.Duration) *tlsListener {
	config = config.Clone()
	next := config.GetConfigForClient
	config.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		// The ClientHello is in: the certificate and the rest of the handshake get
		// what is left of the handshake's time. h.Conn is the connection under the
		// TLS one.
		if d, ok := h.Context().Deadline(); ok {
			_ = h.Conn.SetReadDeadline(d)
		}
		if next != nil {
			return next(h)
		}
		return nil, nil
	}
	return &tlsListener{Listener: ln, config: config, hello: min(hello, timeout), timeout: timeout}
}

func (l *tlsListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: tls.Server(c, l.config), hello: l.hello, timeout: l.timeout}, nil
}

// handshakeConn runs the handshake with its deadline on first use. It embeds
// *tls.Conn, so fasthttp sees a TLS connection (ConnectionState) and tunnels can
// half-close it.
type handshakeConn struct {
	*tls.Conn
	hello, timeout time.Duration
	done           atomic.Bool
}

func (c *handshakeConn) handshake() error {
	if c.done.Load() {
		return nil
	}
	// fasthttp set its header timeout as the read deadline; the ClientHello gets the
	// same, and the rest of the handshake (an order on demand included) its own,
	// longer one, from the ClientHello on (GetConfigForClient). fasthttp sets the
	// deadline of each request afterwards.
	_ = c.SetReadDeadline(time.Now().Add(c.hello))
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
