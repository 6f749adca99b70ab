package routes

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// CertRecord is what the proxies report of a hostname's certificate: the one they
// serve and the last failure to obtain or renew one. Proxies write it (they hold the
// certificates); the operator reads it into the TenantRoute's status, events and
// metrics (it holds the API credentials). A proxy may have no API access at all.
type CertRecord struct {
	// Issuer and NotAfter describe the certificate served; NotAfter is zero while none
	// has been served.
	Issuer   string    `json:"issuer,omitempty"`
	NotAfter time.Time `json:"notAfter,omitzero"`
	// Source is "acme" (obtained on demand) or "secret" (a mounted TLS Secret).
	Source string `json:"source,omitempty"`
	// Error is the last failure to obtain (or, with Renewal, to renew) a certificate;
	// a success clears it.
	Error   string `json:"error,omitempty"`
	Renewal bool   `json:"renewal,omitempty"`
	// At is when the record was written.
	At time.Time `json:"at"`
}

// CertBook is where certificate records meet: Redis when the proxies share it, memory
// when the proxy runs inside the operator without Redis.
type CertBook interface {
	RecordCert(ctx context.Context, host string, r CertRecord) error
	// CertRecords returns the records of hosts that have one.
	CertRecords(ctx context.Context, hosts []string) (map[string]CertRecord, error)
}

// certKeyPrefix namespaces certificate records in the shared cache.
const certKeyPrefix = "tenantroute:cert:"

// certRecordTTL outlives a certificate's lifetime: a record is written again whenever
// a proxy serves a new certificate.
const certRecordTTL = 120 * 24 * time.Hour

func certName(host string) string { return "cert:" + host }

// RecordCert writes host's record, authenticated like the routes.
func (k KV) RecordCert(ctx context.Context, host string, r CertRecord) error {
	payload, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return k.Client.Set(ctx, certKeyPrefix+host, k.sealValue(certName(host), payload), certRecordTTL).Err()
}

// CertRecords reads the records of hosts; a forged or malformed one is left out (and
// reported through Rejected), as if there were none.
func (k KV) CertRecords(ctx context.Context, hosts []string) (map[string]CertRecord, error) {
	out := map[string]CertRecord{}
	if len(hosts) == 0 {
		return out, nil
	}
	pipe := k.Client.Pipeline()
	gets := make([]*redis.StringCmd, len(hosts))
	for i, h := range hosts {
		gets[i] = pipe.Get(ctx, certKeyPrefix+h)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	for i, h := range hosts {
		v, err := gets[i].Result()
		if err != nil {
			continue
		}
		payload, reason := k.openValue(certName(h), v)
		var r CertRecord
		if reason == "" && json.Unmarshal(payload, &r) != nil {
			reason = "malformed"
		}
		if reason != "" {
			if k.Rejected != nil {
				k.Rejected(reason)
			}
			continue
		}
		out[h] = r
	}
	return out, nil
}

// MemoryCertBook keeps records in the process: the operator with its embedded proxy
// and no Redis.
type MemoryCertBook struct {
	mu      sync.Mutex
	records map[string]CertRecord
}

// RecordCert implements CertBook.
func (m *MemoryCertBook) RecordCert(_ context.Context, host string, r CertRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records = map[string]CertRecord{}
	}
	m.records[host] = r
	return nil
}

// CertRecords implements CertBook.
func (m *MemoryCertBook) CertRecords(_ context.Context, hosts []string) (map[string]CertRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]CertRecord{}
	for _, h := range hosts {
		if r, ok := m.records[h]; ok {
			out[h] = r
		}
	}
	return out, nil
}
