// Command proxy runs the tenantroute proxy with one route, for measuring the
// forwarding engine against nginx under the same load, and the cost of a Redis
// outage: with -redis, routes come from memory, then Redis, then a lookup endpoint
// served in this process.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/proxy/certs"
	"github.com/tenantroute/tenantroute-operator/routes"
)

const host = "bench.example.com"

// static routes bench.example.com and, with -hosts N, t0 to tN-1.bench.example.com
// (hack/bench-proxy.sh's many-hosts round) to one backend.
type static struct {
	route routes.Route
	hosts map[string]struct{}
}

func (static) Name() string { return "static" }

// InMemory: the routes are in memory (proxy.InMemory).
func (static) InMemory() bool { return true }

func (s static) Lookup(_ context.Context, h string) (routes.Route, error) {
	if _, ok := s.hosts[h]; !ok && h != host {
		return routes.Route{}, routes.ErrNotFound
	}
	return s.route, nil
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9002", "address")
	backend := flag.String("backend", "http://127.0.0.1:9001", "backend URL")
	redisAddr := flag.String("redis", "", "Redis address: look routes up in Redis, then in a lookup endpoint")
	ttl := flag.Duration("route-ttl", 30*time.Second, "in-memory route TTL")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here until interrupted")
	metricsAddr := flag.String("metrics", "", "serve the proxy's Prometheus metrics on this address")
	tlsListen := flag.String("tls-listen", "", "also serve HTTPS here, with the certificate in -cert-dir")
	certDir := flag.String("cert-dir", "", "directory with tls.crt and tls.key")
	genCert := flag.String("gen-cert", "", "write a certificate for bench.example.com (and 127.0.0.1, which wrk sends as SNI) into this directory and exit")
	h2Listen := flag.String("h2-listen", "", "also serve HTTP/2 over TLS here through net/http (a front sharing the routing chain), for comparison")
	hosts := flag.Int("hosts", 0, "also route t0 to tN-1.bench.example.com")
	engine := flag.String("engine", proxy.DefaultEngine, "the engine of the plain listener: fasthttp or loop (without -tls-listen)")
	flag.Parse()
	if *genCert != "" {
		if err := writeCert(*genCert); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, os.Interrupt)
		go func() { <-stop; pprof.StopCPUProfile(); f.Close(); os.Exit(0) }()
	}
	src := static{route: routes.Route{Tenant: "bench", Region: "bench", Backends: []string{*backend}}, hosts: map[string]struct{}{}}
	for i := range *hosts {
		src.hosts[fmt.Sprintf("t%d.%s", i, host)] = struct{}{}
	}
	layers := []proxy.Layer{src}
	if *redisAddr != "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		token := []byte("bench-lookup-token-0123456789")
		go func() { log.Fatal(http.Serve(ln, routes.LookupHandler(src, token, routes.Normalize))) }()
		client, err := routes.NewRedisClient(routes.RedisOptions{Addrs: []string{*redisAddr}})
		if err != nil {
			log.Fatal(err)
		}
		kv := routes.KV{Client: client, Key: []byte("bench-hmac-key-0123456789abcdef0123")}
		if err := kv.Put(context.Background(), map[string]routes.Route{host: src.route}); err != nil {
			log.Fatal(err)
		}
		layers = []proxy.Layer{kv, routes.HTTPSource{BaseURL: "http://" + ln.Addr().String(), Token: token}}
	}
	if *metricsAddr != "" {
		registry := prometheus.NewRegistry()
		if err := proxy.Register(registry); err != nil {
			log.Fatal(err)
		}
		if err := certs.Register(registry); err != nil {
			log.Fatal(err)
		}
		go func() {
			log.Fatal(http.ListenAndServe(*metricsAddr, promhttp.HandlerFor(registry, promhttp.HandlerOpts{})))
		}()
	}
	chain := proxy.NewChain(proxy.ChainOptions{TTL: *ttl}, layers...)
	p := proxy.New(chain, proxy.Options{Engine: *engine})
	if *tlsListen != "" {
		m, err := certs.New(certs.Options{CertDir: *certDir}, chain)
		if err != nil {
			log.Fatal(err)
		}
		if err := p.EnableTLS(proxy.TLSOptions{Listen: *tlsListen, Certificates: m}); err != nil {
			log.Fatal(err)
		}
	}
	if *h2Listen != "" {
		go func() { log.Fatal(serveH2(*h2Listen, *certDir, chain)) }()
	}
	srv := &proxy.Server{Proxy: p, Listen: *listen}
	log.Fatal(srv.Start(context.Background()))
}
