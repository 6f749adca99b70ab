package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// writeCert writes an ECDSA P-256 certificate for bench.example.com as a mounted TLS
// Secret would hold it; nginx and the proxy serve the same one.
func writeCert(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{host, "127.0.0.1"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
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
