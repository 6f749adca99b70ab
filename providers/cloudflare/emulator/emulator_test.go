package emulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

type client struct {
	t     *testing.T
	base  string
	token string
}

func (c client) do(method, path, body string) (int, http.Header, map[string]any) {
	c.t.Helper()
	req, _ := http.NewRequest(method, c.base+"/client/v4"+path, bytes.NewBufferString(body))
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var env map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
		c.t.Fatalf("%s %s: body is not JSON: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, env
}

func setup(t *testing.T) (*Emulator, client, string) {
	emu := New("tok")
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	return emu, client{t, srv.URL, "tok"}, emu.AddZone("example.com")
}

func errorCode(env map[string]any) float64 {
	errs, _ := env["errors"].([]any)
	if len(errs) == 0 {
		return 0
	}
	return errs[0].(map[string]any)["code"].(float64)
}

func TestEnvelopeAndPaging(t *testing.T) {
	_, c, zone := setup(t)
	for _, name := range []string{"a", "b", "c"} {
		if status, _, env := c.do("POST", "/zones/"+zone+"/dns_records", `{"name":"`+name+`.example.com","type":"A","content":"192.0.2.1","ttl":60}`); status != 200 {
			t.Fatalf("create: %d %v", status, env)
		}
	}
	status, _, env := c.do("GET", "/zones/"+zone+"/dns_records?per_page=2&page=2", "")
	for _, field := range []string{"success", "errors", "messages", "result", "result_info"} {
		if _, ok := env[field]; !ok {
			t.Errorf("envelope lacks %q: %v", field, env)
		}
	}
	info := env["result_info"].(map[string]any)
	if status != 200 || len(env["result"].([]any)) != 1 || info["total_count"].(float64) != 3 || info["page"].(float64) != 2 {
		t.Errorf("page 2 of 2: %d %v", status, env)
	}
	// The SDK's auto-pager stops only on an empty page.
	_, _, env = c.do("GET", "/zones/"+zone+"/dns_records?per_page=2&page=9", "")
	if result, ok := env["result"].([]any); !ok || len(result) != 0 {
		t.Errorf("out-of-range page: result %v, want []", env["result"])
	}
}

func TestBatchOrderAndAtomicity(t *testing.T) {
	emu, c, zone := setup(t)
	cname, err := emu.AddRecord(zone, Record{Name: "x.example.com", Type: "CNAME", Content: "edge.example.net", TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	// Posts run after deletes, so the A may replace the CNAME in one batch.
	status, _, env := c.do("POST", "/zones/"+zone+"/dns_records/batch",
		`{"posts":[{"name":"x.example.com","type":"A","content":"192.0.2.1","ttl":60}],"deletes":[{"id":"`+cname.ID+`"}]}`)
	if status != 200 {
		t.Fatalf("delete CNAME + post A: %d %v", status, env)
	}
	// One bad post fails the whole batch.
	status, _, env = c.do("POST", "/zones/"+zone+"/dns_records/batch",
		`{"posts":[{"name":"ok.example.com","type":"A","content":"192.0.2.2","ttl":60},{"name":"bad.example.com","type":"A","content":"192.0.2.300","ttl":60}]}`)
	if status != 400 || env["success"] != false || errorCode(env) != 9005 {
		t.Errorf("bad post: %d %v", status, env)
	}
	recs := emu.Records(zone)
	if len(recs) != 1 || recs[0].Type != "A" || recs[0].Name != "x.example.com" {
		t.Errorf("after a failed batch the zone holds %v", recs)
	}
}

func TestDNSRules(t *testing.T) {
	emu, c, zone := setup(t)
	if _, err := emu.AddRecord(zone, Record{Name: "x.example.com", Type: "A", Content: "192.0.2.1", TTL: 60}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, body string
		code       float64
	}{
		{"CNAME beside an A", `{"name":"x.example.com","type":"CNAME","content":"e.example.net","ttl":60}`, 81053},
		{"identical record", `{"name":"x.example.com","type":"A","content":"192.0.2.1","ttl":60}`, 81058},
		{"TTL below 60", `{"name":"y.example.com","type":"A","content":"192.0.2.1","ttl":30}`, 9021},
		{"outside the zone", `{"name":"y.example.org","type":"A","content":"192.0.2.1","ttl":60}`, 9007},
		{"proxied TXT", `{"name":"y.example.com","type":"TXT","content":"hi","ttl":1,"proxied":true}`, 9004},
		{"comment too long", `{"name":"y.example.com","type":"A","content":"192.0.2.1","ttl":60,"comment":"` + strings.Repeat("c", 101) + `"}`, 9101},
	}
	for _, tc := range cases {
		if status, _, env := c.do("POST", "/zones/"+zone+"/dns_records", tc.body); status != 400 || errorCode(env) != tc.code {
			t.Errorf("%s: %d %v, want 400 code %v", tc.name, status, env, tc.code)
		}
	}
	// Proxied records have automatic TTL.
	_, _, env := c.do("POST", "/zones/"+zone+"/dns_records", `{"name":"p.example.com","type":"CNAME","content":"o.example.net","ttl":300,"proxied":true}`)
	if ttl := env["result"].(map[string]any)["ttl"]; ttl != 1.0 {
		t.Errorf("proxied record TTL %v, want 1", ttl)
	}
}

func TestRateLimitAuthAndFaults(t *testing.T) {
	emu, c, zone := setup(t)
	if status, _, env := (client{t, c.base, "wrong"}).do("GET", "/zones/"+zone+"/dns_records", ""); status != 403 || errorCode(env) != 10000 {
		t.Errorf("wrong token: %d %v", status, env)
	}
	emu.SetRateLimit(3, time.Minute)
	for range 3 {
		if status, _, _ := c.do("GET", "/zones", ""); status != 200 {
			t.Fatalf("within the limit: %d", status)
		}
	}
	status, header, env := c.do("GET", "/zones", "")
	if status != 429 || errorCode(env) != 971 || header.Get("Retry-After") == "" {
		t.Errorf("over the limit: %d %v Retry-After %q", status, env, header.Get("Retry-After"))
	}
	emu.SetRateLimit(0, 0)

	req, _ := http.NewRequest("PUT", c.base+"/__admin/faults", strings.NewReader(`{"outage":true}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("admin faults: %v %v", resp, err)
	}
	if status, _, _ := c.do("GET", "/zones", ""); status != 503 {
		t.Errorf("during an outage: %d", status)
	}
	emu.SetFaults(emulatorkit.Faults{TooManyRequests: 1, RetryAfter: emulatorkit.Duration{Duration: 2 * time.Second}})
	if status, header, _ := c.do("GET", "/zones", ""); status != 429 || header.Get("Retry-After") != "2" {
		t.Errorf("injected 429: %d Retry-After %q", status, header.Get("Retry-After"))
	}
	if status, _, _ := c.do("GET", "/zones", ""); status != 200 {
		t.Errorf("after the injected 429s: %d", status)
	}
	resp, err := http.Get(c.base + "/__admin/counters")
	if err != nil {
		t.Fatal(err)
	}
	var counters map[string]int
	_ = json.NewDecoder(resp.Body).Decode(&counters)
	if counters["GET /zones"] != 7 {
		t.Errorf("counters %v, want 7 GET /zones", counters)
	}
}
