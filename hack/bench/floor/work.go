//go:build linux

package main

import (
	"bufio"
	"bytes"
	"net/netip"
	"strconv"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// work is what the proxy does to a request and its answer beyond moving bytes, done
// on the floor's event loop (-work): to measure, before an engine of the proxy's own
// is written on an event loop, how far from nginx such an engine would land here with
// the proxy's per-request work on it. Each request's header is parsed with fasthttp's
// parser (as the proxy's server parses it), its host looked up among the routed
// names, hop-by-hop headers and those the backend trusts dropped, the forwarding
// headers and the tenant set, and the header written out again; each answer's header
// is parsed, stripped of hop-by-hop headers and written out, and a request counter
// counted. What it leaves out: request bodies, chunked or streamed answers,
// timeouts (a real engine's would be a clock read a wake-up and a timer wheel),
// error answers (an unknown host closes the connection).
type work struct {
	rd     bytes.Reader
	br     *bufio.Reader
	req    fasthttp.RequestHeader
	resp   fasthttp.ResponseHeader
	out    []byte
	val    []byte
	hosts  map[string]string // hostname -> tenant
	served prometheus.Counter
}

func newWork(hosts map[string]string) *work {
	w := &work{hosts: hosts, out: make([]byte, 0, 4096), val: make([]byte, 0, 256),
		served: prometheus.NewCounter(prometheus.CounterOpts{Name: "requests_total"})}
	w.br = bufio.NewReaderSize(&w.rd, 4096)
	return w
}

// reader is the work's one reader, over b: fasthttp's parsers read from a bufio.Reader.
func (w *work) reader(b []byte) *bufio.Reader {
	w.rd.Reset(b)
	w.br.Reset(&w.rd)
	return w.br
}

// request returns the backend's request for the client's header, or false for a
// request the proxy would refuse.
func (w *work) request(header []byte, peer netip.Addr) ([]byte, bool) {
	h := &w.req
	h.Reset()
	if err := h.Read(w.reader(header)); err != nil {
		return nil, false
	}
	tenant, ok := w.hosts[string(h.Host())]
	if !ok {
		return nil, false
	}
	stripHopByHop(h)
	h.Del(fasthttp.HeaderExpect)
	dropTrusted(h)
	buf := peer.AppendTo(w.val[:0])
	h.Del("X-Forwarded-For")
	h.SetBytesV("X-Forwarded-For", buf)
	if len(h.Peek("X-Forwarded-Host")) == 0 {
		h.SetBytesV("X-Forwarded-Host", h.Host())
	}
	if len(h.Peek("X-Forwarded-Proto")) == 0 {
		h.Set("X-Forwarded-Proto", "http")
	}
	if len(h.Peek("X-Real-Ip")) == 0 {
		h.SetBytesV("X-Real-Ip", buf)
	}
	buf = append(buf[:0], "for="...)
	buf = peer.AppendTo(buf)
	host := h.Host()
	buf = strconv.AppendQuote(append(buf, ";host="...), unsafe.String(unsafe.SliceData(host), len(host)))
	buf = append(buf, ";proto=http"...)
	h.Del("Forwarded")
	h.SetBytesV("Forwarded", buf)
	h.Set("X-Tenant-Id", tenant)
	w.val = buf
	w.out = h.AppendBytes(w.out[:0])
	return w.out, true
}

// response returns the client's answer for the backend's header and body.
func (w *work) response(header, body []byte) ([]byte, bool) {
	h := &w.resp
	h.Reset()
	if err := h.Read(w.reader(header)); err != nil {
		return nil, false
	}
	stripHopByHop(h)
	w.out = append(h.AppendBytes(w.out[:0]), body...)
	w.served.Inc()
	return w.out, true
}

var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Upgrade"}

type headers interface {
	Peek(key string) []byte
	Del(key string)
}

// stripHopByHop is the proxy's (proxy/headers.go): Connection's tokens read in place,
// then the fixed hop-by-hop names.
func stripHopByHop(h headers) {
	for c := h.Peek("Connection"); len(c) > 0; {
		token := c
		if i := bytes.IndexByte(c, ','); i >= 0 {
			token, c = c[:i], c[i+1:]
		} else {
			c = nil
		}
		token = bytes.TrimSpace(token)
		if len(token) > 0 && !bytes.EqualFold(token, []byte("close")) && !bytes.EqualFold(token, []byte("keep-alive")) {
			h.Del(string(token))
		}
	}
	for _, name := range hopByHop {
		if len(h.Peek(name)) > 0 {
			h.Del(name)
		}
	}
}

// dropTrusted walks every request header as the proxy's dropTrustedHeaders does and
// deletes the names the backend trusts in any spelling.
func dropTrusted(h *fasthttp.RequestHeader) {
	var drop [16][]byte
	n := 0
	for key := range h.All() {
		if n < len(drop) && trustedName(key) {
			drop[n] = append(drop[n][:0], key...)
			n++
		}
	}
	for _, k := range drop[:n] {
		h.DelBytes(k)
	}
}

func trustedName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	switch name[0] | 0x20 {
	case 'x', 't', 'f':
	default:
		return false
	}
	return foldEqual(name, "x-tenant-id") || foldEqual(name, "x-real-ip") || foldEqual(name, "true-client-ip") ||
		foldEqual(name, "forwarded") || (len(name) > len("x-forwarded-") && foldEqual(name[:len("x-forwarded-")], "x-forwarded-"))
}

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
