package emulator

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	r53 "github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"
	"github.com/aws/smithy-go"
)

const (
	keyID  = "AKIATEST"
	secret = "secret"
)

func setup(t *testing.T) (*Emulator, *r53.Client, string, string) {
	emu := New(keyID, secret)
	emu.SetRateLimit(0, 0)
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	client := r53.New(r53.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: aws.NewCredentialsCache(aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret}, nil
		})),
		RetryMaxAttempts: 1,
	})
	return emu, client, emu.AddZone("example.com"), srv.URL
}

func set(action types.ChangeAction, name, typ string, ttl int64, values ...string) types.Change {
	rs := &types.ResourceRecordSet{Name: aws.String(name), Type: types.RRType(typ), TTL: aws.Int64(ttl)}
	for _, v := range values {
		rs.ResourceRecords = append(rs.ResourceRecords, types.ResourceRecord{Value: aws.String(v)})
	}
	return types.Change{Action: action, ResourceRecordSet: rs}
}

func submit(client *r53.Client, zone string, changes ...types.Change) (*r53.ChangeResourceRecordSetsOutput, error) {
	return client.ChangeResourceRecordSets(context.Background(), &r53.ChangeResourceRecordSetsInput{
		HostedZoneId: aws.String(zone), ChangeBatch: &types.ChangeBatch{Changes: changes},
	})
}

func invalidMessages(t *testing.T, err error) []string {
	t.Helper()
	var icb *types.InvalidChangeBatch
	if !errors.As(err, &icb) {
		t.Fatalf("want InvalidChangeBatch, got %v", err)
	}
	return icb.Messages
}

func TestChangeBatchRules(t *testing.T) {
	emu, client, zone, _ := setup(t)
	if _, err := submit(client, zone, set("CREATE", "a.example.com.", "A", 60, "192.0.2.1")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		changes []types.Change
		message string
	}{
		{"create of an existing set", []types.Change{set("CREATE", "a.example.com.", "A", 60, "192.0.2.9")}, "but it already exists"},
		{"delete not matching exactly", []types.Change{set("DELETE", "a.example.com.", "A", 60, "192.0.2.9")}, "do not match the current values"},
		{"delete of a missing set", []types.Change{set("DELETE", "b.example.com.", "A", 60, "192.0.2.9")}, "but it was not found"},
		{"CNAME beside an A", []types.Change{set("CREATE", "a.example.com.", "CNAME", 60, "e.example.net.")}, "conflicts with other records"},
		{"the same set twice", []types.Change{set("UPSERT", "c.example.com.", "A", 60, "192.0.2.1"), set("UPSERT", "c.example.com.", "A", 60, "192.0.2.2")}, "invalid set of changes"},
		{"unquoted TXT", []types.Change{set("CREATE", "t.example.com.", "TXT", 60, "hello")}, "enclosed in quotation marks"},
		{"atomic: one bad change fails all", []types.Change{set("CREATE", "ok.example.com.", "A", 60, "192.0.2.1"), set("CREATE", "bad.example.com.", "A", 60, "192.0.2.300")}, "ARRDATAIllegalIPv4Address"},
	}
	for _, tc := range cases {
		_, err := submit(client, zone, tc.changes...)
		if msgs := invalidMessages(t, err); !strings.Contains(strings.Join(msgs, "\n"), tc.message) {
			t.Errorf("%s: messages %q, want %q", tc.name, msgs, tc.message)
		}
	}
	if sets := emu.RecordSets(zone); len(sets) != 3 { // SOA, NS, a
		t.Errorf("zone after rejected batches: %v", sets)
	}
	// 600 single-value UPSERTs count as 1200 records.
	var upserts []types.Change
	for i := range 600 {
		upserts = append(upserts, set("UPSERT", fmt.Sprintf("u%d.example.com.", i), "A", 60, "192.0.2.1"))
	}
	if msgs := invalidMessages(t, errOf(submit(client, zone, upserts...))); !strings.Contains(msgs[0], "limit of 1000") {
		t.Errorf("1200 records: %q", msgs)
	}
}

func errOf[T any](_ T, err error) error { return err }

func TestChangeStatusAndPaging(t *testing.T) {
	emu, client, zone, _ := setup(t)
	emu.InsyncAfter = 50 * time.Millisecond
	var creates []types.Change
	for i := range 700 {
		creates = append(creates, set("CREATE", fmt.Sprintf("r%03d.example.com.", i), "A", 60, "192.0.2.1"))
	}
	out, err := submit(client, zone, creates[:350]...)
	if err != nil {
		t.Fatal(err)
	}
	if out.ChangeInfo.Status != types.ChangeStatusPending {
		t.Errorf("new change is %s, want PENDING", out.ChangeInfo.Status)
	}
	if _, err := submit(client, zone, creates[350:]...); err != nil {
		t.Fatal(err)
	}
	waiter := r53.NewResourceRecordSetsChangedWaiter(client, func(o *r53.ResourceRecordSetsChangedWaiterOptions) { o.MinDelay = 10 * time.Millisecond })
	if err := waiter.Wait(context.Background(), &r53.GetChangeInput{Id: out.ChangeInfo.Id}, 5*time.Second); err != nil {
		t.Errorf("change never INSYNC: %v", err)
	}

	pages := r53.NewListResourceRecordSetsPaginator(client, &r53.ListResourceRecordSetsInput{HostedZoneId: aws.String(zone)})
	total, calls := 0, 0
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		total += len(page.ResourceRecordSets)
		calls++
	}
	if total != 702 || calls != 3 {
		t.Errorf("listed %d sets in %d pages, want 702 in 3", total, calls)
	}
}

// TestElementOrder sends a change batch whose elements are in an order the SDK would
// never use: Route53 parses XML by name, not position.
func TestElementOrder(t *testing.T) {
	emu, _, zone, url := setup(t)
	body := `<?xml version="1.0" encoding="UTF-8"?>
<ChangeResourceRecordSetsRequest xmlns="https://route53.amazonaws.com/doc/2013-04-01/">
  <ChangeBatch><Comment>c</Comment><Changes><Change>
    <ResourceRecordSet><ResourceRecords><ResourceRecord><Value>192.0.2.7</Value></ResourceRecord></ResourceRecords>
      <TTL>60</TTL><Type>A</Type><Name>order.example.com.</Name></ResourceRecordSet>
    <Action>CREATE</Action>
  </Change></Changes></ChangeBatch>
</ChangeResourceRecordSetsRequest>`
	req, _ := http.NewRequest("POST", url+"/2013-04-01/hostedzone/"+zone+"/rrset", bytes.NewBufferString(body))
	sum := sha256.Sum256([]byte(body))
	if err := v4.NewSigner().SignHTTP(context.Background(), aws.Credentials{AccessKeyID: keyID, SecretAccessKey: secret},
		req, hex.EncodeToString(sum[:]), "route53", "us-east-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	sets := emu.RecordSets(zone)
	if len(sets) != 3 || sets[2].Name != "order.example.com." || sets[2].Values[0] != "192.0.2.7" {
		t.Errorf("zone: %v", sets)
	}
}

func TestAuthThrottlingAndFaults(t *testing.T) {
	emu, client, zone, url := setup(t)
	wrong := r53.New(r53.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: keyID, SecretAccessKey: "not-the-secret"}, nil
		})})
	list := func(c *r53.Client) error {
		_, err := c.ListResourceRecordSets(context.Background(), &r53.ListResourceRecordSetsInput{HostedZoneId: aws.String(zone)})
		return err
	}
	code := func(err error) string {
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) {
			return apiErr.ErrorCode()
		}
		return fmt.Sprint(err)
	}
	if got := code(list(wrong)); got != "SignatureDoesNotMatch" {
		t.Errorf("wrong secret: %s", got)
	}
	emu.SetRateLimit(RateLimit, RateWindow)
	throttled := 0
	for range 8 {
		if code(list(client)) == "Throttling" {
			throttled++
		}
	}
	if throttled != 3 {
		t.Errorf("8 requests within a second: %d throttled, want 3", throttled)
	}
	emu.SetRateLimit(0, 0)
	emu.SetFaults(emulatorkit.Faults{Outage: true})
	if got := code(list(client)); got != "ServiceUnavailable" {
		t.Errorf("outage: %s", got)
	}
}
