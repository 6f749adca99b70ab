package main

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// writeCert writes the certificate nginx and the proxy both serve, as a mounted TLS
// Secret holds it: bench.example.com, and 127.0.0.1 as a name too (wrk sends the
// URL's host as SNI).
func writeCert(dir string) error {
	_, _, _, err := testenv.WriteSelfSigned(dir, "tls", []string{host, "127.0.0.1"}, nil)
	return err
}

// quiet drops the reverse proxy's log of requests h2load abandons when a run ends.
var quiet = log.New(io.Discard, "", 0)

// serveH2 is the option measured for HTTP/2 to clients: Go's net/http server (which
// speaks HTTP/2 over TLS) in front, looking routes up through the same chain and
// forwarding with net/http's reverse proxy. It is a measurement prototype, not the
// proxy: none of the hardening of the fasthttp engine is in it.
func serveH2(addr, certDir string, chain *proxy.Chain) error {
	transport := &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Second}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, err := routes.NormalizeHost([]byte(r.Host), nil)
		if err != nil {
			http.Error(w, "invalid host", http.StatusBadRequest)
			return
		}
		route, _ := chain.Lookup(r.Context(), h)
		if route == nil || len(route.Backends) == 0 {
			http.Error(w, "no route", http.StatusNotFound)
			return
		}
		target, err := url.Parse(route.Backends[0])
		if err != nil {
			http.Error(w, "bad backend", http.StatusBadGateway)
			return
		}
		rp := &httputil.ReverseProxy{Transport: transport, ErrorLog: quiet, Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Host = pr.In.Host
		}}
		rp.ServeHTTP(w, r)
	})
	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	return srv.ListenAndServeTLS(filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key"))
}
