package proxy

import (
	"bytes"
	"net/netip"
	"strconv"
	"sync"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// prepare turns the client's request into the backend's: hop-by-hop headers go,
// headers the backend trusts are dropped in any spelling (unless a trusted proxy
// sent them), then the proxy's own forwarding headers and the tenant are set.
// Values are built in a pooled buffer.
func (p *Proxy) prepare(ctx *fasthttp.RequestCtx, route *CachedRoute) {
	h := &ctx.Request.Header
	stripHopByHop(h)
	// The client already had its 100 Continue from the proxy.
	h.Del(fasthttp.HeaderExpect)
	ip := remoteIP(ctx)
	trusted := p.opts.trusted(ip)
	dropTrustedHeaders(h, trusted)
	// The path goes to the backend byte for byte.
	ctx.Request.URI().DisablePathNormalizing = true

	bufp := valueBufs.Get().(*[]byte)
	defer valueBufs.Put(bufp)
	buf := (*bufp)[:0]
	proto := "http"
	if ctx.IsTLS() {
		proto = "https"
	}
	// X-Forwarded-For: prior hops (from a trusted proxy, every header of that name),
	// then the peer.
	if trusted {
		if buf = appendAll(buf, h.PeekAll("X-Forwarded-For")); len(buf) > 0 {
			buf = append(buf, ", "...)
		}
	}
	buf = ip.AppendTo(buf)
	h.Del("X-Forwarded-For")
	h.SetBytesV("X-Forwarded-For", buf)
	if len(h.Peek("X-Forwarded-Host")) == 0 {
		h.SetBytesV("X-Forwarded-Host", ctx.Host())
	}
	if len(h.Peek("X-Forwarded-Proto")) == 0 {
		h.Set("X-Forwarded-Proto", proto)
	}
	if len(h.Peek("X-Real-Ip")) == 0 {
		h.SetBytesV("X-Real-Ip", ip.AppendTo(buf[:0]))
	}
	// Forwarded (RFC 7239): prior elements (from a trusted proxy), then ours.
	buf = buf[:0]
	if trusted {
		if buf = appendAll(buf, h.PeekAll("Forwarded")); len(buf) > 0 {
			buf = append(buf, ", "...)
		}
	}
	buf = append(buf, "for="...)
	if ip.Is6() {
		buf = append(ip.AppendTo(append(buf, `"[`...)), `]"`...)
	} else {
		buf = ip.AppendTo(buf)
	}
	buf = appendQuoted(append(buf, ";host="...), ctx.Host())
	buf = append(append(buf, ";proto="...), proto...)
	h.Del("Forwarded")
	h.SetBytesV("Forwarded", buf)
	h.Set("X-Tenant-Id", route.Tenant)
	*bufp = buf
}

var valueBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

func remoteIP(ctx *fasthttp.RequestCtx) netip.Addr {
	if ip, ok := netip.AddrFromSlice(ctx.RemoteIP()); ok {
		return ip.Unmap()
	}
	return netip.IPv4Unspecified()
}

// Header names the backend trusts, folded: lowercase, '_' as '-'. CGI, WSGI and PHP
// present X_Tenant_ID and X-Tenant-ID as one variable, so every spelling counts.
const (
	foldTenant      = "x-tenant-id"
	foldXForwarded_ = "x-forwarded-"
)

// trustedNames are, besides the tenant and X-Forwarded-*, the client-address
// headers proxies and CDNs set and frameworks read as the client's address (Cloudflare's,
// the edge in front of the proxy most of the time, Fastly's, CloudFront's, Fly's,
// Azure Front Door's, Rails' Client-IP and the ones request-ip libraries try): from a
// peer that is not a trusted proxy, each is the client's own claim.
var trustedNames = []string{foldTenant, "x-real-ip", "true-client-ip", "forwarded",
	"cf-connecting-ip", "cf-connecting-ipv6", "fastly-client-ip", "x-client-ip", "x-cluster-client-ip",
	"client-ip", "cloudfront-viewer-address", "fly-client-ip", "x-azure-clientip"}

// dropTrustedHeaders deletes every request header whose folded name is one the
// proxy sets or the backend trusts. From a trusted proxy, the forwarding headers in
// their standard spelling stay (the proxy extends them); the tenant never does.
func dropTrustedHeaders(h *fasthttp.RequestHeader, trusted bool) {
	var drop [16][]byte
	n := 0
	var more [][]byte
	for key := range h.All() {
		if !trustedName(key) || (trusted && keepFromTrustedProxy(key)) {
			continue
		}
		k := append([]byte(nil), key...)
		if n < len(drop) {
			drop[n] = k
			n++
		} else {
			more = append(more, k)
		}
	}
	for _, k := range drop[:n] {
		h.DelBytes(k)
	}
	for _, k := range more {
		h.DelBytes(k)
	}
}

// trustedName reports a header name that folds to one the backend trusts. It is
// called for every request header, so it compares in place.
func trustedName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	switch name[0] | 0x20 {
	case 'x', 't', 'f', 'c':
	default:
		return false
	}
	if len(name) > len(foldXForwarded_) && foldEqual(name[:len(foldXForwarded_)], foldXForwarded_) {
		return true
	}
	for _, n := range trustedNames {
		if foldEqual(name, n) {
			return true
		}
	}
	return false
}

// keepFromTrustedProxy: the forwarding headers a trusted proxy sets, spelled as
// standard (no underscore); never the tenant.
func keepFromTrustedProxy(name []byte) bool {
	return bytes.IndexByte(name, '_') < 0 && !foldEqual(name, foldTenant)
}

// foldEqual compares a header name with a folded name: ASCII case-insensitive, '_'
// equal to '-'.
func foldEqual(name []byte, folded string) bool {
	if len(name) != len(folded) {
		return false
	}
	for i, c := range name {
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != folded[i] {
			return false
		}
	}
	return true
}

// hopByHop are the headers of one connection, never forwarded (RFC 9110 7.6.1).
// Transfer-Encoding is left out: fasthttp frames bodies itself.
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Upgrade"}

type headers interface {
	Peek(key string) []byte
	Del(key string)
}

// stripHopByHop deletes the hop-by-hop headers and those named in Connection, but
// never a framing header or Host, whatever Connection names: dropping one would
// change where the message ends. Header names are normalised (requests by the
// server, responses by the proxy's reader), so Peek finds them in any case.
func stripHopByHop(h headers) {
	// The tokens of Connection are read in place: browsers send "keep-alive" on every
	// request, and only a header it names (rare) costs a string.
	for c := h.Peek("Connection"); len(c) > 0; {
		token := c
		if i := bytes.IndexByte(c, ','); i >= 0 {
			token, c = c[:i], c[i+1:]
		} else {
			c = nil
		}
		token = bytes.TrimSpace(token)
		if len(token) > 0 && !protectedToken(token) {
			h.Del(string(token))
		}
	}
	for _, name := range hopByHop {
		if len(h.Peek(name)) > 0 {
			h.Del(name)
		}
	}
}

// inHTTP11 makes an answer read from an HTTP/1.0 backend one of HTTP/1.1, as the
// proxy speaks it to its client: fasthttp would echo the backend's version in the
// status line, and an HTTP/1.1 client would then read the chunks the proxy frames a
// body with as the body, and wait for a close that a kept connection never brings.
func inHTTP11(h *fasthttp.ResponseHeader) {
	if !h.IsHTTP11() {
		h.SetProtocol(http11)
	}
}

var http11 = []byte("HTTP/1.1")

// protectedToken: Connection tokens that name nothing to remove.
func protectedToken(token []byte) bool {
	for _, name := range []string{"close", "keep-alive", "content-length", "transfer-encoding", "host"} {
		if bytes.EqualFold(token, []byte(name)) {
			return true
		}
	}
	return false
}

// appendQuoted appends s quoted, byte for byte as strconv.AppendQuote would. The host
// quoted into Forwarded at every request is printable ASCII but for a hostile client's:
// it is copied between quotes, without AppendQuote's rune-by-rune walk, and anything
// else is AppendQuote's to escape.
func appendQuoted(out, s []byte) []byte {
	for _, c := range s {
		if c < ' ' || c > '~' || c == '"' || c == '\\' {
			return strconv.AppendQuote(out, unsafeString(s))
		}
	}
	return append(append(append(out, '"'), s...), '"')
}

// unsafeString views bytes as a string for a call that does not keep it.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// appendAll joins the values of a repeated header with ", ".
func appendAll(buf []byte, values [][]byte) []byte {
	for i, v := range values {
		if i > 0 {
			buf = append(buf, ", "...)
		}
		buf = append(buf, v...)
	}
	return buf
}
