package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// FuzzRequestStream sends arbitrary bytes as a client's request stream through the
// proxy to a recording backend. Whatever the bytes, the backend may only see requests
// that a strict HTTP/1.1 parser (net/http's) finds in the stream, in order and with
// the same bodies — so no byte can be framed as a request the client's framing did
// not make — and never a tenant header other than the proxy's own.
//
//	go test -run '^$' -fuzz FuzzRequestStream -fuzztime 10m ./proxy/
func FuzzRequestStream(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: acme.example.com\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 5\r\n\r\nhelloGET /2 HTTP/1.1\r\nHost: acme.example.com\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: acme.example.com\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabcGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nTransfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\nabc",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nConnection: Content-Length\r\nContent-Length: 5\r\n\r\nhello",
		"GET / HTTP/1.1\r\nHost: acme.example.com\r\nX_Tenant_ID: evil\r\nx-tenant-id: evil\r\n X-Tenant-ID: folded\r\n\r\n",
		"GET / HTTP/1.1\nHost: acme.example.com\nContent-Length: 0\n\n",
		"GET /ws HTTP/1.1\r\nHost: acme.example.com\r\n" + wsHandshake + "\r\nGET / HTTP/1.1\r\nHost: acme.example.com\r\nX-Tenant-ID: victim\r\n\r\n",
		"GET http://acme.example.com/abs HTTP/1.1\r\nHost: other.example.com\r\n\r\n",
		"POST / HTTP/1.0\r\nHost: acme.example.com\r\nContent-Length: 2\r\n\r\nhi",
		"POST / HTTP/1.1\r\nHost: acme.example.com\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
	} {
		f.Add([]byte(seed))
	}
	rec := newRecorder(f, nil)
	tp := startProxy(f, map[string]Route{
		"acme.example.com": {Tenant: "acme", Region: "eu", Backends: []string{rec.URL}},
	}, Options{ClientHeaderTimeout: time.Second, ClientReadTimeout: time.Second, UpstreamTimeout: 2 * time.Second})
	addr := tp.url[len("http://"):]
	f.Fuzz(func(t *testing.T, stream []byte) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		go func() {
			_, _ = conn.Write(stream)
			_ = conn.(*net.TCPConn).CloseWrite()
		}()
		_, _ = io.Copy(io.Discard, conn)
		// The proxy is done with the connection; let the backend finish recording.
		for deadline := time.Now().Add(2 * time.Second); rec.inFlight.Load() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		seen := rec.take()
		checkTenant(t, seen)
		allowed := strictRequests(stream)
		j := 0
		for _, got := range seen {
			for j < len(allowed) && (allowed[j].method != got.Method || !bytes.Equal(allowed[j].body, got.Body)) {
				j++
			}
			if j == len(allowed) {
				t.Fatalf("the backend saw %s %s with body %q; the client's framing allows only %+v", got.Method, got.Path, got.Body, allowed)
			}
			j++
		}
	})
}

type framedRequest struct {
	method string
	body   []byte
}

// strictRequests is what net/http's parser frames in a client's stream, up to the
// first request it refuses.
func strictRequests(stream []byte) []framedRequest {
	var out []framedRequest
	br := bufio.NewReader(bytes.NewReader(stream))
	for {
		// A server may ignore empty lines before a request line (RFC 9112 2.2).
		for {
			b, err := br.Peek(1)
			if err != nil || (b[0] != '\r' && b[0] != '\n') {
				break
			}
			_, _ = br.ReadByte()
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return out
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return out
		}
		out = append(out, framedRequest{req.Method, body})
		if req.Close {
			return out
		}
	}
}
