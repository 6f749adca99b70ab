package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"sync"
	"time"

	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/tenantroute/tenantroute-operator/internal/clip"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// servedCerts remembers, per routed hostname, the certificate last reported, so that a
// record is written when it changes (or has aged) rather than on every handshake;
// writes go out from one goroutine, never from the handshake. A write that is dropped
// or fails is forgotten, so the next handshake tries again.
type servedCerts struct {
	book   routes.CertBook
	mu     sync.Mutex
	last   map[string]routes.CertRecord
	serial map[string]string
	writes chan certWrite
}

type certWrite struct {
	host string
	rec  routes.CertRecord
}

const (
	// maxServedRemembered bounds the memory of reported certificates; past it the
	// memory starts again (a record is then written again, once, on its next handshake).
	maxServedRemembered = 200_000
	// recordRefresh is how old a record may grow before a handshake writes it again,
	// well within its TTL in the shared cache.
	recordRefresh = 30 * 24 * time.Hour
)

func newServedCerts(book routes.CertBook) *servedCerts {
	s := &servedCerts{book: book, last: map[string]routes.CertRecord{}, serial: map[string]string{}}
	if book != nil {
		s.writes = make(chan certWrite, 1024)
		go s.write()
	}
	return s
}

func (s *servedCerts) write() {
	for w := range s.writes {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := s.book.RecordCert(ctx, w.host, w.rec); err != nil {
			certRecordErrors.Inc()
			s.forget(w.host)
		}
		cancel()
	}
}

func (s *servedCerts) send(host string, rec routes.CertRecord) {
	if s.writes == nil {
		return
	}
	select {
	case s.writes <- certWrite{host, rec}:
	default:
		certRecordErrors.Inc()
		s.forget(host)
	}
}

// noted reports whether c is the certificate recorded for host, recently enough.
func (s *servedCerts) noted(host string, c *tls.Certificate) bool {
	if c.Leaf == nil {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serial[host] == c.Leaf.SerialNumber.String() && time.Since(s.last[host].At) < recordRefresh
}

func (s *servedCerts) note(host string, c *tls.Certificate, source string) {
	leaf := c.Leaf
	if leaf == nil {
		return
	}
	s.mu.Lock()
	if len(s.serial) >= maxServedRemembered {
		clear(s.serial)
		clear(s.last)
	}
	rec := routes.CertRecord{Issuer: issuerName(leaf), NotAfter: leaf.NotAfter, Source: source, At: time.Now()}
	s.serial[host] = leaf.SerialNumber.String()
	s.last[host] = rec
	s.mu.Unlock()
	setExpiry(host, leaf.NotAfter)
	s.send(host, rec)
}

func (s *servedCerts) failed(host, msg string, renewal bool) {
	// On a rune boundary: a cut inside a character is stored as U+FFFD, never equal
	// to the next sync's text, and the route's status was written again every sync.
	msg = clip.String(msg, 512)
	s.mu.Lock()
	rec := s.last[host] // the certificate still served, if any
	rec.Error, rec.Renewal, rec.At = msg, renewal, time.Now()
	s.last[host] = rec
	s.mu.Unlock()
	s.send(host, rec)
}

// forget makes the next handshake for host record its certificate again (and clear
// a recorded failure).
func (s *servedCerts) forget(host string) {
	s.mu.Lock()
	delete(s.serial, host)
	s.mu.Unlock()
}

// sweepExpiries sets the expiry gauge's hostnames to what is held now: the mounted
// certificate or the one in the ACME cache, renewed in the background included; a
// hostname with neither any more (its route gone, its certificate evicted) leaves the
// gauge, which would otherwise warn of a certificate nobody serves.
func (m *Manager) sweepExpiries() {
	for host := range expiryHosts() {
		var notAfter time.Time
		if m.mounted != nil {
			if c := m.mounted.match(host); c != nil {
				notAfter = c.Leaf.NotAfter
			}
		}
		if notAfter.IsZero() && m.cache != nil {
			for _, c := range m.cache.AllMatchingCertificates(host) {
				if c.Leaf != nil && c.Leaf.NotAfter.After(notAfter) {
					notAfter = c.Leaf.NotAfter
				}
			}
		}
		setExpiry(host, notAfter)
	}
}

// expirySweep is how often the expiry gauge is brought in line with what is held.
const expirySweep = 5 * time.Minute

// Run keeps the certificates current until ctx ends: the mounted ones read again
// every ReloadInterval, the expiry gauge swept every expirySweep.
func (m *Manager) Run(ctx context.Context) {
	log := logf.FromContext(ctx).WithName("certificates")
	reload := time.NewTicker(m.opts.ReloadInterval)
	defer reload.Stop()
	sweep := time.NewTicker(expirySweep)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload.C:
			if m.mounted == nil {
				continue
			}
			if err := m.mounted.reload(); err != nil {
				log.Error(err, "reloading mounted certificates; the previous ones are still served")
			}
		case <-sweep.C:
			m.sweepExpiries()
		}
	}
}

func issuerName(c *x509.Certificate) string {
	if c.Issuer.CommonName != "" {
		return c.Issuer.CommonName
	}
	if len(c.Issuer.Organization) > 0 {
		return c.Issuer.Organization[0]
	}
	return c.Issuer.String()
}
