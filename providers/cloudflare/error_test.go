package cloudflare_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers"
	"github.com/tenantroute/tenantroute-operator/providers/cloudflare"
)

// An answer may carry an error of any size (a gateway in front of the API, a message
// quoting the request), and the SDK quotes the whole JSON body in its error. That
// text goes to the zone queue's log, the routes' statuses and events, at every retry:
// it is quoted in a few kilobytes, and still says what failed.
func TestAnAnswerOfAnySizeIsQuotedInAFewKilobytes(t *testing.T) {
	page := `{"success":false,"errors":[{"code":10000,"message":"` +
		strings.Repeat("upstream connect error or disconnect/reset before headers. ", 20000) + `"}],"messages":[],"result":null}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	p := cloudflare.New(cloudflare.Options{Name: "cloudflare", APIToken: "token", BaseURL: srv.URL + "/client/v4/", MaxRetries: -1})

	_, err := p.ListRecords(context.Background(), providers.Zone{Name: "example.com", ID: "zone1"})
	if err == nil {
		t.Fatal("a 502 listed the zone")
	}
	text := err.Error()
	if len(text) > 4096 {
		t.Fatalf("the error quotes %d bytes of a %d-byte answer", len(text), len(page))
	}
	for _, want := range []string{"cloudflare", "ListRecords", "transient", "502", "upstream connect error"} {
		if !strings.Contains(text, want) {
			t.Errorf("the error does not say %q: %s", want, text)
		}
	}
	if providers.IsPermanent(err) || providers.ErrorCode(err) != "10000" {
		t.Errorf("a 502 is classified permanent %v with code %q; want transient, 10000", providers.IsPermanent(err), providers.ErrorCode(err))
	}
}

// The SDK reads an error's body whole and keeps it: a gateway answering with an
// endless body would take the manager's memory. What is read of it is bounded.
func TestAnEndlessErrorAnswerIsReadOnlyInPart(t *testing.T) {
	const body = 256 << 20
	var written atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		chunk := []byte(`{"success":false,"errors":[{"code":1004,"message":"` + strings.Repeat("x", 64<<10))
		for written.Load() < body {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	p := cloudflare.New(cloudflare.Options{Name: "cloudflare", APIToken: "token", BaseURL: srv.URL + "/client/v4/", MaxRetries: -1})

	_, err := p.ListRecords(context.Background(), providers.Zone{Name: "example.com", ID: "zone1"})
	if err == nil {
		t.Fatal("a 400 listed the zone")
	}
	srv.CloseClientConnections()
	if n := written.Load(); n > 16<<20 {
		t.Errorf("the provider read %d MB of a 400's body", n>>20)
	}
	if !providers.IsPermanent(err) || len(err.Error()) > 4096 || !strings.Contains(err.Error(), "400") {
		t.Errorf("a 400 gave %.300q (permanent %v)", err, providers.IsPermanent(err))
	}
}

// Cloudflare answers a spent rate limit with 429 and Retry-After, up to the rest of
// its five-minute window. The SDK sleeps that long before retrying, inside the 30 s it
// gives each attempt, so a long one came back as a network error without its wait:
// the queue then retried from 1 s, into the same refusal. The refusal and its wait
// come back as they are, at once, and the account's next request, whichever zone it
// is for, is refused with the rest of the wait rather than blocking for 30 s.
func TestALongRateLimitRefusalIsReturnedWithItsWait(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"success":false,"errors":[{"code":10000,"message":"Rate limited. Please wait and consider throttling your request speed"}],"messages":[],"result":null}`))
	}))
	t.Cleanup(srv.Close)
	p := cloudflare.New(cloudflare.Options{Name: "cloudflare", APIToken: "token", BaseURL: srv.URL + "/client/v4/"})

	for i, zone := range []string{"zone1", "zone2"} {
		start := time.Now()
		_, err := p.ListRecords(context.Background(), providers.Zone{Name: "example.com", ID: zone})
		took := time.Since(start)
		if err == nil {
			t.Fatal("a 429 listed the zone")
		}
		if !providers.Refused(err) || providers.IsPermanent(err) {
			t.Errorf("call %d: %v, refused %v; want a transient refusal", i+1, err, providers.Refused(err))
		}
		if got := providers.RetryAfter(err); got < 55*time.Second || got > 60*time.Second {
			t.Errorf("call %d: retry after %s, want the 60 s asked for (less what passed)", i+1, got)
		}
		if took > 5*time.Second {
			t.Errorf("call %d took %s", i+1, took.Round(time.Second))
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d requests reached the API during its refusal, want 1", n)
	}

	// A short wait is slept out within the call, which goes on.
	var short atomic.Int64
	srv2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if short.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"success":false,"errors":[{"code":10000,"message":"Rate limited"}],"messages":[],"result":null}`))
			return
		}
		_, _ = w.Write([]byte(`{"success":true,"errors":[],"messages":[],"result":[],"result_info":{"page":1,"per_page":5000,"count":0,"total_count":0,"total_pages":0}}`))
	}))
	t.Cleanup(srv2.Close)
	p2 := cloudflare.New(cloudflare.Options{Name: "cloudflare", APIToken: "token", BaseURL: srv2.URL + "/client/v4/"})
	if _, err := p2.ListRecords(context.Background(), providers.Zone{Name: "example.com", ID: "zone1"}); err != nil {
		t.Errorf("a 429 asking for 1 s failed the listing: %v", err)
	}
}

// A listing is what plans are made against: a record missing from it is created
// beside whatever holds the name, and an owner missing from it is taken for gone. A
// 2xx answer that cannot be the whole zone is an error, never an empty or partial
// zone: one that says success false (the SDK reads no error in a 200), one that is
// not a listing at all, pages that repeat themselves (an API or gateway that ignores
// the page asked for: read forever before), and fewer records than the API counted.
func TestAListingThatCannotBeWholeIsAnError(t *testing.T) {
	recs := func(from, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"id":"r%d","name":"h%d.example.com","type":"A","content":"192.0.2.1","ttl":60,"proxied":false,"comment":""}`, from+i, from+i)
		}
		return b.String()
	}
	pageOf := func(result string, total, pages int) string {
		return fmt.Sprintf(`{"success":true,"errors":[],"messages":[],"result":[%s],"result_info":{"page":1,"per_page":5000,"count":0,"total_count":%d,"total_pages":%d}}`, result, total, pages)
	}
	for name, answer := range map[string]func(page int) string{
		"success false": func(int) string {
			return `{"success":false,"errors":[{"code":10000,"message":"Authentication error"}],"messages":[],"result":null}`
		},
		"not a listing":      func(int) string { return `{}` },
		"the page ignored":   func(int) string { return pageOf(recs(0, 5000), 12000, 3) },
		"fewer than counted": func(int) string { return pageOf(recs(0, 3), 5, 1) },
		"a short middle page": func(page int) string {
			if page == 1 {
				return pageOf(recs(0, 5000), 5004, 2)
			}
			return pageOf(recs(5000, 2), 5004, 2)
		},
	} {
		t.Run(name, func(t *testing.T) {
			var requests atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				requests.Add(1)
				page, _ := strconv.Atoi(r.URL.Query().Get("page"))
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(answer(page)))
			}))
			t.Cleanup(srv.Close)
			p := cloudflare.New(cloudflare.Options{Name: "cloudflare", APIToken: "token", BaseURL: srv.URL + "/client/v4/"})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := p.ListRecords(ctx, providers.Zone{Name: "example.com", ID: "zone1"})
			if err == nil || ctx.Err() != nil {
				t.Fatalf("listed %d records (error %v, after %d requests)", len(got), err, requests.Load())
			}
			if providers.IsPermanent(err) {
				t.Errorf("%v is permanent; an answer to try again", err)
			}
			if n := requests.Load(); n > 3 {
				t.Errorf("%d requests for one listing: %v", n, err)
			}
		})
	}
}

// A batch is one transaction, refused with an error status. A 2xx answer that does
// not say it succeeded proves nothing: the changes are not reported applied, and the
// error is one that has the zone listed again. A failover's move (patches alone) is
// such a batch, which nothing else would check.
func TestABatchAnswerThatDoesNotSaySuccessIsNotApplied(t *testing.T) {
	move := providers.Change{Action: providers.Update,
		Old: &providers.Record{Name: "shop.example.com", Type: "CNAME", TTL: 60, Values: []string{"edge-1.example.net"}, ProviderIDs: []string{"rec1"}, Owner: "default/t/shop"},
		New: &providers.Record{Name: "shop.example.com", Type: "CNAME", TTL: 60, Values: []string{"edge-2.example.net"}, Owner: "default/t/shop"}}
	for name, answer := range map[string]string{
		"success false":          `{"success":false,"errors":[],"messages":[],"result":null}`,
		"an empty object":        `{}`,
		"success false, patched": `{"success":false,"result":{"patches":[{"id":"rec1"}]}}`,
	} {
		t.Run(name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(answer))
			}))
			t.Cleanup(srv.Close)
			p := cloudflare.New(cloudflare.Options{Name: "cloudflare", APIToken: "token", BaseURL: srv.URL + "/client/v4/", MaxRetries: -1})
			res, err := p.ApplyChanges(context.Background(), providers.Zone{Name: "example.com", ID: "zone1"}, []providers.Change{move})
			if err == nil || len(res.Applied) != 0 {
				t.Fatalf("applied %d changes (error %v), want none and an error", len(res.Applied), err)
			}
			if providers.IsPermanent(err) || providers.ErrorCode(err) != "uncertain" {
				t.Errorf("%v: want a transient error that has the zone listed again", err)
			}
		})
	}
}
