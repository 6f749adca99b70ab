package providers

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Cached wraps a Provider so that a zone is listed at most once per resync period,
// however many callers ask, and is kept current with the changes applied through it.
type Cached struct {
	Provider
	resync time.Duration
	now    func() time.Time

	mu     sync.Mutex
	zones  map[string]*zoneRecords // by zone id
	flight singleflight.Group
	// listing holds, for each listing under way, what the applies made meanwhile: its
	// answer may have been read before them, and would otherwise replace them.
	listing map[string][]*listingUnderWay
}

// listingUnderWay collects the changes applied to a zone while it is listed.
type listingUnderWay struct {
	applied map[Key]*Record
	// uncertain: an apply meanwhile may or may not have been applied; the listing
	// cannot say which of its records predate it, and is not cached.
	uncertain bool
}

// beginListing starts collecting the applies to a zone until install.
func (c *Cached) beginListing(zoneID string) *listingUnderWay {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &listingUnderWay{}
	c.listing[zoneID] = append(c.listing[zoneID], l)
	return l
}

// endListing stops collecting; c.mu must be held.
func (c *Cached) endListing(zoneID string, l *listingUnderWay) {
	rest := slices.DeleteFunc(c.listing[zoneID], func(o *listingUnderWay) bool { return o == l })
	if len(rest) == 0 {
		delete(c.listing, zoneID)
		return
	}
	c.listing[zoneID] = rest
}

// install caches a zone's listing with what was applied while it was read, and
// returns it; nil when an apply meanwhile left it unknown (the zone is listed again
// on next use). c.mu must be held.
func (c *Cached) install(zoneID string, l *listingUnderWay, zr *zoneRecords) *zoneRecords {
	c.endListing(zoneID, l)
	if l.uncertain {
		return nil
	}
	zr.applied = l.applied // merged on read; an apply the listing already saw is merged to the same
	c.zones[zoneID] = zr
	return zr
}

type zoneRecords struct {
	listedAt time.Time
	// snapshot is the records sorted by name and type, one per key: the zone's only
	// copy (a map by key beside it was a third of the zone caches' memory). Callers
	// hold on to it while they plan, so it is never modified: an apply merges its
	// changes into a new one (O(n + k log k) for k changes) rather than sorting the
	// zone again.
	snapshot []Record
	// applied holds the records the applies since the snapshot changed (nil: deleted),
	// merged into a new snapshot when the zone is next read. A flush sends its changes
	// request by request, and merging each request's into a new copy of the zone kept
	// several copies alive while the flush still planned from the first (at 100,000
	// routes, 166 MB of the failover's heap); merged on read, a flush of 50 requests
	// makes one copy.
	applied map[Key]*Record
}

// records returns the zone as it is now, the applied changes merged in; c.mu must be
// held.
func (zr *zoneRecords) records() []Record {
	if len(zr.applied) > 0 {
		zr.snapshot = zr.merge(zr.applied)
		zr.applied = nil
	}
	return zr.snapshot
}

// newZoneRecords keeps a zone's listing sorted, in the listing's own slice (a copy was
// 16 MB beside the listing at 100,000 routes); of records listed twice under one key,
// the last is kept.
func newZoneRecords(listed []Record, listedAt time.Time) *zoneRecords {
	recs := listed
	slices.SortStableFunc(recs, compareRecords)
	out := recs[:0]
	for _, r := range recs {
		if n := len(out); n > 0 && out[n-1].Key() == r.Key() {
			out[n-1] = r
			continue
		}
		out = append(out, r)
	}
	if out == nil {
		out = []Record{} // listed, and empty
	}
	return &zoneRecords{listedAt: listedAt, snapshot: slices.Clip(out)}
}

// NewCached lists each zone at most once per resync.
func NewCached(p Provider, resync time.Duration) *Cached {
	return &Cached{Provider: p, resync: resync, now: time.Now, zones: map[string]*zoneRecords{}, listing: map[string][]*listingUnderWay{}}
}

// list lists the zone and caches the listing, merged with what was applied while it
// was read; it returns the records, and those cached before when there were (had). An
// apply of unknown outcome meanwhile leaves the zone unknown: that is an error, so that
// the caller lists again rather than plan from a listing that may predate the apply.
func (c *Cached) list(ctx context.Context, zone Zone) (records, before []Record, had bool, err error) {
	listedAt := c.now()
	l := c.beginListing(zone.ID)
	installed := false
	defer func() {
		if !installed { // failed, left unknown, or panicked: stop collecting
			c.mu.Lock()
			c.endListing(zone.ID, l)
			c.mu.Unlock()
		}
	}()
	recs, err := c.Provider.ListRecords(ctx, zone)
	if err != nil {
		return nil, nil, false, err
	}
	zr := newZoneRecords(recs, listedAt) // sorted outside the lock
	c.mu.Lock()
	defer c.mu.Unlock()
	old, had := c.zones[zone.ID]
	if had {
		before = old.records()
	}
	if installed = c.install(zone.ID, l, zr) != nil; !installed {
		return nil, nil, false, &Error{Provider: c.Provider.Name(), Op: "ListRecords", Kind: Transient,
			Err: errors.New("a write of unknown outcome was made while the zone was listed; it is listed again")}
	}
	return zr.records(), before, had, nil
}

// ListRecords returns the zone's records from the cache, listing the zone when it was
// never listed or was listed more than the resync period ago. Concurrent callers of a
// zone share one list call. The records returned must not be modified.
func (c *Cached) ListRecords(ctx context.Context, zone Zone) ([]Record, error) {
	if recs, ok := c.fresh(zone.ID); ok {
		return recs, nil
	}
	v, err, _ := c.flight.Do(zone.ID, func() (any, error) {
		if recs, ok := c.fresh(zone.ID); ok {
			return recs, nil
		}
		recs, _, _, err := c.list(ctx, zone)
		return recs, err
	})
	if err != nil {
		return nil, err
	}
	return v.([]Record), nil
}

func (c *Cached) fresh(zoneID string) ([]Record, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	zr, ok := c.zones[zoneID]
	if !ok || c.now().Sub(zr.listedAt) >= c.resync {
		return nil, false
	}
	return zr.records(), true
}

func compareRecords(a, b Record) int {
	if n := strings.Compare(a.Name, b.Name); n != 0 {
		return n
	}
	return strings.Compare(a.Type, b.Type)
}

// merge returns a new snapshot: the old one without the keys touched, merged with
// those keys' records as they are now (nil: deleted); c.mu must be held.
func (zr *zoneRecords) merge(touched map[Key]*Record) []Record {
	var now []Record
	for _, r := range touched {
		if r != nil {
			now = append(now, *r)
		}
	}
	slices.SortFunc(now, compareRecords)
	out := make([]Record, 0, len(zr.snapshot)+len(now))
	for _, r := range zr.snapshot {
		if _, ok := touched[r.Key()]; ok {
			continue
		}
		for len(now) > 0 && compareRecords(now[0], r) < 0 {
			out = append(out, now[0])
			now = now[1:]
		}
		out = append(out, r)
	}
	return append(out, now...)
}

// ApplyChanges applies through the provider and records the applied changes in the
// cache. When the outcome is uncertain (an error: a batch may have been applied with
// its answer lost) the zone is listed again on next use. Rejected changes were not
// applied and leave the cache as it is; should the cache have caused them (a record
// someone else created meanwhile), the next resync corrects it.
func (c *Cached) ApplyChanges(ctx context.Context, zone Zone, changes []Change) (Result, error) {
	res, err := c.Provider.ApplyChanges(ctx, zone, changes)
	c.mu.Lock()
	defer c.mu.Unlock()
	// A refusal (429, 503) applied nothing: what is cached still holds, with what the
	// batches before it applied. Any other error may have left the zone in a state
	// nobody saw; it is listed again.
	uncertain := err != nil && !Refused(err)
	for _, l := range c.listing[zone.ID] {
		if l.uncertain = l.uncertain || uncertain; !l.uncertain {
			l.applied = record(l.applied, res.Applied)
		}
	}
	zr, ok := c.zones[zone.ID]
	if !ok {
		return res, err
	}
	if uncertain {
		delete(c.zones, zone.ID)
		return res, err
	}
	zr.applied = record(zr.applied, res.Applied)
	return res, err
}

// record notes applied changes in touched: each key's record as it now is (nil:
// deleted).
func record(touched map[Key]*Record, applied []Change) map[Key]*Record {
	if len(applied) > 0 && touched == nil {
		touched = make(map[Key]*Record, len(applied))
	}
	for _, ch := range applied {
		if ch.Old != nil {
			touched[ch.Old.Key()] = nil
		}
		if ch.New != nil {
			touched[ch.New.Key()] = ch.New
		}
	}
	return touched
}

// Relist lists the zone again, whatever its cache holds, and returns its records and
// the names whose records are not as the cache had them: where someone else changed
// the zone since. drifted is nil (everything may have changed) when the zone was not
// cached. A resync plans again only the owners those names concern: re-planning every
// owner of a zone that nobody touched was, at 100,000 routes, the largest allocation
// of a steady hour.
func (c *Cached) Relist(ctx context.Context, zone Zone) (records []Record, drifted map[string]bool, err error) {
	type relisted struct {
		records []Record
		drifted map[string]bool
	}
	v, err, _ := c.flight.Do("relist\x00"+zone.ID, func() (any, error) {
		recs, before, had, err := c.list(ctx, zone)
		if err != nil {
			return nil, err
		}
		out := relisted{records: recs}
		if had {
			out.drifted = driftedNames(before, recs)
		}
		return out, nil
	})
	if err != nil {
		return nil, nil, err
	}
	r := v.(relisted)
	return r.records, r.drifted, nil
}

// driftedNames are the names whose records differ between two snapshots sorted by
// name and type.
func driftedNames(before, after []Record) map[string]bool {
	drifted := map[string]bool{}
	for len(before) > 0 || len(after) > 0 {
		switch {
		case len(after) == 0 || len(before) > 0 && compareRecords(before[0], after[0]) < 0:
			drifted[before[0].Name] = true
			before = before[1:]
		case len(before) == 0 || compareRecords(before[0], after[0]) > 0:
			drifted[after[0].Name] = true
			after = after[1:]
		default:
			if !before[0].Equal(after[0]) {
				drifted[after[0].Name] = true
			}
			before, after = before[1:], after[1:]
		}
	}
	return drifted
}

// Invalidate makes the next ListRecords of the zone list it again.
func (c *Cached) Invalidate(zone Zone) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.zones, zone.ID)
}

// ResolveZones forwards to the provider's ZonesResolver, or resolves one zone at a time.
func (c *Cached) ResolveZones(ctx context.Context, zones []Zone) ([]Zone, []error) {
	return ResolveZones(ctx, c.Provider, zones)
}

// BatchLimit forwards to the provider when it is Batched; zero (unlimited) otherwise.
func (c *Cached) BatchLimit() Cost {
	if b, ok := c.Provider.(Batched); ok {
		return b.BatchLimit()
	}
	return Cost{}
}

// ChangeCost forwards to the provider when it is Batched; one record otherwise.
func (c *Cached) ChangeCost(ch Change) Cost {
	if b, ok := c.Provider.(Batched); ok {
		return b.ChangeCost(ch)
	}
	return Cost{Records: 1}
}
