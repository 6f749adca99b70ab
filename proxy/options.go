package proxy

import (
	"net/netip"
	"time"
)

// Options tune the proxy. Every limit has a default that suits a proxy facing the
// internet behind a CDN; docs/proxy.md lists them with their flags.
type Options struct {
	// UpstreamTimeout bounds each wait on a backend: connecting aside, the time
	// between two reads (the response header included) or two writes. Streams of any
	// length pass while the backend keeps sending; a backend that stalls is cut.
	UpstreamTimeout time.Duration
	// DialTimeout bounds connecting to a backend (TLS handshake included).
	DialTimeout time.Duration
	// UpstreamIdleConnTimeout retires a pooled backend connection unused this long,
	// below the idle timeouts backends commonly use (gunicorn 2 s, Node 5 s), so the
	// proxy rarely picks a connection its backend is closing. A connection the backend
	// already closed is noticed before reuse whatever this is.
	UpstreamIdleConnTimeout time.Duration
	// MaxConnsPerBackend sizes each backend's keep-alive pool.
	MaxConnsPerBackend int
	// MaxConnsPerTenant is how many of one backend's pooled connections the requests
	// of one tenant may hold at once (default: half of MaxConnsPerBackend, rounded up).
	// A region's backends serve all its tenants: without a share, one tenant's slow
	// requests or streams (an attack on its site, its own slow endpoint) would take
	// the whole pool and the region's other tenants would get 503s. Past it, the
	// tenant's requests go to another backend of the region, or get 503 at once. Half,
	// not less: above MaxConnsPerIP's default, so that one client address cannot take
	// a site's whole share and shut its other visitors out.
	MaxConnsPerTenant int
	// MaxResponseHeaderBytes bounds a backend's response header; a larger one is a
	// 502 for the client.
	MaxResponseHeaderBytes int
	// BackendCooldown is how long a backend that could not be reached is skipped.
	BackendCooldown time.Duration
	// RetryAfter is sent with 503 answers.
	RetryAfter time.Duration

	// MaxRequestBodyBytes bounds a request body, whatever its method and framing;
	// past it the client gets 413 and the connection is closed.
	MaxRequestBodyBytes int
	// RequestBufferBytes: a body of a declared length up to this is read whole before
	// a backend connection is taken, so that a client sending it slowly holds a
	// connection of its own only, not one of the backend's pool (negative: never).
	// Larger bodies, chunked ones, and any body past RequestBufferMemoryBytes (the
	// bodies held at once, in all; one client address holds a sixteenth of it, one
	// body at least, and a trusted proxy is not held to that) stream as they come.
	RequestBufferBytes       int
	RequestBufferMemoryBytes int
	// MaxRequestHeaderBytes bounds a request's line and header (431 past it).
	MaxRequestHeaderBytes int
	// ClientHeaderTimeout bounds receiving a request's header from its first byte
	// (and a new connection's first request): slow-header clients are cut.
	ClientHeaderTimeout time.Duration
	// ClientIdleTimeout bounds the wait for the next request on a kept-alive
	// connection.
	ClientIdleTimeout time.Duration
	// ClientReadTimeout and ClientWriteTimeout bound the time between two reads of a
	// request body and between two writes of a response: a stalled client is cut, a
	// long stream is not.
	ClientReadTimeout  time.Duration
	ClientWriteTimeout time.Duration
	// TunnelIdleTimeout closes a WebSocket tunnel in which neither side sent
	// anything for this long.
	TunnelIdleTimeout time.Duration
	// MaxConns bounds the proxy's client connections; MaxConnsPerIP those of one
	// client address (trusted proxies are exempt: a CDN carries many users over few
	// addresses). Connections past a limit are answered 503 or 429 and closed.
	MaxConns      int
	MaxConnsPerIP int
	// IPv6ClientPrefix is how much of an IPv6 address names one client for the limits
	// of one address (MaxConnsPerIP, the request buffer's share): a host or a
	// subscriber is given a /64 and can send from any address in it. 128 counts every
	// address apart, for networks whose /64 holds many clients (a Kubernetes node's
	// IPv6 pods calling the proxy directly). Addresses that carry an IPv4 client
	// (NAT64's 64:ff9b::/96 and 64:ff9b:1::/48, Teredo's 2001::/32) count apart always.
	IPv6ClientPrefix int
	// TrustedProxies are the peers whose forwarding headers (X-Forwarded-*,
	// Forwarded, X-Real-IP, True-Client-IP, CF-Connecting-IP and the like) are kept
	// and extended; anyone else's are replaced or dropped.
	TrustedProxies []netip.Prefix
	// ShutdownDelay: once the proxy is told to stop, it keeps accepting connections
	// this long, answering with Connection: close and failing its readiness, so that
	// load balancers and Service endpoints stop sending it clients before it stops
	// listening (0: no delay). ShutdownTimeout then bounds how long requests, streams
	// and WebSocket tunnels in flight may take to finish.
	ShutdownDelay   time.Duration
	ShutdownTimeout time.Duration
	// Engine serves the plain listener: EngineLoop or EngineFasthttp (empty: fasthttp;
	// cmd/'s flag defaults to DefaultEngine). The loop engine serves only a proxy
	// without HTTPS; with HTTPS on, every listener is fasthttp's.
	Engine string
}

// Defaults of the options; cmd/ uses them for its flags.
const (
	DefaultUpstreamTimeout          = 60 * time.Second
	DefaultDialTimeout              = 3 * time.Second
	DefaultUpstreamIdleConnTimeout  = time.Second
	DefaultMaxConnsPerBackend       = 1024
	DefaultMaxResponseHeaderBytes   = 64 << 10
	DefaultMaxRequestBodyBytes      = 64 << 20
	DefaultRequestBufferBytes       = 64 << 10
	DefaultRequestBufferMemoryBytes = 64 << 20
	DefaultMaxRequestHeaderBytes    = 16 << 10
	DefaultClientHeaderTimeout      = 10 * time.Second
	DefaultClientIdleTimeout        = 120 * time.Second
	DefaultClientReadTimeout        = 60 * time.Second
	DefaultClientWriteTimeout       = 60 * time.Second
	DefaultTunnelIdleTimeout        = 10 * time.Minute
	DefaultMaxConns                 = 10000
	DefaultMaxConnsPerIP            = 256
	DefaultIPv6ClientPrefix         = 64
	DefaultShutdownDelay            = 5 * time.Second
	DefaultShutdownTimeout          = 30 * time.Second
)

func (o *Options) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	setInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	set(&o.UpstreamTimeout, DefaultUpstreamTimeout)
	set(&o.DialTimeout, DefaultDialTimeout)
	set(&o.UpstreamIdleConnTimeout, DefaultUpstreamIdleConnTimeout)
	set(&o.BackendCooldown, 10*time.Second)
	set(&o.RetryAfter, 5*time.Second)
	set(&o.ClientHeaderTimeout, DefaultClientHeaderTimeout)
	set(&o.ClientIdleTimeout, DefaultClientIdleTimeout)
	set(&o.ClientReadTimeout, DefaultClientReadTimeout)
	set(&o.ClientWriteTimeout, DefaultClientWriteTimeout)
	set(&o.TunnelIdleTimeout, DefaultTunnelIdleTimeout)
	set(&o.ShutdownTimeout, DefaultShutdownTimeout)
	setInt(&o.MaxConnsPerBackend, DefaultMaxConnsPerBackend)
	setInt(&o.MaxConnsPerTenant, (o.MaxConnsPerBackend+1)/2)
	setInt(&o.MaxResponseHeaderBytes, DefaultMaxResponseHeaderBytes)
	setInt(&o.MaxRequestBodyBytes, DefaultMaxRequestBodyBytes)
	if o.RequestBufferBytes == 0 {
		o.RequestBufferBytes = DefaultRequestBufferBytes
	}
	setInt(&o.RequestBufferMemoryBytes, DefaultRequestBufferMemoryBytes)
	setInt(&o.MaxRequestHeaderBytes, DefaultMaxRequestHeaderBytes)
	setInt(&o.MaxConns, DefaultMaxConns)
	setInt(&o.MaxConnsPerIP, DefaultMaxConnsPerIP)
	if o.IPv6ClientPrefix <= 0 || o.IPv6ClientPrefix > 128 {
		o.IPv6ClientPrefix = DefaultIPv6ClientPrefix
	}
}

// ipv4Carriers are the IPv6 prefixes whose addresses each carry an IPv4 client.
var ipv4Carriers = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),   // NAT64, well-known (RFC 6052)
	netip.MustParsePrefix("64:ff9b:1::/48"), // NAT64, local use (RFC 8215)
	netip.MustParsePrefix("2001::/32"),      // Teredo (RFC 4380)
}

// clientKey is what a client address counts as for the limits of one address
// (MaxConnsPerIP, the request buffer's share), and whether they hold for it: not for
// a trusted proxy, which speaks for many clients. An IPv6 address counts by its
// IPv6ClientPrefix, so that one host cannot take a share for each of the addresses
// it can send from.
func (o *Options) clientKey(ip netip.Addr) (key netip.Addr, limited bool) {
	if o.trusted(ip) {
		return netip.Addr{}, false
	}
	if !ip.Is6() || o.IPv6ClientPrefix >= 128 {
		return ip, true
	}
	for _, c := range ipv4Carriers {
		if c.Contains(ip) {
			return ip, true
		}
	}
	p, _ := ip.Prefix(o.IPv6ClientPrefix)
	return p.Addr(), true
}

// trusted reports whether a peer's forwarding headers are believed.
func (o *Options) trusted(ip netip.Addr) bool {
	for _, p := range o.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
