//go:build linux

package main

import (
	"bytes"
	"net/netip"
	"strconv"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
)

// inplace is work's work (-work -inplace) done as nginx does it: each header is
// scanned once, line by line, and the lines kept are copied out as they came, with no
// parsed structure in between; hop-by-hop headers (the fixed names and those
// Connection names), the headers the backend trusts and Expect are skipped, the
// forwarding headers and the tenant appended. It measures what an engine with a
// parser of its own would pay, against work's fasthttp parse and rewrite.
type inplace struct {
	out    []byte
	lines  [64]line
	hosts  map[string]string
	served prometheus.Counter
}

type line struct {
	name, value []byte
	raw         []byte // the whole line with its CRLF
}

func newInplace(hosts map[string]string) *inplace {
	return &inplace{hosts: hosts, out: make([]byte, 0, 4096),
		served: prometheus.NewCounter(prometheus.CounterOpts{Name: "requests_total"})}
}

var crlf = []byte("\r\n")

// split reads the header's lines after the first into w.lines; false for a header the
// proxy would refuse (no colon, a space before it, a folded line, too many lines).
func (w *inplace) split(header []byte) (first []byte, lines []line, ok bool) {
	i := bytes.Index(header, crlf)
	if i < 0 {
		return nil, nil, false
	}
	first, header = header[:i+2], header[i+2:]
	n := 0
	for len(header) > 2 { // the header ends with its empty line
		j := bytes.Index(header, crlf)
		if j <= 0 || n == len(w.lines) || header[0] == ' ' || header[0] == '\t' {
			return nil, nil, false
		}
		raw := header[:j+2]
		colon := bytes.IndexByte(raw[:j], ':')
		if colon <= 0 || raw[colon-1] == ' ' || raw[colon-1] == '\t' {
			return nil, nil, false
		}
		w.lines[n] = line{name: raw[:colon], value: bytes.TrimSpace(raw[colon+1 : j]), raw: raw}
		n++
		header = header[j+2:]
	}
	return first, w.lines[:n], true
}

var hopByHopFolded = []string{"connection", "proxy-connection", "keep-alive", "proxy-authenticate",
	"proxy-authorization", "te", "trailer", "upgrade"}

// hopByHopLine reports a header that does not cross the proxy: a fixed hop-by-hop
// name, or one the Connection header names.
func hopByHopLine(name, connection []byte) bool {
	for _, h := range hopByHopFolded {
		if foldEqual(name, h) {
			return true
		}
	}
	for c := connection; len(c) > 0; {
		token := c
		if i := bytes.IndexByte(c, ','); i >= 0 {
			token, c = c[:i], c[i+1:]
		} else {
			c = nil
		}
		if bytes.EqualFold(bytes.TrimSpace(token), name) {
			return true
		}
	}
	return false
}

func (w *inplace) request(header []byte, peer netip.Addr) ([]byte, bool) {
	first, lines, ok := w.split(header)
	if !ok {
		return nil, false
	}
	var host, connection []byte
	hosts := 0
	for _, l := range lines {
		switch {
		case foldEqual(l.name, "host"):
			host = l.value
			hosts++
		case foldEqual(l.name, "connection"):
			connection = l.value
		}
	}
	if hosts != 1 {
		return nil, false
	}
	tenant, ok := w.hosts[string(host)]
	if !ok {
		return nil, false
	}
	out := append(w.out[:0], first...)
	for _, l := range lines {
		if trustedName(l.name) || foldEqual(l.name, "expect") || hopByHopLine(l.name, connection) {
			continue
		}
		out = append(out, l.raw...)
	}
	out = append(out, "X-Forwarded-For: "...)
	out = peer.AppendTo(out)
	out = append(append(append(out, "\r\nX-Forwarded-Host: "...), host...), "\r\nX-Forwarded-Proto: http\r\nX-Real-Ip: "...)
	out = peer.AppendTo(out)
	out = append(out, "\r\nForwarded: for="...)
	out = peer.AppendTo(out)
	out = strconv.AppendQuote(append(out, ";host="...), unsafe.String(unsafe.SliceData(host), len(host)))
	out = append(append(append(out, ";proto=http\r\nX-Tenant-Id: "...), tenant...), "\r\n\r\n"...)
	w.out = out
	return out, true
}

func (w *inplace) response(header, body []byte) ([]byte, bool) {
	first, lines, ok := w.split(header)
	if !ok {
		return nil, false
	}
	var connection []byte
	for _, l := range lines {
		if foldEqual(l.name, "connection") {
			connection = l.value
		}
	}
	out := append(w.out[:0], first...)
	for _, l := range lines {
		if !hopByHopLine(l.name, connection) {
			out = append(out, l.raw...)
		}
	}
	out = append(append(out, crlf...), body...)
	w.out = out
	w.served.Inc()
	return out, true
}
