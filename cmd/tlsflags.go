package main

import (
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"
	uzap "go.uber.org/zap"

	"github.com/tenantroute/tenantroute-operator/proxy"
	"github.com/tenantroute/tenantroute-operator/proxy/certs"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// tlsFlags configure the proxy's HTTPS listener; README "HTTPS and certificates"
// explains them.
type tlsFlags struct {
	listen       string
	certDir      string
	acmeCA       string
	acmeEmail    string
	acmeRoots    string
	acmeStore    string
	redirectPort int
	noHTTP01     bool
	noTLSALPN01  bool
	reportCerts  bool
	statusEvery  time.Duration
}

func (t *tlsFlags) on() bool { return t.listen != "0" && t.listen != "" }

func bindTLSFlags(fs *flag.FlagSet, t *tlsFlags) {
	fs.StringVar(&t.listen, "tls-bind-address", "0", "Address of the proxy's HTTPS listener, e.g. :8443; 0 (the default) serves plain HTTP only.")
	fs.StringVar(&t.certDir, "tls-cert-dir", "", "Directory of mounted kubernetes.io/tls Secrets (tls.crt and tls.key in it or in each directory in it), chosen by SNI before ACME; reloaded when they change.")
	fs.StringVar(&t.acmeCA, "acme-ca", "", "ACME directory URL for on-demand certificates of routed hostnames (e.g. https://acme-v02.api.letsencrypt.org/directory); empty: no ACME.")
	fs.StringVar(&t.acmeEmail, "acme-email", "", "Contact address of the ACME account (expiry and policy mail from the CA).")
	fs.StringVar(&t.acmeRoots, "acme-ca-roots", "", "PEM file of the roots trusted for the ACME CA's own API (a private CA); default: the system's.")
	fs.StringVar(&t.acmeStore, "acme-storage-dir", "/var/lib/tenantroute/acme", "Where the ACME account and certificates are kept when there is no Redis (--redis-addr): then each replica orders its own.")
	fs.IntVar(&t.redirectPort, "https-redirect-port", 443, "Plain-HTTP requests for a hostname the proxy has a certificate for are redirected to HTTPS on this port (ACME challenges excepted); 0 turns the redirect off.")
	fs.BoolVar(&t.noHTTP01, "acme-disable-http-01", false, "Do not answer ACME with HTTP-01 (on the plain listener).")
	fs.BoolVar(&t.reportCerts, "certificate-status", false, "Report each granted hostname's certificate in TenantRoute status, from what the proxies record in Redis; on by default when the embedded proxy serves HTTPS. Set it when a standalone proxy fleet serves HTTPS.")
	fs.DurationVar(&t.statusEvery, "certificate-status-interval", time.Minute, "How often the certificate records are read into TenantRoute status.")
	fs.BoolVar(&t.noTLSALPN01, "acme-disable-tls-alpn-01", false, "Do not answer ACME with TLS-ALPN-01 (on the HTTPS listener).")
}

// enable turns HTTPS on for p when --tls-bind-address is set; ACME orders
// certificates only for hostnames chain routes. Certificates, keys and the ACME
// account go to Redis when there is one (every replica shares them), else to
// --acme-storage-dir. Certificate records (for the TenantRoute status) go to book.
func (t *tlsFlags) enable(p *proxy.Proxy, chain *proxy.Chain, kv *routes.KV, book routes.CertBook) error {
	if !t.on() {
		if t.certDir != "" || t.acmeCA != "" {
			return errors.New("--tls-cert-dir and --acme-ca need --tls-bind-address")
		}
		return nil
	}
	log, err := uzap.NewProduction()
	if err != nil {
		return err
	}
	opts := certs.Options{
		CertDir: t.certDir, Book: book, Logger: log.Named("tls"),
		ACME: certs.ACMEOptions{CA: t.acmeCA, Email: t.acmeEmail,
			DisableHTTPChallenge: t.noHTTP01, DisableTLSALPNChallenge: t.noTLSALPN01},
	}
	if t.redirectPort < 0 || t.redirectPort > 65535 {
		return fmt.Errorf("--https-redirect-port %d is not a port", t.redirectPort)
	}
	if t.acmeRoots != "" {
		pem, err := os.ReadFile(t.acmeRoots)
		if err != nil {
			return fmt.Errorf("reading --acme-ca-roots: %w", err)
		}
		opts.ACME.RootCAs = x509.NewCertPool()
		if !opts.ACME.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("no certificate in --acme-ca-roots %s", t.acmeRoots)
		}
	}
	if t.acmeCA != "" {
		if kv != nil {
			if opts.ACME.Storage, err = certs.NewRedisStorage(*kv); err != nil {
				return err
			}
		} else {
			opts.ACME.Storage = &certmagic.FileStorage{Path: t.acmeStore}
		}
	}
	m, err := certs.New(opts, chain)
	if err != nil {
		return err
	}
	return p.EnableTLS(proxy.TLSOptions{Listen: t.listen, Certificates: m, RedirectPort: t.redirectPort})
}

// registerProxyMetrics adds the proxy's metrics, its HTTPS included, to a registry.
func registerProxyMetrics(r prometheus.Registerer) error {
	if err := proxy.Register(r); err != nil {
		return err
	}
	return certs.Register(r)
}
