package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/routes"
)

// TestCertificatesReportedInStatus: what the proxies record in Redis of a granted
// hostname's certificate reaches the TenantRoute's status and events: Pending before
// any, Issued with issuer and expiry, a renewal failure while the certificate is
// still served, Failed once it expired. A record forged without the shared key is
// ignored.
func TestCertificatesReportedInStatus(t *testing.T) {
	_, kv := startRedisKV(t)
	o := newOperator(t, "certs")
	o.certBook, o.certInterval = kv, 200*time.Millisecond
	o.start()
	const host = "shop.auth.example.com"
	o.create(o.route("shop", host))
	cert := func() (v1.HostnameCertificate, error) {
		tr := o.get("shop")
		if len(tr.Status.Certificates) != 1 || tr.Status.Certificates[0].Hostname != host {
			return v1.HostnameCertificate{}, fmt.Errorf("certificates %+v", tr.Status.Certificates)
		}
		return tr.Status.Certificates[0], nil
	}
	expect := func(state v1.CertificateState, issuer, message string) {
		t.Helper()
		eventually(t, 20*time.Second, func() error {
			c, err := cert()
			if err != nil {
				return err
			}
			if c.State != state || c.Issuer != issuer || (message == "") != (c.Message == "") ||
				(message != "" && !strings.Contains(c.Message, message)) {
				return fmt.Errorf("certificate %+v, want %s from %q with message %q", c, state, issuer, message)
			}
			return nil
		})
	}
	expect(v1.CertificatePending, "", "first HTTPS request")

	ctx := context.Background()
	notAfter := time.Now().Add(90 * 24 * time.Hour).UTC().Truncate(time.Second)
	if err := kv.RecordCert(ctx, host, routes.CertRecord{Issuer: "Pebble Intermediate CA", NotAfter: notAfter, Source: "acme", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	expect(v1.CertificateIssued, "Pebble Intermediate CA", "")
	if c, _ := cert(); c.NotAfter == nil || !c.NotAfter.Time.Equal(notAfter) || c.Source != "acme" {
		t.Fatalf("issued certificate %+v, want notAfter %s", c, notAfter)
	}
	eventually(t, 10*time.Second, func() error {
		return expectEvent(o.get("shop"), "TenantRoute", v1.ReasonCertificateIssued, "Pebble Intermediate CA")
	})

	if err := kv.RecordCert(ctx, host, routes.CertRecord{Issuer: "Pebble Intermediate CA", NotAfter: notAfter, Source: "acme",
		Error: "urn:ietf:params:acme:error:connection: timeout during connect", Renewal: true, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	expect(v1.CertificateIssued, "Pebble Intermediate CA", "renewal failed")
	eventually(t, 10*time.Second, func() error {
		return expectEvent(o.get("shop"), "TenantRoute", v1.ReasonCertificateRenewalFailed, "timeout during connect")
	})

	// Forged: written by someone with Redis access but not the key.
	forger := routes.KV{Client: kv.Client, Key: []byte("not-the-key-0123456789abcdef0123456789")}
	if err := forger.RecordCert(ctx, host, routes.CertRecord{Issuer: "Evil CA", NotAfter: notAfter, Source: "acme", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	expect(v1.CertificatePending, "", "first HTTPS request")

	expired := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	if err := kv.RecordCert(ctx, host, routes.CertRecord{Issuer: "Pebble Intermediate CA", NotAfter: expired, Source: "acme", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	expect(v1.CertificateFailed, "Pebble Intermediate CA", "expired")
	eventually(t, 10*time.Second, func() error {
		return expectEvent(o.get("shop"), "TenantRoute", v1.ReasonCertificateFailed, "expired")
	})
}
