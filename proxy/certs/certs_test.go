package certs

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// routedNames is a Router that knows a fixed set of hostnames.
type routedNames map[string]bool

func (r routedNames) Routed(_ context.Context, host string, _ bool) (bool, error) {
	return r[host], nil
}

// TestExpiryGaugeFollowsWhatIsServed: the expiry gauge's hostnames follow the
// certificates held, not the last handshake: a Secret renewed behind a quiet hostname
// moves its expiry, and a certificate no longer held leaves the gauge (which would
// otherwise page about a certificate nobody serves).
func TestExpiryGaugeFollowsWhatIsServed(t *testing.T) {
	ca := testenv.NewCA(t)
	dir := t.TempDir()
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 10, "*.auth.example.com")
	m, err := New(Options{CertDir: dir, ReloadInterval: time.Hour}, routedNames{"quiet.auth.example.com": true})
	if err != nil {
		t.Fatal(err)
	}
	first, err := m.GetCertificate(&tls.ClientHelloInfo{ServerName: "quiet.auth.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	expiry := func() (time.Time, bool) {
		expiryMu.Lock()
		defer expiryMu.Unlock()
		e, ok := expiries["quiet.auth.example.com"]
		return e, ok
	}
	if e, ok := expiry(); !ok || !e.Equal(first.Leaf.NotAfter) {
		t.Fatalf("expiry %s (%v), want %s", e, ok, first.Leaf.NotAfter)
	}
	time.Sleep(1100 * time.Millisecond) // a later NotAfter, at the certificate's 1 s resolution
	ca.WriteSecret(t, filepath.Join(dir, "wildcard"), 11, "*.auth.example.com")
	if err := m.mounted.reload(); err != nil {
		t.Fatal(err)
	}
	m.sweepExpiries()
	if e, _ := expiry(); !e.After(first.Leaf.NotAfter) {
		t.Fatalf("after the Secret's renewal and a sweep, expiry %s, want after %s", e, first.Leaf.NotAfter)
	}
	if err := os.RemoveAll(filepath.Join(dir, "wildcard")); err != nil {
		t.Fatal(err)
	}
	_ = m.mounted.reload()
	m.sweepExpiries()
	if e, ok := expiry(); ok {
		t.Fatalf("a certificate no longer held is still in the gauge: %s", e)
	}
}
