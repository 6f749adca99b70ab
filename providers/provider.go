// Package providers is the operator's hands on DNS: one small interface that every
// provider implements (resolve a zone, list its records, apply changes), the record
// model they share, and the pure plan that decides what to change.
//
// Providers only list and apply. What to change is decided by Plan, a pure function;
// extra behaviour (rate limiting, caching) wraps the same interface or the HTTP client.
package providers

import (
	"context"
	"slices"
	"strings"
)

// Record types the operator writes and the conformance suite exercises.
const (
	TypeA     = "A"
	TypeAAAA  = "AAAA"
	TypeCNAME = "CNAME"
	TypeTXT   = "TXT"
)

// Record is a resource record set: every value of one name and type.
type Record struct {
	// Name is the fully qualified name, lowercase, without the trailing dot.
	Name string
	// Type is A, AAAA, CNAME, TXT, ...
	Type string
	// TTL in seconds; 1 means automatic (Cloudflare).
	TTL int64
	// Values are sorted; CNAME targets lowercase without the trailing dot, TXT values
	// unquoted.
	Values []string
	// Proxied is Cloudflare's orange cloud.
	Proxied bool
	// Owner is the ownership key of the TenantRoute that wrote the record, "" when the
	// operator does not own it. Providers store it natively: Cloudflare in the
	// record's comment, Route53 in a registry TXT record at a derived name.
	Owner string
	// ProviderIDs are the provider's ids of the values, in Values order, where the
	// provider has per-value ids (Cloudflare). Set by the provider; ignored by Equal.
	ProviderIDs []string
}

// Key identifies a record set within a zone.
type Key struct{ Name, Type string }

// Key returns the record's name and type.
func (r Record) Key() Key { return Key{r.Name, r.Type} }

// Equal reports whether two records have the same content and owner; provider ids
// are not content.
func (r Record) Equal(o Record) bool {
	return r.Name == o.Name && r.Type == o.Type && r.TTL == o.TTL && r.Proxied == o.Proxied &&
		r.Owner == o.Owner && slices.Equal(r.Values, o.Values)
}

// Clone returns a deep copy.
func (r Record) Clone() Record {
	r.Values = slices.Clone(r.Values)
	r.ProviderIDs = slices.Clone(r.ProviderIDs)
	return r
}

// Action is what a change does.
type Action string

// Actions of a change.
const (
	Create Action = "Create"
	Update Action = "Update"
	Delete Action = "Delete"
)

// Change is one record-set change. Old is the current record (Update, Delete), New
// the desired one (Create, Update).
type Change struct {
	Action Action
	Old    *Record
	New    *Record
}

// record is the record the change is about: the new one, or the old one of a delete.
func (c Change) record() *Record {
	if c.New != nil {
		return c.New
	}
	return c.Old
}

// Name is the record name the change touches.
func (c Change) Name() string { return c.record().Name }

// Type is the record type the change touches.
func (c Change) Type() string { return c.record().Type }

// Owner is the owner the change is made for: the new record's, or the old one's when
// the change leaves the record without an owner (a delete, or a release).
func (c Change) Owner() string {
	if c.New != nil && c.New.Owner != "" {
		return c.New.Owner
	}
	if c.Old != nil {
		return c.Old.Owner
	}
	return ""
}

// Zone is a DNS zone at a provider.
type Zone struct {
	// Name is the zone apex, lowercase, without the trailing dot.
	Name string
	// ID is the provider's zone id.
	ID string
}

// Contains reports whether name is the apex of the zone or below it.
func (z Zone) Contains(name string) bool {
	return name == z.Name || strings.HasSuffix(name, "."+z.Name)
}

// Failure is a change the provider rejected for a reason of its own (an invalid
// record, a clash with a record that exists): retrying it unchanged will not help.
type Failure struct {
	Change Change
	Err    error
}

// Result says what became of the changes given to ApplyChanges.
type Result struct {
	// Applied are the changes made at the provider, with New as it now is there
	// (provider ids filled in).
	Applied []Change
	// Failed are the changes the provider rejected; the others were not blocked by them.
	Failed []Failure
}

// Provider is one DNS provider account.
type Provider interface {
	// Name identifies the account in logs, metrics and errors.
	Name() string
	// ResolveZone checks that the zone exists and fills in its id, looking the zone up
	// by name when zone.ID is empty.
	ResolveZone(ctx context.Context, zone Zone) (Zone, error)
	// ListRecords returns every record set of the zone, normalised, with owners, in a
	// slice of the caller's (the cache sorts it in place and keeps it).
	ListRecords(ctx context.Context, zone Zone) ([]Record, error)
	// ApplyChanges applies the changes in the order given, in as few requests as the
	// provider's batch limits allow. A change the provider rejects is reported in
	// Result.Failed and does not block the others. A non-nil error (provider
	// unreachable, throttled, credentials refused) means the changes in neither
	// Applied nor Failed were not made.
	ApplyChanges(ctx context.Context, zone Zone, changes []Change) (Result, error)
	// Normalize returns the record as this provider stores it, so that a desired
	// record equals the listed record once applied.
	Normalize(r Record) Record
}

// ZonesResolver is implemented by providers that resolve many zones in fewer requests
// than one each. An account's zones are resolved before anything is listed or
// written: at Route53's 5 requests a second, ten looked up one by one held every
// write back by 2 s.
type ZonesResolver interface {
	// ResolveZones is ResolveZone for each zone: the zones and errors answer the
	// zones given, index for index.
	ResolveZones(ctx context.Context, zones []Zone) ([]Zone, []error)
}

// ResolveZones resolves zones with the provider's ZonesResolver when it has one, and
// with one ResolveZone each otherwise; results and errors answer zones index for index.
func ResolveZones(ctx context.Context, p Provider, zones []Zone) ([]Zone, []error) {
	if r, ok := p.(ZonesResolver); ok {
		return r.ResolveZones(ctx, zones)
	}
	out, errs := make([]Zone, len(zones)), make([]error, len(zones))
	for i, z := range zones {
		out[i], errs[i] = p.ResolveZone(ctx, z)
	}
	return out, errs
}

// Batched is implemented by providers that apply changes in batches with a limit per
// request, so that callers can fill batches.
type Batched interface {
	// BatchLimit is the most one request may carry.
	BatchLimit() Cost
	// ChangeCost is what a change costs against BatchLimit.
	ChangeCost(Change) Cost
}
