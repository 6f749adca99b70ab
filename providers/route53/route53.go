// Package route53 is the AWS Route53 DNS provider, on aws-sdk-go-v2.
//
// Ownership: Route53 has no per-record metadata, so each owned record set has a
// registry TXT record at a derived name, "_tenantroute-<type>.<name>" with the value
// "heritage=tenantroute,owner=<owner>", written in the same atomic change batch as the
// set itself. It sits below the name, never beside a CNAME. Sets without a registry
// record are foreign and never changed.
package route53

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	r53 "github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tenantroute/tenantroute-operator/internal/clip"
	"github.com/tenantroute/tenantroute-operator/providers"
)

// Defaults from Route53's published limits.
const (
	DefaultRegion     = "us-east-1"
	DefaultRateLimit  = 5
	DefaultRateWindow = time.Second
	// MaxRecords and MaxChars per ChangeResourceRecordSets, an UPSERT counting twice.
	MaxRecords = 1000
	MaxChars   = 32000
	// DefaultMaxAttempts per request, Throttling and PriorRequestNotComplete included.
	DefaultMaxAttempts = 5

	registryPrefix = "_tenantroute-"
	registryValue  = "heritage=tenantroute,owner="
	registryTTL    = 300
)

// Options configure one AWS account.
type Options struct {
	// Name identifies the account in errors and metrics.
	Name string
	// Region signs requests; Route53 is global and signs as us-east-1.
	Region string
	// Endpoint replaces the Route53 endpoint (an emulator).
	Endpoint string
	// AccessKeyID and SecretAccessKey are static credentials; when empty the default
	// AWS credential chain is used.
	AccessKeyID, SecretAccessKey, SessionToken string
	// RateLimit requests per RateWindow; defaults to Route53's 5 per second.
	RateLimit  int
	RateWindow time.Duration
	// MaxAttempts per request (1 = no retries).
	MaxAttempts int
	// Transport underlies the rate-limited transport; http.DefaultTransport if nil.
	Transport http.RoundTripper
	// Observe, if set, is told of every HTTP request: operation and status code.
	Observe func(operation, code string)
}

// Provider is one AWS account.
type Provider struct {
	name   string
	client *r53.Client

	mu sync.Mutex
	// leftover holds, per zone ID, the keys with a record at their registry name but no
	// set in the zone's last listing (the set deleted by hand, the registry record
	// perhaps edited): a create there must UPSERT the registry record, where everywhere
	// else it CREATEs it at half the cost.
	leftover map[string]map[providers.Key]bool
}

// New returns the provider for one account. Every request, SDK retries included, goes
// through the account's rate limiter.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.Region == "" {
		o.Region = DefaultRegion
	}
	if o.RateLimit == 0 {
		o.RateLimit, o.RateWindow = DefaultRateLimit, DefaultRateWindow
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = DefaultMaxAttempts
	}
	loadOpts := []func(*config.LoadOptions) error{config.WithRegion(o.Region)}
	if o.AccessKeyID != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	// The SDK's own HTTP client honours AWS_CA_BUNDLE and its timeouts; it is wrapped,
	// not replaced.
	base := o.Transport
	if base == nil {
		base = providers.RoundTripperFunc(cfg.HTTPClient.Do)
	}
	httpClient := &http.Client{Transport: &providers.LimitedTransport{
		Base: base, Limiter: providers.NewLimiter(o.RateLimit, o.RateWindow), Observe: o.Observe,
	}, Timeout: 30 * time.Second}
	client := r53.NewFromConfig(cfg, func(ro *r53.Options) {
		ro.HTTPClient = httpClient
		if o.Endpoint != "" {
			ro.BaseEndpoint = aws.String(o.Endpoint)
		}
		// The standard retryer's retry-token bucket gives up during a long throttle
		// storm; the account limiter already paces requests, so it is turned off.
		ro.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = o.MaxAttempts
			so.MaxBackoff = 5 * time.Second
			so.RateLimiter = ratelimit.None
			so.Retryables = append(so.Retryables, retry.RetryableErrorCode{
				Codes: map[string]struct{}{"PriorRequestNotComplete": {}},
			})
		})
	})
	return &Provider{name: o.Name, client: client, leftover: map[string]map[providers.Key]bool{}}, nil
}

// Name implements providers.Provider.
func (p *Provider) Name() string { return p.name }

// ResolveZone implements providers.Provider.
func (p *Provider) ResolveZone(ctx context.Context, zone providers.Zone) (providers.Zone, error) {
	const op = "ResolveZone"
	ctx = providers.WithOperation(ctx, op)
	if zone.ID != "" {
		out, err := p.client.GetHostedZone(ctx, &r53.GetHostedZoneInput{Id: aws.String(zone.ID)})
		if err != nil {
			return zone, p.classify(op, err)
		}
		if got := providers.CanonicalName(aws.ToString(out.HostedZone.Name)); got != zone.Name {
			return zone, p.permanent(op, "hosted zone %s is %s, not %s", zone.ID, got, zone.Name)
		}
		zone.ID = strings.TrimPrefix(aws.ToString(out.HostedZone.Id), "/hostedzone/")
		return zone, nil
	}
	out, err := p.client.ListHostedZonesByName(ctx, &r53.ListHostedZonesByNameInput{
		DNSName: aws.String(zone.Name), MaxItems: aws.Int32(10),
	})
	if err != nil {
		return zone, p.classify(op, err)
	}
	for _, z := range out.HostedZones {
		if providers.CanonicalName(aws.ToString(z.Name)) == zone.Name && (z.Config == nil || !z.Config.PrivateZone) {
			zone.ID = strings.TrimPrefix(aws.ToString(z.Id), "/hostedzone/")
			return zone, nil
		}
	}
	return zone, p.permanent(op, "hosted zone %s not found in this account", zone.Name)
}

// ResolveZones implements providers.ZonesResolver. Zones given with an id are checked
// one by one; those looked up by name are found in ListHostedZonesByName pages.
// Route53 lists zones in the order of their reversed labels (com.example.eu), so one
// page of 100 from the first name wanted answers every wanted name up to the page's
// last, and the next request starts at the first name still unanswered. One
// application's zones sit together in that order: ten resolve in one request, where
// they took ten; zones scattered among thousands take at most one request each.
func (p *Provider) ResolveZones(ctx context.Context, zones []providers.Zone) ([]providers.Zone, []error) {
	const op = "ResolveZone"
	out, errs := slices.Clone(zones), make([]error, len(zones))
	var byName []int
	for i, z := range zones {
		if z.ID != "" {
			out[i], errs[i] = p.ResolveZone(ctx, z)
			continue
		}
		byName = append(byName, i)
	}
	slices.SortFunc(byName, func(a, b int) int { return strings.Compare(listOrder(zones[a].Name), listOrder(zones[b].Name)) })
	listCtx := providers.WithOperation(ctx, op)
	var missing []int
	for len(byName) > 0 {
		first := zones[byName[0]].Name
		page, err := p.client.ListHostedZonesByName(listCtx, &r53.ListHostedZonesByNameInput{
			DNSName: aws.String(first), MaxItems: aws.Int32(100),
		})
		if err != nil {
			for _, i := range byName {
				errs[i] = p.classify(op, err)
			}
			break
		}
		public := map[string]string{} // name -> id, the first public zone of each name
		for _, z := range page.HostedZones {
			name := providers.CanonicalName(aws.ToString(z.Name))
			if _, seen := public[name]; !seen && (z.Config == nil || !z.Config.PrivateZone) {
				public[name] = strings.TrimPrefix(aws.ToString(z.Id), "/hostedzone/")
			}
		}
		// A truncated page answers for the names before its last; one at or after it
		// may be on the next page.
		last := ""
		if page.IsTruncated && len(page.HostedZones) > 0 {
			last = listOrder(providers.CanonicalName(aws.ToString(page.HostedZones[len(page.HostedZones)-1].Name)))
		}
		rest := byName[:0]
		for _, i := range byName {
			switch id, ok := public[zones[i].Name]; {
			case ok:
				out[i].ID = id
			case last != "" && listOrder(zones[i].Name) >= last:
				rest = append(rest, i)
			default:
				// Not where it would be. Only a lookup of its own says it is missing: it
				// costs a request for a zone that is an error anyway, and a name our
				// order places differently from Route53's is found, not refused.
				missing = append(missing, i)
			}
		}
		if len(rest) > 0 && zones[rest[0]].Name == first {
			// A whole page of zones named first, none public: no progress by pages.
			out[rest[0]], errs[rest[0]] = p.ResolveZone(ctx, zones[rest[0]])
			rest = rest[1:]
		}
		byName = rest
	}
	for _, i := range missing {
		out[i], errs[i] = p.ResolveZone(ctx, zones[i])
	}
	return out, errs
}

// listOrder is the key Route53 lists hosted zones by: the labels reversed.
func listOrder(name string) string {
	labels := strings.Split(name, ".")
	slices.Reverse(labels)
	return strings.Join(labels, ".")
}

// ListRecords implements providers.Provider, reading every page of the zone's record
// sets and joining registry records to the sets they own. A listing is the truth the
// plans are made against (what is absent is created, beside records of others), so
// one that cannot be whole is an error: pages that do not move forward (the SDK's
// paginator would loop on them), and a listing without the zone's SOA, which every
// hosted zone has (a 200 with an empty or foreign body reads as an empty zone).
func (p *Provider) ListRecords(ctx context.Context, zone providers.Zone) ([]providers.Record, error) {
	const op = "ListRecords"
	ctx = providers.WithOperation(ctx, op)
	in := &r53.ListResourceRecordSetsInput{HostedZoneId: aws.String(zone.ID), MaxItems: aws.Int32(300)}
	owners := map[providers.Key]string{}
	// Every record at a registry name, ours in form or not: a create beside one that
	// is not ours in form (edited by hand) must overwrite it too, or be refused forever.
	leftover := map[providers.Key]bool{}
	var records []providers.Record
	soa := false
	started := map[string]bool{} // where each page began
	// Each page is turned into records as it comes: the SDK's sets of a whole zone
	// (four a route: its records and their registry TXTs) were, kept until the last
	// page, the larger part of what a resync of 10 zones of 10,000 routes held.
	for n := 1; ; n++ {
		page, err := p.client.ListResourceRecordSets(ctx, in)
		if err != nil {
			return nil, p.classify(op, err)
		}
		for _, s := range page.ResourceRecordSets {
			r := fromSet(s)
			if owned, ok := registryTarget(r); ok {
				leftover[owned] = true
				if len(r.Values) == 1 && strings.HasPrefix(r.Values[0], registryValue) {
					owners[owned] = strings.TrimPrefix(r.Values[0], registryValue)
				}
				continue
			}
			soa = soa || (r.Type == "SOA" && r.Name == zone.Name)
			records = append(records, r)
		}
		if !page.IsTruncated {
			break
		}
		next := aws.ToString(page.NextRecordName) + " " + string(page.NextRecordType) + " " + aws.ToString(page.NextRecordIdentifier)
		if page.NextRecordName == nil || started[next] {
			return nil, providers.Incomplete(p.name, op, "page %d of zone %s is truncated but does not lead to a new page (next: %q)", n, zone.Name, next)
		}
		started[next] = true
		in.StartRecordName, in.StartRecordType, in.StartRecordIdentifier = page.NextRecordName, page.NextRecordType, page.NextRecordIdentifier
	}
	if !soa {
		return nil, providers.Incomplete(p.name, op, "the listing of zone %s (%d record sets) has no SOA at its apex: an answer that is not the whole zone", zone.Name, len(records))
	}
	for i := range records {
		k := records[i].Key()
		records[i].Owner = owners[k]
		delete(leftover, k)
	}
	p.mu.Lock()
	p.leftover[zone.ID] = leftover
	p.mu.Unlock()
	return records, nil
}

func fromSet(s types.ResourceRecordSet) providers.Record {
	r := providers.Record{Name: unescape(aws.ToString(s.Name)), Type: string(s.Type), TTL: aws.ToInt64(s.TTL)}
	for _, rr := range s.ResourceRecords {
		r.Values = append(r.Values, aws.ToString(rr.Value))
	}
	if s.AliasTarget != nil {
		r.Values = append(r.Values, "ALIAS "+aws.ToString(s.AliasTarget.DNSName))
	}
	if s.SetIdentifier != nil {
		// A routing-policy set shares its name and type with others; the operator never
		// writes those, so it keeps them apart and foreign.
		r.Type += "/" + aws.ToString(s.SetIdentifier)
	}
	return providers.NormalizeCommon(r)
}

// unescape turns Route53's octal escapes (\052 for *) back into characters.
func unescape(name string) string {
	if !strings.Contains(name, `\`) {
		return name
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] == '\\' && i+3 < len(name) {
			var c byte
			if _, err := fmt.Sscanf(name[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(name[i])
	}
	return b.String()
}

// registryName is where the ownership of a record set is written.
func registryName(k providers.Key) string {
	return registryPrefix + strings.ToLower(k.Type) + "." + k.Name
}

// registryTarget returns the key of the set a registry record owns.
func registryTarget(r providers.Record) (providers.Key, bool) {
	if r.Type != providers.TypeTXT || !strings.HasPrefix(r.Name, registryPrefix) {
		return providers.Key{}, false
	}
	typ, name, ok := strings.Cut(strings.TrimPrefix(r.Name, registryPrefix), ".")
	if !ok {
		return providers.Key{}, false
	}
	return providers.Key{Name: name, Type: strings.ToUpper(typ)}, true
}

// Normalize implements providers.Provider: Route53 has no proxying.
func (p *Provider) Normalize(r providers.Record) providers.Record {
	r = providers.NormalizeCommon(r)
	r.Proxied = false
	return r
}

// ApplyChanges implements providers.Provider with ChangeResourceRecordSets batches
// within Route53's limits.
func (p *Provider) ApplyChanges(ctx context.Context, zone providers.Zone, changes []providers.Change) (providers.Result, error) {
	ctx = providers.WithOperation(ctx, "ApplyChanges")
	p.mu.Lock()
	leftover := p.leftover[zone.ID]
	p.mu.Unlock()
	upsert := func(c providers.Change) bool { return c.Action == providers.Create && leftover[c.New.Key()] }
	b := providers.Batcher{
		Limit: batchLimit,
		Cost:  func(c providers.Change) providers.Cost { return changeCost(c, upsert(c)) },
		Send: func(ctx context.Context, batch []providers.Change) ([]providers.Change, error) {
			var wire []types.Change
			for _, c := range batch {
				wire = append(wire, wireChanges(c, upsert(c))...)
			}
			if err := p.send(ctx, zone, wire); err != nil {
				return nil, err
			}
			return batch, nil
		},
	}
	return b.Apply(ctx, changes)
}

var batchLimit = providers.Cost{Records: MaxRecords, Chars: MaxChars}

// BatchLimit is the most one ChangeResourceRecordSets may carry.
func (p *Provider) BatchLimit() providers.Cost { return batchLimit }

// ChangeCost is what a change costs against BatchLimit, registry record included:
// resource records and characters of values, an UPSERT counting twice. A create
// where a registry record was left behind costs more (see wireChanges); batches are
// cut with that, this is the cost everywhere else.
func (p *Provider) ChangeCost(c providers.Change) providers.Cost { return changeCost(c, false) }

// changeCost counts a change as wireChanges sends it, without building it (building
// it was 9% of the manager's CPU in a 10,000-route sync).
func changeCost(c providers.Change, upsertRegistry bool) providers.Cost {
	var cost providers.Cost
	add := func(r providers.Record, weight int) {
		for _, v := range r.Values {
			cost.Records += weight
			cost.Chars += weight * wireValueLen(r.Type, v)
		}
	}
	registry := func(r providers.Record, weight int) {
		cost.Records += weight
		cost.Chars += weight * providers.QuotedTXTLen(registryValue+r.Owner)
	}
	switch c.Action {
	case providers.Create:
		add(*c.New, 1)
		if upsertRegistry {
			registry(*c.New, 2)
		} else {
			registry(*c.New, 1)
		}
	case providers.Update:
		add(*c.New, 2)
		if released(c) {
			registry(*c.Old, 1)
		}
	default:
		add(*c.Old, 1)
		registry(*c.Old, 1)
	}
	return cost
}

// wireValueLen is the length of a value as toSet writes it.
func wireValueLen(typ, v string) int {
	switch typ {
	case providers.TypeTXT:
		return providers.QuotedTXTLen(v)
	case providers.TypeCNAME:
		return len(v) + 1
	}
	return len(v)
}

// wireChanges are the Route53 changes of one record-set change, registry included.
// Updates are UPSERTs of the set; one that releases the set deletes its registry
// record too. Creates CREATE both the
// set and its registry record: the registry record is most of a create's characters,
// and an UPSERT counts twice against a batch's 32,000, so CREATE fits almost twice as
// many creates in a request. Where the last listing found a record at the registry
// name without its set (left behind, perhaps edited, by hand), upsertRegistry UPSERTs
// it instead, so that it does not block the set. Should such a record appear between two listings, the
// batch is rejected as it would be for a set someone created meanwhile, and the zone's
// next listing finds it.
func wireChanges(c providers.Change, upsertRegistry bool) []types.Change {
	switch c.Action {
	case providers.Create:
		registryAction := types.ChangeActionCreate
		if upsertRegistry {
			registryAction = types.ChangeActionUpsert
		}
		return []types.Change{
			{Action: types.ChangeActionCreate, ResourceRecordSet: toSet(*c.New)},
			{Action: registryAction, ResourceRecordSet: registrySet(*c.New)},
		}
	case providers.Update:
		w := []types.Change{{Action: types.ChangeActionUpsert, ResourceRecordSet: toSet(*c.New)}}
		if released(c) {
			w = append(w, types.Change{Action: types.ChangeActionDelete, ResourceRecordSet: registrySet(*c.Old)})
		}
		return w
	default:
		return []types.Change{
			{Action: types.ChangeActionDelete, ResourceRecordSet: toSet(*c.Old)},
			{Action: types.ChangeActionDelete, ResourceRecordSet: registrySet(*c.Old)},
		}
	}
}

// released reports an update that leaves a set without its owner (zonequeue's
// Release): its registry record goes, and the set is no longer this installation's.
func released(c providers.Change) bool {
	return c.Old != nil && c.Old.Owner != "" && c.New.Owner == ""
}

func toSet(r providers.Record) *types.ResourceRecordSet {
	s := &types.ResourceRecordSet{Name: aws.String(r.Name + "."), Type: types.RRType(r.Type), TTL: aws.Int64(r.TTL)}
	for _, v := range r.Values {
		switch r.Type {
		case providers.TypeTXT:
			v = providers.QuoteTXT(v)
		case providers.TypeCNAME:
			v += "."
		}
		s.ResourceRecords = append(s.ResourceRecords, types.ResourceRecord{Value: aws.String(v)})
	}
	return s
}

func registrySet(r providers.Record) *types.ResourceRecordSet {
	return toSet(providers.Record{
		Name: registryName(r.Key()), Type: providers.TypeTXT, TTL: registryTTL,
		Values: []string{registryValue + r.Owner},
	})
}

func (p *Provider) send(ctx context.Context, zone providers.Zone, wire []types.Change) error {
	ctx, sends := providers.CountSends(ctx)
	_, err := p.client.ChangeResourceRecordSets(ctx, &r53.ChangeResourceRecordSetsInput{
		HostedZoneId: aws.String(zone.ID),
		ChangeBatch:  &types.ChangeBatch{Changes: wire, Comment: aws.String("tenantroute-operator")},
	})
	if err != nil {
		err = p.classify("ApplyChanges", err)
		if sends.Uncertain() {
			return providers.Unsure(err)
		}
		var invalid *types.InvalidChangeBatch
		var input *types.InvalidInput
		if errors.As(err, &invalid) || errors.As(err, &input) {
			return &providers.RejectedError{Err: err}
		}
		return err
	}
	return nil
}

// maxCode bounds an error code read from an answer. AWS's are short identifiers; the
// code goes into statuses and conditions (a zone's listError, a deletion's blocker),
// and one the size of the answer, from a broken or hostile endpoint, must not.
const maxCode = 64

func boundCode(code string) string {
	if len(code) <= maxCode {
		return code
	}
	return strings.ToValidUTF8(code[:maxCode], "")
}

// changeMessages joins the reasons Route53 gave for refusing a batch: one per change
// it refused, so up to 1,000, each quoting a record. The first few say what is wrong;
// all of them were 112 KB of error text for 1,000, which a route's status quoted whole.
func changeMessages(msgs []string) string {
	const shown, each = 5, 256
	var b strings.Builder
	for i, m := range msgs[:min(len(msgs), shown)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(clip.String(m, each))
	}
	if len(msgs) > shown {
		fmt.Fprintf(&b, "; and %d more", len(msgs)-shown)
	}
	return b.String()
}

// classify wraps an SDK error as a providers.Error: throttling, 5xx and network
// failures are transient; credentials refused, zone not found and invalid changes
// are permanent.
func (p *Provider) classify(op string, err error) error {
	e := &providers.Error{Provider: p.name, Op: op, Kind: providers.Transient, Err: err}
	var apiErr smithy.APIError
	var respErr *smithyhttp.ResponseError
	var held *providers.HeldError
	switch {
	case errors.As(err, &held):
		e.Code, e.Refused, e.RetryAfter = "rate_limit", true, held.RetryAfter
	case errors.As(err, &apiErr):
		e.Code = boundCode(apiErr.ErrorCode())
		switch e.Code {
		case "Throttling", "ThrottlingException", "PriorRequestNotComplete", "ServiceUnavailable":
			e.Refused = true
		case "InternalFailure", "RequestTimeout":
		default:
			if errors.As(err, &respErr) && respErr.HTTPStatusCode() >= 500 {
				break
			}
			e.Kind = providers.Permanent
		}
		if ae, ok := apiErr.(*types.InvalidChangeBatch); ok {
			e.Err = fmt.Errorf("%w: %s", err, changeMessages(ae.Messages))
		}
	// Status 0 is no answer at all (the request failed to send, or the connection
	// dropped before a response): the change may even have been applied, and a list
	// and a new plan settle it. Only a 4xx answer is permanent.
	case errors.As(err, &respErr) && respErr.HTTPStatusCode() > 0 && respErr.HTTPStatusCode() < 500:
		e.Code = fmt.Sprint(respErr.HTTPStatusCode())
		e.Kind = providers.Permanent
	default:
		e.Code = "network"
	}
	e.Err = providers.Quote(e.Err)
	return e
}

func (p *Provider) permanent(op, format string, args ...any) error {
	return &providers.Error{Provider: p.name, Op: op, Kind: providers.Permanent, Code: "NoSuchHostedZone", Err: fmt.Errorf(format, args...)}
}
