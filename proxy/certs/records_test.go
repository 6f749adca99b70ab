package certs

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tenantroute/tenantroute-operator/routes"
)

type bookFunc func(host string, r routes.CertRecord)

func (f bookFunc) RecordCert(_ context.Context, host string, r routes.CertRecord) error {
	f(host, r)
	return nil
}

func (bookFunc) CertRecords(context.Context, []string) (map[string]routes.CertRecord, error) {
	return nil, nil
}

// An ACME server's error may be in any language: cut inside a character, the
// message was stored as U+FFFD by the API server, never equal to the next sync's, and
// the route's status and a CertificateFailed event were written at every sync.
func TestACertificateFailureIsRecordedAsValidText(t *testing.T) {
	recorded := make(chan routes.CertRecord, 1)
	s := newServedCerts(bookFunc(func(_ string, r routes.CertRecord) { recorded <- r }))
	s.failed("shop.example.com", "a"+strings.Repeat("é", 400), false) // a cut at 512 bytes falls inside an é
	select {
	case r := <-recorded:
		if !utf8.ValidString(r.Error) || len(r.Error) > 512 || !strings.HasPrefix(r.Error, "aé") {
			t.Errorf("recorded %q (%d bytes)", r.Error, len(r.Error))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the failure was not recorded")
	}
}
