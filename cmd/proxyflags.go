package main

import (
	"flag"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tenantroute/tenantroute-operator/proxy"
)

// bindProxyFlags registers the proxy's limits; docs/proxy.md lists them with the
// reasons for their defaults.
func bindProxyFlags(fs *flag.FlagSet, o *proxy.Options, chain *proxy.ChainOptions) {
	fs.DurationVar(&o.UpstreamTimeout, "upstream-timeout", proxy.DefaultUpstreamTimeout, "Longest wait on a backend between two reads (the response header included) or two writes; streams of any length pass while data flows.")
	fs.DurationVar(&o.DialTimeout, "upstream-dial-timeout", proxy.DefaultDialTimeout, "Timeout of connecting to a backend, TLS handshake included, and of waiting for one of its pooled connections when --upstream-max-conns are busy.")
	fs.DurationVar(&o.UpstreamIdleConnTimeout, "upstream-idle-conn-timeout", proxy.DefaultUpstreamIdleConnTimeout, "Pooled backend connections unused this long are closed; keep it below the backends' own keep-alive timeout.")
	fs.IntVar(&o.MaxConnsPerBackend, "upstream-max-conns", proxy.DefaultMaxConnsPerBackend, "Connections to each backend at most.")
	fs.IntVar(&o.MaxConnsPerTenant, "upstream-max-conns-per-tenant", 0, "Pooled connections to each backend that one tenant's requests may hold at once, so that one tenant's slow requests cannot take a region's backends from its other tenants (past it: another backend, or 503). 0: half of --upstream-max-conns.")
	fs.IntVar(&o.MaxResponseHeaderBytes, "max-response-header-bytes", proxy.DefaultMaxResponseHeaderBytes, "Largest backend response header; a larger one is a 502.")
	fs.IntVar(&o.MaxRequestBodyBytes, "max-request-body-bytes", proxy.DefaultMaxRequestBodyBytes, "Largest request body, whatever the method (413 past it).")
	fs.IntVar(&o.RequestBufferBytes, "request-buffer-bytes", proxy.DefaultRequestBufferBytes, "A body of declared length up to this is read whole before a backend connection is taken, so that slow uploads do not hold the backends' pools (-1: bodies always stream).")
	fs.IntVar(&o.RequestBufferMemoryBytes, "request-buffer-memory-bytes", proxy.DefaultRequestBufferMemoryBytes, "Bytes of request bodies held whole at once, at most, and a sixteenth of it from one client address (trusted proxies excepted); past it, bodies stream.")
	fs.IntVar(&o.MaxRequestHeaderBytes, "max-request-header-bytes", proxy.DefaultMaxRequestHeaderBytes, "Largest request line and header (431 past it).")
	fs.DurationVar(&o.ClientHeaderTimeout, "client-header-timeout", proxy.DefaultClientHeaderTimeout, "Time a client has to send a request's header and the first 8 KiB of its body, or a TLS connection its ClientHello (slow clients are cut).")
	fs.DurationVar(&o.ClientIdleTimeout, "client-idle-timeout", proxy.DefaultClientIdleTimeout, "How long a kept-alive client connection may wait for its next request.")
	fs.DurationVar(&o.ClientReadTimeout, "client-read-timeout", proxy.DefaultClientReadTimeout, "Longest wait between two reads of a request body.")
	fs.DurationVar(&o.ClientWriteTimeout, "client-write-timeout", proxy.DefaultClientWriteTimeout, "Longest wait between two writes of a response to a client.")
	fs.DurationVar(&o.TunnelIdleTimeout, "websocket-idle-timeout", proxy.DefaultTunnelIdleTimeout, "A WebSocket tunnel in which neither side sent anything for this long is closed.")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", proxy.DefaultShutdownDelay, "On SIGTERM the proxy fails its readiness and keeps accepting this long (answering with Connection: close), so that load balancers and endpoints drop it before it stops listening.")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", proxy.DefaultShutdownTimeout, "Then, how long requests, streams and WebSocket tunnels in flight may take to finish (tunnels get a close frame) before the proxy exits.")
	fs.IntVar(&o.MaxConns, "max-conns", proxy.DefaultMaxConns, "Client connections at most (503 past it).")
	fs.IntVar(&o.MaxConnsPerIP, "max-conns-per-ip", proxy.DefaultMaxConnsPerIP, "Client connections from one address at most, an IPv6 address counting by its --ipv6-client-prefix (429 past it); trusted proxies are exempt.")
	o.Engine = proxy.DefaultEngine
	fs.Func("proxy-engine", "The engine of the plain-HTTP listener: loop (Linux; a proxy with HTTPS on serves every listener with fasthttp), event loops that forward plain requests themselves and hand the rest to fasthttp's server; or fasthttp, a goroutine a connection; docs/proxy.md. (default "+proxy.DefaultEngine+")", func(v string) error {
		if v != proxy.EngineFasthttp && v != proxy.EngineLoop {
			return fmt.Errorf("%q is not an engine: fasthttp or loop", v)
		}
		o.Engine = v
		return nil
	})
	o.IPv6ClientPrefix = proxy.DefaultIPv6ClientPrefix
	fs.Func("ipv6-client-prefix", "Bits of an IPv6 address that name one client for the limits of one address (a host is given a /64); 128 counts every address apart. (default 64)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 128 {
			return fmt.Errorf("%q is not a prefix length from 1 to 128", v)
		}
		o.IPv6ClientPrefix = n
		return nil
	})
	fs.Func("trusted-proxies", "Comma-separated CIDRs or addresses of load balancers/CDNs whose X-Forwarded-*, Forwarded, X-Real-IP and True-Client-IP headers are kept and extended; everyone else's are replaced.", func(v string) error {
		prefixes, err := parsePrefixes(v)
		o.TrustedProxies = append(o.TrustedProxies, prefixes...)
		return err
	})
	fs.IntVar(&chain.MaxEntries, "route-cache-size", 1<<20, "Routes kept in each proxy's memory at most.")
	fs.IntVar(&chain.MaxNegativeEntries, "route-negative-cache-size", 100_000, "Hosts without a route remembered at most, apart from the routes: a flood of random hosts never evicts a route.")
}

func parsePrefixes(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		addr, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR nor an address", item)
		}
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return out, nil
}
