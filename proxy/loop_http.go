package proxy

import (
	"bytes"
	"errors"

	"github.com/valyala/fasthttp"
	"net/netip"
	"strconv"
)

// The loop engine's HTTP: a request's and a response's header read line by line where
// they lie, and rewritten as the lines are copied out, as nginx does, with no parsed
// structure in between. It reads only the plainest messages: a header of CRLF lines,
// each exactly one field of a token name, a colon and a value of visible characters.
// Anything else, and every message with a body to frame or a protocol to switch, is
// not refused here but handed to the fasthttp engine, whose hardening answers it: so
// the loop never has to agree with fasthttp on a message either of them might read
// differently.

// maxLoopFields bounds the fields of a header the loop reads; a longer one is handed
// over.
const maxLoopFields = 64

type field struct {
	name, value []byte
	raw         []byte // the whole line with its CRLF
}

// headerEnd finds the end of a header in b (the index past its empty line), looking
// from from (where the last call stopped: a header arriving a byte at a time is
// scanned once). plain is false once a line ends in a bare LF, or the message begins
// with an empty line: the loop leaves those to fasthttp. next is where to look from
// next time.
func headerEnd(b []byte, from int) (end, next int, plain bool) {
	i := from
	for {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			// Resume at the start of the unfinished line.
			return -1, i, true
		}
		lf := i + j
		if lf == 0 || b[lf-1] != '\r' {
			return -1, i, false
		}
		if lf-1 == i { // an empty line
			if i == 0 {
				return -1, i, false
			}
			return lf + 1, lf + 1, true
		}
		i = lf + 1
	}
}

// splitFields reads a header's fields (after its first line, up to its empty line)
// into fields; false for one the loop does not read (see above).
func splitFields(h []byte, fields *[maxLoopFields]field) ([]field, bool) {
	n := 0
	for len(h) > 2 {
		j := bytes.IndexByte(h, '\r')
		if j <= 0 || j+1 >= len(h) || h[j+1] != '\n' || n == len(fields) {
			return nil, false
		}
		raw := h[:j+2]
		colon := bytes.IndexByte(raw[:j], ':')
		if colon <= 0 || !isToken(raw[:colon]) {
			return nil, false
		}
		value := raw[colon+1 : j]
		for _, c := range value {
			if c < ' ' && c != '\t' || c == 0x7f {
				return nil, false
			}
		}
		fields[n] = field{name: raw[:colon], value: trimOWS(value), raw: raw}
		n++
		h = h[j+2:]
	}
	return fields[:n], len(h) == 2
}

// trimOWS trims a field value's optional white space (spaces and tabs), as bytes.Trim
// would without building its set of cut bytes at each call: every field of every
// request passes here.
func trimOWS(v []byte) []byte {
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	return v
}

// nameIs compares a field name with a lower-case name, ignoring case only: a
// framing or hop-by-hop field is matched as fasthttp and backends match it, never by
// foldEqual's '_' for '-' (Content_Length is no length to them; read as one here, it
// would frame a body they do not see, and smuggle the bytes after it).
func nameIs(name []byte, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i, c := range name {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// tokenChars are the bytes of a header name (RFC 9110 5.6.2).
var tokenChars = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func isToken(b []byte) bool {
	for _, c := range b {
		if !tokenChars[c] {
			return false
		}
	}
	return len(b) > 0
}

// loopRequest is what the loop reads of a request it forwards itself.
type loopRequest struct {
	first      []byte // the request line with its CRLF
	fields     []field
	head       bool
	length     int  // the body's, declared by Content-Length (preRead at most)
	replayable bool // isReplayable's
	host       []byte
	connection []byte // the Connection field's value
	close      bool   // the client asked to close after the answer
}

// readClientRequest reads a request header the loop can forward itself: a method, an
// origin-form target that validTarget passes, HTTP/1.1, one Host, at most one
// Connection, no body or one of a declared length up to preRead (what fasthttp's
// server reads with the header), and nothing that asks for more than an answer
// (Upgrade, Expect). false hands the request over.
func readClientRequest(h []byte, fields *[maxLoopFields]field) (loopRequest, bool) {
	var r loopRequest
	i := bytes.IndexByte(h, '\r')
	if i < 0 || i+1 == len(h) || h[i+1] != '\n' {
		return r, false // a CR alone ends no line here: fasthttp refuses the request
	}
	r.first = h[:i+2]
	line := h[:i]
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || !isToken(line[:sp]) {
		return r, false
	}
	method := line[:sp]
	line = line[sp+1:]
	r.head = string(method) == fasthttp.MethodHead
	switch string(method) {
	case fasthttp.MethodGet, fasthttp.MethodHead, fasthttp.MethodOptions, fasthttp.MethodTrace:
		r.replayable = true
	}
	if !bytes.HasSuffix(line, []byte(" HTTP/1.1")) {
		return r, false
	}
	target := line[:len(line)-len(" HTTP/1.1")]
	if len(target) == 0 || target[0] != '/' || !validTarget(target, false) {
		return r, false
	}
	var ok bool
	if r.fields, ok = splitFields(h[i+2:], fields); !ok {
		return r, false
	}
	hosts, connections, lengths := 0, 0, 0
	for _, f := range r.fields {
		switch {
		case nameIs(f.name, "host"):
			r.host = f.value
			hosts++
		case nameIs(f.name, "connection"):
			r.connection = f.value
			connections++
		case nameIs(f.name, "content-length"):
			if lengths++; len(f.value) == 0 || len(f.value) > 5 {
				return r, false
			}
			for _, c := range f.value {
				if c < '0' || c > '9' {
					return r, false
				}
				r.length = r.length*10 + int(c-'0')
			}
		case nameIs(f.name, "idempotency-key"), nameIs(f.name, "x-idempotency-key"):
			if len(f.value) > 0 {
				r.replayable = true
			}
		case nameIs(f.name, "transfer-encoding"), nameIs(f.name, "upgrade"), nameIs(f.name, "expect"):
			return r, false
		}
	}
	if hosts != 1 || len(r.host) == 0 || connections > 1 || lengths > 1 || r.length > preRead {
		return r, false
	}
	if r.length > 0 {
		r.replayable = false
	}
	r.close = hasToken(r.connection, "close")
	return r, true
}

// dropped reports a field that does not cross the proxy: hop-by-hop (a fixed name, or
// one Connection names but for the framing headers and Host, as stripHopByHop).
func dropped(name, connection []byte) bool {
	for _, h := range hopByHopFolded {
		if nameIs(name, h) {
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
		if token = bytes.TrimSpace(token); len(token) > 0 && bytes.EqualFold(token, name) && !protectedToken(token) {
			return true
		}
	}
	return false
}

// hopByHopFolded are hopByHop, folded.
var hopByHopFolded = []string{"connection", "proxy-connection", "keep-alive", "proxy-authenticate",
	"proxy-authorization", "te", "trailer", "upgrade"}

// appendBackendRequest appends the request the backend gets: what prepare makes of
// it, line by line. Hop-by-hop fields go; fields the backend trusts go unless a
// trusted proxy sent them in their standard spelling (the tenant always goes); the
// forwarding fields are joined with a trusted proxy's or set. It ends with the
// tenant's field begun: the caller appends the tenant and the header's end.
func appendBackendRequest(out []byte, r *loopRequest, ip netip.Addr, trusted bool) []byte {
	out = append(out, r.first...)
	// From a trusted proxy: its X-Forwarded-For and Forwarded values, joined, and
	// whether it set X-Forwarded-Host, -Proto and X-Real-IP (the first such field
	// non-empty, as fasthttp's Peek reads them; an empty one is replaced).
	var xff, fwd []field
	var xffBuf, fwdBuf [4]field
	xff, fwd = xffBuf[:0], fwdBuf[:0]
	keepHost, keepProto, keepReal := false, false, false
	seenHost, seenProto, seenReal := false, false, false
	for _, f := range r.fields {
		if dropped(f.name, r.connection) {
			continue
		}
		if nameIs(f.name, "host") {
			// In lower case, as fasthttp sends it (and as the route was looked up).
			out = append(appendLower(append(out, "Host: "...), r.host), "\r\n"...)
			continue
		}
		if !trustedName(f.name) {
			out = append(out, f.raw...)
			continue
		}
		if !trusted || !keepFromTrustedProxy(f.name) {
			continue
		}
		switch {
		case foldEqual(f.name, "x-forwarded-for"):
			xff = append(xff, f)
		case foldEqual(f.name, "forwarded"):
			fwd = append(fwd, f)
		case foldEqual(f.name, "x-forwarded-host"):
			if !seenHost {
				seenHost, keepHost = true, len(f.value) > 0
			}
			if keepHost {
				out = append(out, f.raw...)
			}
		case foldEqual(f.name, "x-forwarded-proto"):
			if !seenProto {
				seenProto, keepProto = true, len(f.value) > 0
			}
			if keepProto {
				out = append(out, f.raw...)
			}
		case foldEqual(f.name, "x-real-ip"):
			if !seenReal {
				seenReal, keepReal = true, len(f.value) > 0
			}
			if keepReal {
				out = append(out, f.raw...)
			}
		default:
			out = append(out, f.raw...)
		}
	}
	// The client's address, formatted once for the three fields that carry it (at
	// most 45 bytes without a zone, which an accepted address has none of).
	var addrBuf [64]byte
	addr := ip.AppendTo(addrBuf[:0])
	// Joined as prepare joins them: the values with ", ", then ", " if that is not
	// empty.
	out = append(out, "X-Forwarded-For: "...)
	out = appendJoined(out, xff)
	out = append(out, addr...)
	out = append(out, "\r\n"...)
	if !keepHost {
		out = append(appendLower(append(out, "X-Forwarded-Host: "...), r.host), "\r\n"...)
	}
	if !keepProto {
		out = append(out, "X-Forwarded-Proto: http\r\n"...)
	}
	if !keepReal {
		out = append(append(append(out, "X-Real-Ip: "...), addr...), "\r\n"...)
	}
	out = append(out, "Forwarded: "...)
	out = appendJoined(out, fwd)
	out = append(out, "for="...)
	if ip.Is6() {
		out = append(append(append(out, `"[`...), addr...), `]"`...)
	} else {
		out = append(out, addr...)
	}
	out = append(out, ";host="...)
	quoted := len(out)
	out = appendQuoted(out, r.host)
	lower(out[quoted:])
	return append(out, ";proto=http\r\nX-Tenant-Id: "...)
}

// appendJoined appends the fields' values joined with ", ", and ", " after them
// unless that is empty.
func appendJoined(out []byte, fields []field) []byte {
	start := len(out)
	for i, f := range fields {
		if i > 0 {
			out = append(out, ", "...)
		}
		out = append(out, f.value...)
	}
	if len(out) > start {
		out = append(out, ", "...)
	}
	return out
}

// loopResponse is what the loop reads of a backend's answer.
type loopResponse struct {
	first      []byte
	fields     []field
	status     int
	length     int64 // Content-Length; -1 without one
	chunked    bool  // Transfer-Encoding: chunked (and no Content-Length)
	connection []byte
	keep       bool // the backend keeps the connection
}

// readBackendResponse reads a response header the loop can forward itself: HTTP/1.1 or
// 1.0, a final status, at most one Content-Length of digits or one Transfer-Encoding
// of chunked alone (never both), at most one Connection. false hands the exchange
// over.
func readBackendResponse(h []byte, fields *[maxLoopFields]field) (loopResponse, bool) {
	r := loopResponse{length: -1}
	i := bytes.IndexByte(h, '\r')
	if i < 12 || i+1 == len(h) || h[i+1] != '\n' || !bytes.HasPrefix(h, []byte("HTTP/1.")) || (h[7] != '1' && h[7] != '0') || h[8] != ' ' ||
		(i > 12 && h[12] != ' ') {
		return r, false
	}
	for _, c := range h[9:12] {
		if c < '0' || c > '9' {
			return r, false
		}
		r.status = r.status*10 + int(c-'0')
	}
	if r.status < 200 || r.status > 999 {
		return r, false
	}
	for _, c := range h[12:i] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return r, false
		}
	}
	r.first = h[:i+2]
	var ok bool
	if r.fields, ok = splitFields(h[i+2:], fields); !ok {
		return r, false
	}
	connections, encodings := 0, 0
	for _, f := range r.fields {
		switch {
		case nameIs(f.name, "content-length"):
			if r.length >= 0 || len(f.value) == 0 || len(f.value) > 18 {
				return r, false
			}
			var n int64
			for _, c := range f.value {
				if c < '0' || c > '9' {
					return r, false
				}
				n = n*10 + int64(c-'0')
			}
			r.length = n
		case nameIs(f.name, "transfer-encoding"):
			if !bytes.EqualFold(f.value, []byte("chunked")) {
				return r, false
			}
			r.chunked = true
			encodings++
		case nameIs(f.name, "connection"):
			r.connection = f.value
			connections++
		}
	}
	if connections > 1 || encodings > 1 || (r.chunked && r.length >= 0) {
		return r, false
	}
	if r.chunked && h[7] != '1' {
		// Transfer-Encoding in HTTP/1.0 is faulty framing (RFC 9112, section 6.1):
		// fasthttp reads such a body until the close, and answers it.
		return r, false
	}
	if h[7] == '1' {
		r.keep = !hasToken(r.connection, "close")
	} else {
		r.keep = hasToken(r.connection, "keep-alive") && !hasToken(r.connection, "close")
	}
	return r, true
}

// bodyless reports an answer that has no body whatever its fields say.
func bodyless(status int, head bool) bool {
	return head || status == 204 || status == 304
}

// appendClientResponse appends the answer the client gets: the backend's, in HTTP/1.1,
// without its hop-by-hop fields, and saying Connection: close when the proxy closes
// after it; chunk adds chunked framing to a body the backend delimits by closing.
func appendClientResponse(out []byte, r *loopResponse, close, chunk bool) []byte {
	out = append(append(out, "HTTP/1.1"...), r.first[8:]...)
	// A 204 goes without framing fields, as fasthttp writes it: a cache in front
	// could wait for the chunks a Transfer-Encoding announces.
	noContent, named := r.status == 204, false
	for _, f := range r.fields {
		server := nameIs(f.name, "server")
		if noContent && (nameIs(f.name, "content-length") || nameIs(f.name, "transfer-encoding")) || server && len(f.value) == 0 {
			continue // (an empty Server is the proxy's, as fasthttp fills it)
		}
		if !dropped(f.name, r.connection) {
			named = named || server
			out = append(out, f.raw...)
		}
	}
	if !named {
		out = append(out, "Server: "+serverName+"\r\n"...)
	}
	if close {
		out = append(out, "Connection: close\r\n"...)
	}
	if chunk {
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	}
	return append(out, "\r\n"...)
}

// chunks frames a chunked body again as it passes: the data of the backend's chunks
// goes out in chunks of the proxy's own, without their extensions and the trailer
// fields, as the fasthttp engine (which decodes the body and encodes it again) sends
// it. A body framed in any other way ends the exchange: its header is out already.
type chunks struct {
	state uint8
	left  int64
	line  []byte // a size or trailer line not whole yet
}

const (
	chunkSize = iota
	chunkData
	chunkDataCR
	chunkDataLF
	chunkTrailer
	chunkDone
)

// maxChunkLine bounds a chunk's size line, and each trailer line.
const maxChunkLine = 4096

var errChunked = errors.New("the backend's chunked body is malformed")

func (d *chunks) done() bool { return d.state == chunkDone }

// feed appends to out the body's data that in carries, framed again, and says how
// much of in was the body's.
func (d *chunks) feed(out, in []byte) ([]byte, int, error) {
	i := 0
	for i < len(in) && d.state != chunkDone {
		switch d.state {
		case chunkSize, chunkTrailer:
			j := bytes.IndexByte(in[i:], '\n')
			if j < 0 {
				if len(d.line)+len(in)-i > maxChunkLine {
					return out, i, errChunked
				}
				d.line = append(d.line, in[i:]...)
				i = len(in)
				continue
			}
			line := in[i : i+j+1]
			i += j + 1
			if len(d.line) > 0 {
				if len(d.line)+len(line) > maxChunkLine {
					return out, i, errChunked
				}
				d.line = append(d.line, line...)
				line = d.line
			}
			d.line = d.line[:0]
			if len(line) < 2 || line[len(line)-2] != '\r' || bytes.IndexByte(line[:len(line)-2], '\r') >= 0 {
				return out, i, errChunked
			}
			line = line[:len(line)-2]
			if d.state == chunkTrailer {
				if len(line) == 0 {
					d.state = chunkDone
					out = append(out, "0\r\n\r\n"...)
				}
				continue // a trailer field: dropped
			}
			size, ok := chunkSizeOf(line)
			switch {
			case !ok:
				return out, i, errChunked
			case size == 0:
				d.state = chunkTrailer
			default:
				d.state, d.left = chunkData, size
			}
		case chunkData:
			n := min(int64(len(in)-i), d.left)
			out = appendChunk(out, in[i:i+int(n)])
			i += int(n)
			if d.left -= n; d.left == 0 {
				d.state = chunkDataCR
			}
		case chunkDataCR, chunkDataLF:
			want := byte('\r')
			if d.state == chunkDataLF {
				want = '\n'
			}
			if in[i] != want {
				return out, i, errChunked
			}
			i++
			if d.state++; d.state > chunkDataLF {
				d.state = chunkSize
			}
		}
	}
	return out, i, nil
}

// chunkSizeOf reads a chunk's size line: hexadecimal digits, then an extension
// (dropped) or whitespace, or nothing.
func chunkSizeOf(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line) && isHex(line[i]); i++ {
		if i == 15 {
			return 0, false // past what an int64 holds
		}
		n = n<<4 | int64(unhex(line[i]))
	}
	if i == 0 {
		return 0, false
	}
	// As fasthttp reads it: an extension right after the digits (any bytes up to the
	// line's end), or whitespace alone.
	if rest := line[i:]; len(rest) > 0 && rest[0] != ';' && len(trimOWS(rest)) > 0 {
		return 0, false
	}
	return n, true
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

// appendChunk appends data as one chunk.
func appendChunk(out, data []byte) []byte {
	if len(data) == 0 {
		return out
	}
	out = strconv.AppendInt(out, int64(len(data)), 16)
	return append(append(append(out, "\r\n"...), data...), "\r\n"...)
}

func appendLower(out, b []byte) []byte {
	n := len(out)
	out = append(out, b...)
	lower(out[n:])
	return out
}

// lower turns ASCII upper case in b to lower case.
func lower(b []byte) {
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}
