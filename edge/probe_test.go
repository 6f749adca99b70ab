package edge

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A health endpoint is outside the operator: its status line reaches the
// EdgeProvider's conditions, events and logs at every probe, whatever its size. The
// probe's own URL, as long as the CRD allows, still leaves the answer in view.
func TestAProbeQuotesAnAnswerOfAnySizeInAFewHundredBytes(t *testing.T) {
	path := "/" + strings.Repeat("healthz/", 240) // 1,921 bytes; the CRD allows a URL of 2,048
	for _, tc := range []struct {
		name   string
		answer string
		ok     bool
		says   string
	}{
		{"a long reason phrase", "HTTP/1.1 200 " + strings.Repeat("fine ", 8000) + "\r\nContent-Length: 0\r\n\r\n", true, " 200 fine"},
		{"megabytes of headers", "HTTP/1.1 503 Service Unavailable\r\n" +
			strings.Repeat("X-Padding: "+strings.Repeat("p", 1000)+"\r\n", 2000) + "Content-Length: 0\r\n\r\n", false, "exceeded"},
		{"a short answer", "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", false, " 503 Service Unavailable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
							_, _ = c.Write([]byte(tc.answer))
						}
					}()
				}
			}()
			url := "http://" + ln.Addr().String() + path
			p := NewMonitor().probe(context.Background(), Check{URL: url, Timeout: 5 * time.Second})
			if p.OK != tc.ok || !strings.Contains(p.Message, tc.says) || !strings.Contains(p.Message, url) {
				t.Errorf("probe OK %v, message %.200q ... %.200q; want OK %v, the URL and %q",
					p.OK, p.Message, p.Message[max(0, len(p.Message)-200):], tc.ok, tc.says)
			}
			if quoted := len(p.Message) - len(url); quoted > maxProbeAnswer+16 {
				t.Errorf("the probe's message quotes %d bytes of the answer", quoted)
			}
		})
	}
}

// An edge probed by its address with hostHeader set (a CDN's edge, say) is asked for
// the host's certificate, and that certificate is checked against the host: the
// probe is a client of the host.
func TestAProbeByAddressAsksForTheHostsCertificate(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), DNSNames: []string{"probe.example.com", "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	var sni atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Host, "probe.example.com") {
			w.WriteHeader(http.StatusMisdirectedRequest)
		}
	}))
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, // without SNI
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni.Store(h.ServerName)
			return &cert, nil
		}}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	m := NewMonitor()
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	m.client.Transport.(*http.Transport).TLSClientConfig.RootCAs = roots
	for _, host := range []string{"probe.example.com", "probe.example.com:443"} {
		sni.Store("")
		p := m.probe(context.Background(), Check{URL: srv.URL + "/healthz", HostHeader: host, Timeout: 5 * time.Second})
		if !p.OK || sni.Load() != "probe.example.com" {
			t.Errorf("hostHeader %s: probe OK %v (%s), SNI %q; want OK and SNI probe.example.com", host, p.OK, p.Message, sni.Load())
		}
	}
	// A URL that names a host keeps its own name for TLS, whatever the Host header (an
	// edge whose certificate names the URL's host, not the header's, stays healthy).
	sni.Store("")
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if p := m.probe(context.Background(), Check{URL: "https://localhost:" + port + "/healthz", HostHeader: "probe.example.com", Timeout: 5 * time.Second}); !p.OK || sni.Load() != "localhost" {
		t.Errorf("a URL naming a host: probe OK %v (%s), SNI %q; want OK and SNI localhost", p.OK, p.Message, sni.Load())
	}
	// Without hostHeader the certificate does not name the address: a failure.
	if p := m.probe(context.Background(), Check{URL: srv.URL + "/healthz", Timeout: 5 * time.Second}); p.OK || !strings.Contains(p.Message, "127.0.0.1 because") {
		t.Errorf("a certificate for another name: OK %v (%s), want a failure naming the address", p.OK, p.Message)
	}
}
