package proxy

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// BenchmarkForward measures the proxy's own cost per request, without the network:
// client, proxy and backend talk over in-memory connections. "bare" is a forwarder
// that does nothing but HostClient.Do, for comparison.
//
//	go test -run '^$' -bench Forward -benchmem ./proxy/
func BenchmarkForward(b *testing.B) {
	body := []byte(strings.Repeat("x", 511) + "\n")
	backendLn := fasthttputil.NewInmemoryListener()
	defer backendLn.Close()
	go func() {
		_ = (&fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBody(body) }}).Serve(backendLn)
	}()
	dial := func(string) (net.Conn, error) { return backendLn.Dial() }

	run := func(b *testing.B, handler fasthttp.RequestHandler, srv *fasthttp.Server, wrap func(net.Listener) net.Listener) {
		ln := fasthttputil.NewInmemoryListener()
		defer ln.Close()
		srv.Handler = handler
		go func() { _ = srv.Serve(wrap(ln)) }()
		client := &fasthttp.HostClient{Addr: "proxy", Dial: func(string) (net.Conn, error) { return ln.Dial() }, MaxConns: 64}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.SetRequestURI("http://bench.example.com/")
			for pb.Next() {
				if err := client.DoTimeout(req, resp, 5*time.Second); err != nil || resp.StatusCode() != 200 {
					b.Fatalf("%v %d", err, resp.StatusCode())
				}
			}
		})
	}

	b.Run("bare", func(b *testing.B) {
		up := &fasthttp.HostClient{Addr: "backend", Dial: dial, MaxConns: 1024}
		run(b, func(ctx *fasthttp.RequestCtx) {
			if err := up.Do(&ctx.Request, &ctx.Response); err != nil {
				ctx.Error(err.Error(), 502)
			}
		}, &fasthttp.Server{}, func(ln net.Listener) net.Listener { return ln })
	})
	b.Run("proxy", func(b *testing.B) {
		p := New(NewChain(ChainOptions{TTL: time.Hour}, &fakeLayer{name: "source", routes: map[string]Route{
			"bench.example.com": {Tenant: "bench", Region: "bench", Backends: []string{"http://backend:80"}},
		}}), Options{})
		u, err := p.upstream("http://backend:80")
		if err != nil {
			b.Fatal(err)
		}
		u.pool.Dial = dial
		run(b, p.serve, p.newServer(), p.Listener)
	})
}
