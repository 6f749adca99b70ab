// Package cloudflare is the Cloudflare DNS provider, on cloudflare-go v7.
//
// Ownership: a record the operator owns carries the comment "tenantroute:<owner>",
// Cloudflare's own per-record metadata, so nothing is written beside a CNAME. Records
// without that comment are foreign and never changed.
package cloudflare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudflare/cloudflare-go/v7/dns"
	"github.com/cloudflare/cloudflare-go/v7/option"
	"github.com/cloudflare/cloudflare-go/v7/zones"

	"github.com/tenantroute/tenantroute-operator/providers"
)

// Defaults from Cloudflare's published limits.
const (
	DefaultBaseURL    = "https://api.cloudflare.com/client/v4/"
	DefaultBatchSize  = 200
	DefaultRateLimit  = 1200
	DefaultRateWindow = 5 * time.Minute
	// DefaultMaxRetries is deliberately low: the SDK's default of 10 retries with
	// backoff can hold one reconcile for minutes, where the controller would rather
	// requeue and report.
	DefaultMaxRetries = 2
	// MinTTL is the smallest TTL outside Enterprise plans; 1 means automatic.
	MinTTL = 60

	commentPrefix = "tenantroute:"
	listPageSize  = 5000
)

// Options configure one Cloudflare account.
type Options struct {
	// Name identifies the account in errors and metrics.
	Name     string
	APIToken string
	// BaseURL defaults to DefaultBaseURL.
	BaseURL string
	// BatchSize is the most record operations per batch request.
	BatchSize int
	// RateLimit requests per RateWindow; defaults to Cloudflare's 1200 per 5 minutes.
	RateLimit  int
	RateWindow time.Duration
	// MaxRetries of the SDK per request; -1 means none.
	MaxRetries int
	// Transport underlies the rate-limited transport; http.DefaultTransport if nil.
	Transport http.RoundTripper
	// Observe, if set, is told of every HTTP request: operation and status code.
	Observe func(operation, code string)
}

// Provider is one Cloudflare account. It uses the SDK's DNS record and zone services
// only: the SDK's root client links every Cloudflare API into the binary (130
// packages; 13 for these two), which was a tenth of the manager's resident memory, and
// reads the credentials in CLOUDFLARE_* environment variables besides the token given.
type Provider struct {
	name      string
	records   *dns.RecordService
	zones     *zones.ZoneService
	batchSize int
}

// New returns the provider for one account. Every request, SDK retries included, goes
// through the account's rate limiter.
func New(o Options) *Provider {
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	if !strings.HasSuffix(o.BaseURL, "/") {
		o.BaseURL += "/"
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.RateLimit == 0 {
		o.RateLimit, o.RateWindow = DefaultRateLimit, DefaultRateWindow
	}
	switch {
	case o.MaxRetries == 0:
		o.MaxRetries = DefaultMaxRetries
	case o.MaxRetries < 0:
		o.MaxRetries = 0
	}
	if o.Transport == nil {
		o.Transport = http.DefaultTransport
	}
	httpClient := &http.Client{Transport: &providers.LimitedTransport{
		Base: o.Transport, Limiter: providers.NewLimiter(o.RateLimit, o.RateWindow), Observe: o.Observe,
	}}
	opts := []option.RequestOption{
		option.WithAPIToken(o.APIToken),
		option.WithBaseURL(o.BaseURL),
		option.WithHTTPClient(httpClient),
		option.WithMaxRetries(o.MaxRetries),
		option.WithRequestTimeout(30 * time.Second),
		option.WithMiddleware(noRetryWhenLimited),
	}
	return &Provider{name: o.Name, records: dns.NewRecordService(opts...), zones: zones.NewZoneService(opts...), batchSize: o.BatchSize}
}

// noRetryWhenLimited hands a 429 back to the caller rather than to the SDK's retries
// when its Retry-After outlasts the attempt. The SDK sleeps out the Retry-After inside
// the 30 s it gives each attempt: Cloudflare asks for up to the rest of its five-minute
// window, and the call then failed as a network error that had lost the wait. The
// zone queue waits it out (RetryAfter) and reports the zone as throttled meanwhile;
// the account's limiter holds every other request for it too. A short one is still
// slept out by the SDK, and the call goes on (a listing keeps the pages it read).
func noRetryWhenLimited(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		deadline, ok := req.Context().Deadline()
		if ok && time.Now().Add(providers.ParseRetryAfter(resp.Header)).After(deadline) {
			resp.Header.Set("X-Should-Retry", "false") // read by the SDK's retry loop
		}
	}
	return resp, err
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return p.name }

// ResolveZone implements providers.Provider.
func (p *Provider) ResolveZone(ctx context.Context, zone providers.Zone) (providers.Zone, error) {
	const op = "ResolveZone"
	ctx = providers.WithOperation(ctx, op)
	if zone.ID != "" {
		// The SDK's request fields are of a type only its root package builds
		// (cloudflare.F): they are set in place.
		var q zones.ZoneGetParams
		q.ZoneID.Value, q.ZoneID.Present = zone.ID, true
		z, err := p.zones.Get(ctx, q)
		if err != nil {
			return zone, p.classify(op, err)
		}
		if providers.CanonicalName(z.Name) != zone.Name {
			return zone, p.permanent(op, "zone %s is %s, not %s", zone.ID, z.Name, zone.Name)
		}
		return zone, nil
	}
	var q zones.ZoneListParams
	q.Name.Value, q.Name.Present = zone.Name, true
	page, err := p.zones.List(ctx, q)
	if err != nil {
		return zone, p.classify(op, err)
	}
	for _, z := range page.Result {
		if providers.CanonicalName(z.Name) == zone.Name {
			zone.ID = z.ID
			return zone, nil
		}
	}
	return zone, p.permanent(op, "zone %s not found in this account", zone.Name)
}

// record holds the fields of a DNS record the provider reads. Responses are decoded
// into it rather than the SDK's union types, whose decoder costs about 0.25 ms per
// record: 5 s for a zone of 20,000.
type record struct {
	ID      string  `json:"id"`
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Content string  `json:"content"`
	TTL     float64 `json:"ttl"`
	Proxied bool    `json:"proxied"`
	Comment string  `json:"comment"`
}

// ListRecords implements providers.Provider, reading every page of the zone's records.
// A listing is what plans are made against (a record missing from it is created
// beside whatever holds its name), so one that cannot be whole is an error: a 2xx
// answer that does not say success with a result (the SDK takes it as an empty
// page), pages that do not move forward, and a count that differs from the total
// the API gave (the zone changed between pages).
func (p *Provider) ListRecords(ctx context.Context, zone providers.Zone) ([]providers.Record, error) {
	const op = "ListRecords"
	ctx = providers.WithOperation(ctx, op)
	var all []record
	firsts := map[string]bool{} // the first record of each page
	total := -1
	for n := 1; ; n++ {
		var page struct {
			Success    *bool    `json:"success"`
			Result     []record `json:"result"`
			ResultInfo *struct {
				TotalCount int `json:"total_count"`
				TotalPages int `json:"total_pages"`
			} `json:"result_info"`
		}
		var q dns.RecordListParams
		q.ZoneID.Value, q.ZoneID.Present = zone.ID, true
		q.Page.Value, q.Page.Present = float64(n), true
		q.PerPage.Value, q.PerPage.Present = float64(listPageSize), true
		_, err := p.records.List(ctx, q, option.WithResponseBodyInto(&page))
		if err != nil {
			return nil, p.classify(op, err)
		}
		if page.Success == nil || !*page.Success || page.Result == nil {
			return nil, providers.Incomplete(p.name, op, "page %d of zone %s: a 2xx answer without success and a result", n, zone.Name)
		}
		if len(page.Result) > 0 {
			if firsts[page.Result[0].ID] {
				return nil, providers.Incomplete(p.name, op, "page %d of zone %s repeats an earlier page", n, zone.Name)
			}
			firsts[page.Result[0].ID] = true
		}
		all = append(all, page.Result...)
		if page.ResultInfo != nil {
			total = page.ResultInfo.TotalCount
		}
		// A short page is the last; this saves the empty page the SDK's auto-pager asks for.
		if len(page.Result) < listPageSize || (page.ResultInfo != nil && n >= page.ResultInfo.TotalPages) {
			break
		}
	}
	if total >= 0 && len(all) != total {
		return nil, providers.Incomplete(p.name, op, "zone %s: read %d records of the %d the API counted (the zone changed while it was listed)", zone.Name, len(all), total)
	}
	return p.group(all), nil
}

// group turns Cloudflare's one-record-per-value into record sets. A set whose values
// disagree on owner, TTL or proxied is reported foreign, so it is never changed.
func (p *Provider) group(all []record) []providers.Record {
	sets := map[providers.Key]*providers.Record{}
	var order []providers.Key
	mixed := map[providers.Key]bool{}
	for _, r := range all {
		owner, ours := strings.CutPrefix(r.Comment, commentPrefix)
		if !ours {
			owner = ""
		}
		key := providers.Key{Name: providers.CanonicalName(r.Name), Type: r.Type}
		set, ok := sets[key]
		if !ok {
			set = &providers.Record{Name: key.Name, Type: key.Type, TTL: int64(r.TTL), Proxied: r.Proxied, Owner: owner}
			sets[key] = set
			order = append(order, key)
		} else if set.Owner != owner || set.TTL != int64(r.TTL) || set.Proxied != r.Proxied {
			mixed[key] = true
		}
		set.Values = append(set.Values, r.Content)
		set.ProviderIDs = append(set.ProviderIDs, r.ID)
	}
	out := make([]providers.Record, 0, len(order))
	for _, key := range order {
		r := providers.NormalizeCommon(*sets[key])
		if mixed[key] {
			r.Owner = ""
		}
		out = append(out, r)
	}
	return out
}

// Normalize implements providers.Provider: proxied records have automatic TTL, other
// TTLs are at least MinTTL, only A, AAAA and CNAME can be proxied.
func (p *Provider) Normalize(r providers.Record) providers.Record {
	r = providers.NormalizeCommon(r)
	if r.Type != providers.TypeA && r.Type != providers.TypeAAAA && r.Type != providers.TypeCNAME {
		r.Proxied = false
	}
	switch {
	case r.Proxied:
		r.TTL = 1
	case r.TTL != 1 && r.TTL < MinTTL:
		r.TTL = MinTTL
	}
	return r
}

// ApplyChanges implements providers.Provider with dns_records/batch requests of at
// most BatchSize record operations.
func (p *Provider) ApplyChanges(ctx context.Context, zone providers.Zone, changes []providers.Change) (providers.Result, error) {
	ctx = providers.WithOperation(ctx, "ApplyChanges")
	b := providers.Batcher{
		Limit: p.BatchLimit(),
		Cost:  p.ChangeCost,
		Send: func(ctx context.Context, batch []providers.Change) ([]providers.Change, error) {
			return p.send(ctx, zone, batch)
		},
	}
	return b.Apply(ctx, changes)
}

// BatchLimit is the most a batch request may carry.
func (p *Provider) BatchLimit() providers.Cost { return providers.Cost{Records: p.batchSize} }

// ChangeCost is what a change costs against BatchLimit: its record operations.
func (p *Provider) ChangeCost(c providers.Change) providers.Cost {
	o := operations(c)
	return providers.Cost{Records: len(o.deletes) + len(o.patches) + len(o.posts)}
}

// ops are the record operations of one change; each patch and post names the index
// of its value in the change's New record.
type ops struct {
	deletes []string
	patches []valueOp
	posts   []valueOp
}

type valueOp struct {
	id    string // patches only
	value int
}

// operations turns a record-set change into per-value operations, reusing the ids of
// old values for new ones so that an update is patches, not deletes and posts.
func operations(c providers.Change) ops {
	var o ops
	switch c.Action {
	case providers.Create:
		for i := range c.New.Values {
			o.posts = append(o.posts, valueOp{value: i})
		}
	case providers.Delete:
		o.deletes = slices.Clone(c.Old.ProviderIDs)
	case providers.Update:
		oldIDs := map[string]string{}
		for i, v := range c.Old.Values {
			if i < len(c.Old.ProviderIDs) {
				oldIDs[v] = c.Old.ProviderIDs[i]
			}
		}
		var fresh []int
		for i, v := range c.New.Values {
			if id, ok := oldIDs[v]; ok {
				o.patches = append(o.patches, valueOp{id: id, value: i})
				delete(oldIDs, v)
			} else {
				fresh = append(fresh, i)
			}
		}
		var spare []string
		for _, v := range c.Old.Values {
			if id, ok := oldIDs[v]; ok {
				spare = append(spare, id)
			}
		}
		for _, i := range fresh {
			if len(spare) > 0 {
				o.patches = append(o.patches, valueOp{id: spare[0], value: i})
				spare = spare[1:]
			} else {
				o.posts = append(o.posts, valueOp{value: i})
			}
		}
		o.deletes = spare
	}
	return o
}

// batchBody is a dns_records/batch request, as the SDK's parameter types marshal it
// (TestBatchBodyIsTheSDKs): built directly, it costs a fraction of the SDK's
// reflection-driven encoding, which a 10,000-route failover paid for every batch.
type batchBody struct {
	Deletes []batchDelete `json:"deletes,omitempty"`
	Patches []batchRecord `json:"patches,omitempty"`
	Posts   []batchRecord `json:"posts,omitempty"`
}

type batchDelete struct {
	ID string `json:"id"`
}

type batchRecord struct {
	ID      string `json:"id,omitempty"` // patches
	Name    string `json:"name"`
	Type    string `json:"type"`
	Content string `json:"content"`
	TTL     int64  `json:"ttl"`
	Proxied *bool  `json:"proxied,omitempty"` // not for a patch of TXT
	Comment string `json:"comment"`
}

// patchable are the record types a batch may patch.
var patchable = []string{providers.TypeA, providers.TypeAAAA, providers.TypeCNAME, providers.TypeTXT}

func value(r *providers.Record, i int) batchRecord {
	return batchRecord{Name: r.Name, Type: r.Type, Content: r.Values[i], TTL: r.TTL, Proxied: &r.Proxied, Comment: comment(r.Owner)}
}

// placed says which value of which change a batch operation writes.
type placed struct {
	change, value int
	post          int // index into the posts, -1 for a patch
	id            string
}

// batchOf turns changes into one batch request's operations.
func batchOf(batch []providers.Change) (body batchBody, placements []placed, err error) {
	for ci, c := range batch {
		o := operations(c)
		for _, id := range o.deletes {
			body.Deletes = append(body.Deletes, batchDelete{ID: id})
		}
		for _, op := range o.patches {
			if !slices.Contains(patchable, c.New.Type) {
				return body, nil, fmt.Errorf("record type %s of %s is not supported for updates", c.New.Type, c.New.Name)
			}
			patch := value(c.New, op.value)
			patch.ID = op.id
			if c.New.Type == providers.TypeTXT {
				patch.Proxied = nil
			}
			body.Patches = append(body.Patches, patch)
			placements = append(placements, placed{change: ci, value: op.value, post: -1, id: op.id})
		}
		for _, op := range o.posts {
			body.Posts = append(body.Posts, value(c.New, op.value))
			placements = append(placements, placed{change: ci, value: op.value, post: len(body.Posts) - 1})
		}
	}
	return body, placements, nil
}

// send applies one batch. Cloudflare applies deletes, patches, puts, posts in that
// order in one transaction, so a change's delete always precedes its post.
func (p *Provider) send(ctx context.Context, zone providers.Zone, batch []providers.Change) ([]providers.Change, error) {
	body, placements, err := batchOf(batch)
	if err != nil {
		return nil, &providers.RejectedError{Err: err}
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, &providers.RejectedError{Err: err}
	}
	var q dns.RecordBatchParams
	q.ZoneID.Value, q.ZoneID.Present = zone.ID, true
	ctx, sends := providers.CountSends(ctx)
	var answer *http.Response
	_, err = p.records.Batch(ctx, q, option.WithRequestBody("application/json", raw), option.WithResponseBodyInto(&answer))
	if err != nil {
		err = p.classify("ApplyChanges", err)
		if sends.Uncertain() {
			return nil, providers.Unsure(err)
		}
		var apiErr *dns.Error
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusBadRequest {
			return nil, &providers.RejectedError{Err: err}
		}
		return nil, err
	}
	a, err := readBatchAnswer(answer.Body)
	_ = answer.Body.Close()
	if err != nil {
		// Applied (2xx), but which records were created, with which ids, is unknown
		// until the zone is listed again.
		return nil, providers.Unsure(p.transient("ApplyChanges", "reading the batch answer: %v", err))
	}
	if !a.success {
		// A batch is one transaction, refused with an error status; a 2xx that does not
		// say it succeeded (a proxy on the way, a broken answer) proves nothing, and a
		// batch of patches and deletes alone would otherwise count as done unchecked:
		// a failover's move is such a batch.
		return nil, providers.Unsure(p.transient("ApplyChanges", "a 2xx batch answer that does not say it succeeded"))
	}
	ids, err := postIDs(body.Posts, a.posts)
	if err != nil {
		return nil, providers.Unsure(p.transient("ApplyChanges", "%v", err))
	}
	return p.applied(batch, placements, ids)
}

// postIDs gives each record sent to be created the id the answer gave it. The answer
// lists them in the order sent (the API's and the emulator's behaviour), which is
// checked: ids taken by position from an answer in another order would cross between
// the tenants of one batch, and a later delete by id would remove another's record.
// Out of order, each is found by name and type, and by content among several.
func postIDs(sent []batchRecord, got []posted) ([]string, error) {
	if len(got) != len(sent) {
		return nil, fmt.Errorf("the batch answer has %d created records, %d were sent", len(got), len(sent))
	}
	fold := func(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }
	named := func(s batchRecord, g posted) bool {
		return fold(s.Type) == fold(g.Type) && fold(s.Name) == fold(g.Name)
	}
	ids := make([]string, len(sent))
	inOrder := true
	for i := range sent {
		// Content too: two values of one record set (A 192.0.2.1 and .2) answered
		// swapped would otherwise trade ids, and removing one value delete the other.
		ids[i] = got[i].ID
		inOrder = inOrder && named(sent[i], got[i]) && fold(sent[i].Content) == fold(got[i].Content)
	}
	if inOrder {
		return ids, nil
	}
	used := make([]bool, len(got))
	for i, s := range sent {
		j := -1
		for k, g := range got {
			if !used[k] && named(s, g) && (j < 0 || fold(g.Content) == fold(s.Content)) {
				if j = k; fold(g.Content) == fold(s.Content) {
					break
				}
			}
		}
		if j < 0 {
			return nil, fmt.Errorf("the batch answer has no created record %s %s", s.Type, s.Name)
		}
		used[j] = true
		ids[i] = got[j].ID
	}
	return ids, nil
}

// applied are the changes of batch as made: the records created carry the ids the
// answer gave their values.
func (p *Provider) applied(batch []providers.Change, placements []placed, posts []string) ([]providers.Change, error) {
	applied := make([]providers.Change, len(batch))
	for i, c := range batch {
		applied[i] = c
		if c.New != nil {
			n := c.New.Clone()
			n.ProviderIDs = make([]string, len(n.Values))
			applied[i].New = &n
		}
	}
	for _, pl := range placements {
		id := pl.id
		if pl.post >= 0 {
			id = posts[pl.post]
		}
		applied[pl.change].New.ProviderIDs[pl.value] = id
	}
	return applied, nil
}

func comment(owner string) string {
	if owner == "" {
		return ""
	}
	return commentPrefix + owner
}

// classify wraps an SDK error as a providers.Error: 429, 5xx and network failures are
// transient; authentication, not-found and invalid requests are permanent.
func (p *Provider) classify(op string, err error) error {
	e := &providers.Error{Provider: p.name, Op: op, Kind: providers.Transient, Err: providers.Quote(err)}
	var apiErr *dns.Error // the SDK's one error type, aliased by each of its packages
	var held *providers.HeldError
	switch {
	case errors.As(err, &apiErr):
		e.Code = strconv.Itoa(apiErr.StatusCode)
		if len(apiErr.Errors) > 0 {
			e.Code = strconv.Itoa(int(apiErr.Errors[0].Code))
		}
		switch {
		case apiErr.StatusCode == http.StatusTooManyRequests:
			e.Refused = true
			if apiErr.Response != nil {
				e.RetryAfter = providers.ParseRetryAfter(apiErr.Response.Header)
			}
		case apiErr.StatusCode == http.StatusServiceUnavailable:
			e.Refused = true
		case apiErr.StatusCode >= 500, apiErr.StatusCode == http.StatusRequestTimeout, apiErr.StatusCode == http.StatusConflict:
		default:
			e.Kind = providers.Permanent
		}
	case errors.As(err, &held):
		e.Code, e.Refused, e.RetryAfter = "rate_limit", true, held.RetryAfter
	case providers.IsNetwork(err), errors.Is(err, context.Canceled):
		e.Code = "network"
	}
	return e
}

func (p *Provider) permanent(op, format string, args ...any) error {
	return &providers.Error{Provider: p.name, Op: op, Kind: providers.Permanent, Code: "not_found", Err: fmt.Errorf(format, args...)}
}

func (p *Provider) transient(op, format string, args ...any) error {
	return &providers.Error{Provider: p.name, Op: op, Kind: providers.Transient, Err: fmt.Errorf(format, args...)}
}
