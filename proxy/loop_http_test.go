package proxy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

// The loop engine forwards only what it reads exactly; every message a hostile client
// or backend could frame two ways, or that needs more than an answer, must be handed
// to the fasthttp engine (false), whose hardening tests cover it.
func TestLoopReadsOnlyThePlainestRequests(t *testing.T) {
	const host = "Host: acme.example.com\r\n"
	for _, c := range []struct {
		name, raw string
		ok        bool
	}{
		{"a GET", "GET /a?b=c HTTP/1.1\r\n" + host + "Accept: */*\r\n\r\n", true},
		{"a POST with a small body", "POST / HTTP/1.1\r\n" + host + "Content-Length: 5\r\n\r\n", true},
		{"a body past what is read with the header", "POST / HTTP/1.1\r\n" + host + "Content-Length: 8193\r\n\r\n", false},
		{"two lengths", "POST / HTTP/1.1\r\n" + host + "Content-Length: 5\r\nContent-Length: 5\r\n\r\n", false},
		{"a signed length", "POST / HTTP/1.1\r\n" + host + "Content-Length: +5\r\n\r\n", false},
		{"chunked", "POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n", false},
		{"a length and chunked", "POST / HTTP/1.1\r\n" + host + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"a WebSocket", "GET / HTTP/1.1\r\n" + host + "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n", false},
		{"Expect", "POST / HTTP/1.1\r\n" + host + "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n", false},
		{"HTTP/1.0", "GET / HTTP/1.0\r\n" + host + "\r\n", false},
		{"HTTP/2 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false},
		{"no Host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", false},
		{"two Hosts", "GET / HTTP/1.1\r\n" + host + "Host: other.example.com\r\n\r\n", false},
		{"an empty Host", "GET / HTTP/1.1\r\nHost: \r\n\r\n", false},
		{"an absolute target", "GET http://other.example.com/ HTTP/1.1\r\n" + host + "\r\n", false},
		{"a scheme-relative target", "GET //other.example.com/?u=https://x HTTP/1.1\r\n" + host + "\r\n", false},
		{"a fragment", "GET /a#b HTTP/1.1\r\n" + host + "\r\n", false},
		{"a space before the colon", "GET / HTTP/1.1\r\n" + host + "X-Tenant-Id : evil\r\n\r\n", false},
		{"a folded line", "GET / HTTP/1.1\r\n" + host + "X-A: a\r\n b\r\n\r\n", false},
		{"a bare CR in a value", "GET / HTTP/1.1\r\n" + host + "X-A: a\rb\r\n\r\n", false},
		{"a NUL in a value", "GET / HTTP/1.1\r\n" + host + "X-A: a\x00b\r\n\r\n", false},
		{"a line without a colon", "GET / HTTP/1.1\r\n" + host + "X-A\r\n\r\n", false},
		{"two Connections", "GET / HTTP/1.1\r\n" + host + "Connection: close\r\nConnection: keep-alive\r\n\r\n", false},
		{"a CR alone after the request line", "GET / HTTP/1.1\rX-Tenant-Id: victim\r\n" + host + "\r\n", false},
		{"a method that is no token", "G(T / HTTP/1.1\r\n" + host + "\r\n", false},
		{"too many fields", "GET / HTTP/1.1\r\n" + host + strings.Repeat("X-A: a\r\n", maxLoopFields) + "\r\n", false},
	} {
		var fields [maxLoopFields]field
		if _, ok := readClientRequest([]byte(c.raw), &fields); ok != c.ok {
			t.Errorf("%s: read %v, want %v", c.name, ok, c.ok)
		}
	}
}

// A header's end is found once, and a bare LF anywhere hands the message over.
func TestLoopFindsTheHeadersEnd(t *testing.T) {
	for _, c := range []struct {
		raw   string
		end   int
		plain bool
	}{
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nrest", 27, true},
		{"GET / HTTP/1.1\r\nHost: a\r\n", -1, true},
		{"GET / HTTP/1.1\nHost: a\r\n\r\n", -1, false},
		{"GET / HTTP/1.1\r\nHost: a\n\n", -1, false},
		{"\r\nGET / HTTP/1.1\r\n\r\n", -1, false},
	} {
		// Fed a byte at a time, as a slow client sends it.
		end, next, plain := -1, 0, true
		for i := 1; i <= len(c.raw) && end < 0 && plain; i++ {
			end, next, plain = headerEnd([]byte(c.raw[:i]), next)
		}
		if end != c.end || plain != c.plain {
			t.Errorf("%q: end %d plain %v, want %d %v", c.raw, end, plain, c.end, c.plain)
		}
	}
}

func TestLoopReadsOnlyThePlainestAnswers(t *testing.T) {
	for _, c := range []struct {
		name, raw string
		ok        bool
		length    int64
		keep      bool
	}{
		{"a 200 with a length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", true, 2, true},
		{"no reason", "HTTP/1.1 204\r\n\r\n", true, -1, true},
		{"closing", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", true, 0, false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", true, 0, false},
		{"HTTP/1.0 kept alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", true, 0, true},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", true, -1, true},
		{"chunked in HTTP/1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0, false},
		{"chunked twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0, false},
		{"gzip, chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false, 0, false},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", false, 0, false},
		{"a length and chunked", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0, false},
		{"a negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false, 0, false},
		{"an interim answer", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", false, 0, false},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\n\r\n", false, 0, false},
		{"a status of two digits", "HTTP/1.1 20 OK\r\n\r\n", false, 0, false},
		{"HTTP/2", "HTTP/2 200\r\n\r\n", false, 0, false},
		{"a space before the colon", "HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n", false, 0, false},
		{"a CR alone after the status line", "HTTP/1.1 200 OK\rContent-Length: 5\r\nContent-Length: 2\r\n\r\n", false, 0, false},
		{"an underscored length", "HTTP/1.1 200 OK\r\nContent_Length: 2\r\n\r\n", true, -1, true},
	} {
		var fields [maxLoopFields]field
		r, ok := readBackendResponse([]byte(c.raw), &fields)
		if ok != c.ok || ok && (r.length != c.length || r.keep != c.keep) {
			t.Errorf("%s: read %v (length %d, keep %v), want %v (%d, %v)", c.name, ok, r.length, r.keep, c.ok, c.length, c.keep)
		}
	}
}

// The backend gets what prepare makes of a request: hop-by-hop fields and those
// Connection names gone, the client's claims to the trusted fields dropped, the
// forwarding fields and the tenant set; from a trusted proxy its forwarding fields
// joined with the proxy's.
func TestLoopRewritesAsPrepareDoes(t *testing.T) {
	raw := "GET /x HTTP/1.1\r\nHost: ACME.example.com\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\n" +
		"X-Tenant-ID: evil\r\nX_Tenant_Id: evil\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\n" +
		"Accept: */*\r\n\r\n"
	var fields [maxLoopFields]field
	r, ok := readClientRequest([]byte(raw), &fields)
	if !ok {
		t.Fatal("not read")
	}
	ip := netip.MustParseAddr("192.0.2.1")
	got := string(appendBackendRequest(nil, &r, ip, false)) + "acme\r\n\r\n"
	want := "GET /x HTTP/1.1\r\nHost: acme.example.com\r\nAccept: */*\r\nX-Forwarded-For: 192.0.2.1\r\n" +
		"X-Forwarded-Host: acme.example.com\r\nX-Forwarded-Proto: http\r\nX-Real-Ip: 192.0.2.1\r\n" +
		"Forwarded: for=192.0.2.1;host=\"acme.example.com\";proto=http\r\nX-Tenant-Id: acme\r\n\r\n"
	if got != want {
		t.Errorf("from a client:\n%s\nwant:\n%s", got, want)
	}
	got = string(appendBackendRequest(nil, &r, ip, true)) + "acme\r\n\r\n"
	want = "GET /x HTTP/1.1\r\nHost: acme.example.com\r\nX-Real-IP: 6.6.6.6\r\nAccept: */*\r\nX-Forwarded-For: 6.6.6.6, 192.0.2.1\r\n" +
		"X-Forwarded-Host: acme.example.com\r\nX-Forwarded-Proto: http\r\n" +
		"Forwarded: for=6.6.6.6, for=192.0.2.1;host=\"acme.example.com\";proto=http\r\nX-Tenant-Id: acme\r\n\r\n"
	if got != want {
		t.Errorf("from a trusted proxy:\n%s\nwant:\n%s", got, want)
	}
	// Empty forwarding values from a trusted proxy are joined as prepare joins them.
	raw = "GET / HTTP/1.1\r\nHost: acme.example.com\r\nX-Forwarded-For: \r\nForwarded: \r\n\r\n"
	if r, ok = readClientRequest([]byte(raw), &fields); !ok {
		t.Fatal("not read")
	}
	got = string(appendBackendRequest(nil, &r, ip, true))
	if !strings.Contains(got, "\r\nX-Forwarded-For: 192.0.2.1\r\n") || !strings.Contains(got, "\r\nForwarded: for=192.0.2.1;") {
		t.Errorf("empty values from a trusted proxy:\n%s", got)
	}
}

// An IPv6 client's address is written in each forwarding field as prepare writes it,
// bracketed and quoted in Forwarded.
func TestLoopForwardsAnIPv6Client(t *testing.T) {
	var fields [maxLoopFields]field
	r, ok := readClientRequest([]byte("GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n"), &fields)
	if !ok {
		t.Fatal("not read")
	}
	got := string(appendBackendRequest(nil, &r, netip.MustParseAddr("2001:db8::1"), false))
	for _, want := range []string{"\r\nX-Forwarded-For: 2001:db8::1\r\n", "\r\nX-Real-Ip: 2001:db8::1\r\n",
		"\r\nForwarded: for=\"[2001:db8::1]\";host=\"acme.example.com\";proto=http\r\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
}

// The Forwarded field's host is quoted byte for byte as strconv.AppendQuote quotes it,
// whatever a client sent as its host: quotes, backslashes, control bytes, DEL and
// bytes past ASCII (valid UTF-8 or not) are escaped, and nothing else is.
func TestForwardedHostQuotedAsAppendQuote(t *testing.T) {
	inputs := []string{"", "acme.example.com", "acme.example.com:8080", "[2001:db8::1]:443", `a"b`, `a\b`,
		"a\x00b", "a\tb", "a\x1fb", "a\x7fb", "caf\xc3\xa9", "\xff\xfe", "a b", "~!#$%&'()*+,-./;<=>?@^_`{|}"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			if rng.IntN(4) == 0 {
				b[i] = byte(rng.IntN(256))
			} else {
				b[i] = byte(' ' + rng.IntN('~'-' '+1))
			}
		}
		inputs = append(inputs, string(b))
	}
	for _, in := range inputs {
		got := string(appendQuoted([]byte("host="), []byte(in)))
		if want := string(strconv.AppendQuote([]byte("host="), in)); got != want {
			t.Fatalf("%q quoted as %s, want %s", in, got, want)
		}
	}
}

// A chunked body is framed again as it passes, a byte at a time or whole: its data
// intact, extensions and trailers gone, and any framing the fasthttp engine would not
// read is an error.
func TestLoopFramesChunksAgain(t *testing.T) {
	for _, c := range []struct {
		name, in, data string
		rest           int // bytes past the body's end
		err            bool
	}{
		{"two chunks", "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n", "hello world", 0, false},
		{"trailers", "5\r\nhello\r\n0\r\nX-Tenant-Id: evil\r\n\r\nGET", "hello", 3, false},
		{"upper-case hex", "A\r\n0123456789\r\n0\r\n\r\n", "0123456789", 0, false},
		{"no size", "\r\nhello\r\n0\r\n\r\n", "", 0, true},
		{"a negative size", "-5\r\nhello\r\n0\r\n\r\n", "", 0, true},
		{"a size too large", "1000000000000000\r\n", "", 0, true},
		{"data longer than its size", "3\r\nhello\r\n0\r\n\r\n", "", 0, true},
		{"a bare LF", "5\nhello\r\n0\r\n\r\n", "", 0, true},
		{"junk after the size", "5 x\r\nhello\r\n0\r\n\r\n", "", 0, true},
		{"whitespace after the size", "5 \r\nhello\r\n0\r\n\r\n", "hello", 0, false},
		{"an extension after whitespace", "5 ;ext\r\nhello\r\n0\r\n\r\n", "", 0, true},
	} {
		for _, step := range []int{1, len(c.in)} {
			var d chunks
			var out []byte
			var err error
			took := 0
			for i := 0; i < len(c.in) && err == nil && !d.done(); i += step {
				var n int
				out, n, err = d.feed(out, []byte(c.in[i:min(i+step, len(c.in))]))
				took = i + n
			}
			if c.err {
				if err == nil {
					t.Errorf("%s (%d a time): no error", c.name, step)
				}
				continue
			}
			if err != nil || !d.done() || len(c.in)-took != c.rest {
				t.Errorf("%s (%d a time): err %v, done %v, %d bytes left, want %d", c.name, step, err, d.done(), len(c.in)-took, c.rest)
				continue
			}
			var data strings.Builder
			var cd chunks
			if _, _, err := cd.feed(nil, out); err != nil || !cd.done() {
				t.Errorf("%s (%d a time): the chunks sent are not read again: %v %q", c.name, step, err, out)
			}
			for rest := string(out); ; {
				var size int
				if _, err := fmt.Sscanf(rest, "%x\r\n", &size); err != nil || size == 0 {
					break
				}
				rest = rest[strings.Index(rest, "\r\n")+2:]
				data.WriteString(rest[:size])
				rest = rest[size+2:]
			}
			if data.String() != c.data || strings.Contains(string(out), "ext") || strings.Contains(string(out), "evil") {
				t.Errorf("%s (%d a time): sent %q, want the data %q alone", c.name, step, out, c.data)
			}
		}
	}
}

// BenchmarkLoopRewrite measures the loop engine's work on a request's header: reading
// it and writing the backend's (wrk's request, as hack/bench-proxy.sh sends it).
//
//	go test -run '^$' -bench LoopRewrite -benchmem ./proxy/
func BenchmarkLoopRewrite(b *testing.B) {
	raw := []byte("GET / HTTP/1.1\r\nHost: bench.example.com\r\n\r\n")
	ip := netip.MustParseAddr("127.0.0.1")
	var fields [maxLoopFields]field
	out := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		r, ok := readClientRequest(raw, &fields)
		if !ok {
			b.Fatal("not read")
		}
		out = appendBackendRequest(out[:0], &r, ip, false)
	}
}
