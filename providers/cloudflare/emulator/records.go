package emulator

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// DNS records: listing, single writes and the batch endpoint. A batch goes through a
// txn, so that it is applied whole or not at all, as Cloudflare does.

func (e *Emulator) listRecords(w http.ResponseWriter, r *http.Request, zoneID string) {
	p, perPage, apiErr := page(r, 100, MaxPerPage)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	q := r.URL.Query()
	name := cmp(q.Get("name.exact"), q.Get("name"))
	typ := q.Get("type")
	e.mu.Lock()
	z := e.zoneOr404(w, zoneID)
	var recs []Record
	if z != nil {
		for _, rec := range sortedRecords(z.records) {
			if (name == "" || rec.Name == strings.ToLower(name)) && (typ == "" || rec.Type == typ) {
				recs = append(recs, rec)
			}
		}
	}
	e.mu.Unlock()
	if z == nil {
		return
	}
	result, info := paginate(recs, p, perPage)
	writeEnvelope(w, http.StatusOK, result, info)
}

func cmp(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// recordInput is a record as a client sends it: every field optional (patches).
type recordInput struct {
	ID      string  `json:"id"`
	Name    *string `json:"name"`
	Type    *string `json:"type"`
	Content *string `json:"content"`
	TTL     *int64  `json:"ttl"`
	Proxied *bool   `json:"proxied"`
	Comment *string `json:"comment"`
}

func (in recordInput) apply(r Record) Record {
	if in.Name != nil {
		r.Name = *in.Name
	}
	if in.Type != nil {
		r.Type = *in.Type
	}
	if in.Content != nil {
		r.Content = *in.Content
	}
	if in.TTL != nil {
		r.TTL = *in.TTL
	}
	if in.Proxied != nil {
		r.Proxied = *in.Proxied
	}
	if in.Comment != nil {
		r.Comment = *in.Comment
	}
	return r
}

func (e *Emulator) createRecord(w http.ResponseWriter, r *http.Request, zoneID string) {
	var in recordInput
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, errorf(http.StatusBadRequest, 9207, "Request body is invalid: %v", err))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	z := e.zoneOr404(w, zoneID)
	if z == nil {
		return
	}
	created, apiErr := e.post(&txn{z: z}, in.apply(Record{TTL: 1}))
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	writeEnvelope(w, http.StatusOK, created, nil)
}

func (e *Emulator) deleteRecord(w http.ResponseWriter, zoneID, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	z := e.zoneOr404(w, zoneID)
	if z == nil {
		return
	}
	if _, ok := z.records[id]; !ok {
		writeError(w, errorf(http.StatusNotFound, 81044, "Record does not exist."))
		return
	}
	(&txn{z: z}).del(id)
	writeEnvelope(w, http.StatusOK, map[string]string{"id": id}, nil)
}

type batchRequest struct {
	Deletes []recordInput `json:"deletes"`
	Patches []recordInput `json:"patches"`
	Puts    []recordInput `json:"puts"`
	Posts   []recordInput `json:"posts"`
}

type batchResult struct {
	Deletes []Record `json:"deletes"`
	Patches []Record `json:"patches"`
	Puts    []Record `json:"puts"`
	Posts   []Record `json:"posts"`
}

// batch applies deletes, patches, puts and posts in that order, in one transaction:
// on the first failure nothing is applied and that error is returned.
func (e *Emulator) batch(w http.ResponseWriter, r *http.Request, zoneID string) {
	var req batchRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, errorf(http.StatusBadRequest, 9207, "Request body is invalid: %v", err))
		return
	}
	if n := len(req.Deletes) + len(req.Patches) + len(req.Puts) + len(req.Posts); n > MaxBatch {
		writeError(w, errorf(http.StatusBadRequest, 81108, "batch of %d records exceeds the limit of %d", n, MaxBatch))
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	z := e.zoneOr404(w, zoneID)
	if z == nil {
		return
	}
	t := &txn{z: z}
	res := batchResult{Deletes: []Record{}, Patches: []Record{}, Puts: []Record{}, Posts: []Record{}}
	fail := func(err *apiError) {
		t.rollback()
		writeError(w, err)
	}
	for _, d := range req.Deletes {
		old, ok := z.records[d.ID]
		if !ok {
			fail(errorf(http.StatusBadRequest, 81044, "Record %s does not exist.", d.ID))
			return
		}
		t.del(d.ID)
		res.Deletes = append(res.Deletes, old)
	}
	for _, p := range req.Patches {
		old, ok := z.records[p.ID]
		if !ok {
			fail(errorf(http.StatusBadRequest, 81044, "Record %s does not exist.", p.ID))
			return
		}
		rec, apiErr := e.replace(t, p.apply(old))
		if apiErr != nil {
			fail(apiErr)
			return
		}
		res.Patches = append(res.Patches, rec)
	}
	for _, p := range req.Puts {
		old, ok := z.records[p.ID]
		if !ok {
			fail(errorf(http.StatusBadRequest, 81044, "Record %s does not exist.", p.ID))
			return
		}
		rec, apiErr := e.replace(t, p.apply(Record{ID: old.ID, CreatedOn: old.CreatedOn, TTL: 1}))
		if apiErr != nil {
			fail(apiErr)
			return
		}
		res.Puts = append(res.Puts, rec)
	}
	for _, p := range req.Posts {
		rec, apiErr := e.post(t, p.apply(Record{TTL: 1}))
		if apiErr != nil {
			fail(apiErr)
			return
		}
		res.Posts = append(res.Posts, rec)
	}
	writeEnvelope(w, http.StatusOK, res, nil)
}

// post validates and adds a new record.
func (e *Emulator) post(t *txn, r Record) (Record, *apiError) {
	r.ID = e.newID()
	r.CreatedOn = time.Now().UTC()
	return e.replace(t, r)
}

// replace validates r against the zone's other records and stores it under r.ID.
func (e *Emulator) replace(t *txn, r Record) (Record, *apiError) {
	z := t.z
	r.Name = strings.TrimSuffix(strings.ToLower(r.Name), ".")
	r.ZoneID, r.ZoneName = z.ID, z.Name
	r.ModifiedOn = time.Now().UTC()
	if r.CreatedOn.IsZero() {
		r.CreatedOn = r.ModifiedOn
	}
	if apiErr := validate(z, r); apiErr != nil {
		return Record{}, apiErr
	}
	r.Proxiable = r.Type == "A" || r.Type == "AAAA" || r.Type == "CNAME"
	if r.Proxied {
		r.TTL = 1 // proxied records always have automatic TTL
	}
	if r.Type == "CNAME" {
		r.Content = strings.TrimSuffix(r.Content, ".")
	}
	for id := range z.byName[r.Name] {
		o := z.records[id]
		if id == r.ID {
			continue
		}
		if o.Type == r.Type && o.Content == r.Content {
			return Record{}, errorf(http.StatusBadRequest, 81058, "An identical record already exists.")
		}
		if r.Type == "CNAME" || o.Type == "CNAME" {
			return Record{}, errorf(http.StatusBadRequest, 81053, "An A, AAAA, or CNAME record with that host already exists.")
		}
	}
	t.put(r)
	return r, nil
}

func validate(z *zone, r Record) *apiError {
	if r.Name != z.Name && !strings.HasSuffix(r.Name, "."+z.Name) {
		return errorf(http.StatusBadRequest, 9007, "DNS record name %q is not in zone %s", r.Name, z.Name)
	}
	if r.TTL != 1 && (r.TTL < 60 || r.TTL > 86400) {
		return errorf(http.StatusBadRequest, 9021, "Invalid TTL. Must be between 60 and 86400 seconds, or 1 for Automatic.")
	}
	if len(r.Comment) > MaxComment || strings.ContainsAny(r.Comment, "\r\n") {
		return errorf(http.StatusBadRequest, 9101, "DNS record comment must be at most %d characters without newlines", MaxComment)
	}
	switch r.Type {
	case "A", "AAAA":
		addr, err := netip.ParseAddr(r.Content)
		if err != nil || addr.Is4() != (r.Type == "A") {
			return errorf(http.StatusBadRequest, 9005, "Content for %s record is invalid. Must be a valid IPv%s address.", r.Type, map[bool]string{true: "4", false: "6"}[r.Type == "A"])
		}
	case "CNAME":
		if r.Content == "" || strings.ContainsAny(r.Content, " _/") {
			return errorf(http.StatusBadRequest, 9039, "Content for CNAME record is invalid.")
		}
	case "TXT":
		if len(r.Content) == 0 || len(r.Content) > 2048 {
			return errorf(http.StatusBadRequest, 9100, "Content for TXT record is invalid.")
		}
	case "MX", "NS":
	default:
		return errorf(http.StatusBadRequest, 9020, "Invalid DNS record type")
	}
	if r.Proxied && r.Type != "A" && r.Type != "AAAA" && r.Type != "CNAME" {
		return errorf(http.StatusBadRequest, 9004, "This record type cannot be proxied.")
	}
	return nil
}

func sortedRecords(m map[string]Record) []Record {
	out := make([]Record, 0, len(m))
	for _, r := range m {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Record) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return strings.Compare(a.Content, b.Content)
	})
	return out
}

// txn changes a zone in place and can undo every change, which makes a batch atomic
// without copying the zone.
type txn struct {
	z    *zone
	undo []func()
}

func (t *txn) put(r Record) {
	z := t.z
	old, had := z.records[r.ID]
	z.records[r.ID] = r
	if had {
		delete(z.byName[old.Name], r.ID)
	}
	addToIndex(z, r)
	t.undo = append(t.undo, func() {
		delete(z.byName[r.Name], r.ID)
		if had {
			z.records[r.ID] = old
			addToIndex(z, old)
		} else {
			delete(z.records, r.ID)
		}
	})
}

func (t *txn) del(id string) {
	z := t.z
	old := z.records[id]
	delete(z.records, id)
	delete(z.byName[old.Name], id)
	t.undo = append(t.undo, func() {
		z.records[id] = old
		addToIndex(z, old)
	})
}

func (t *txn) rollback() {
	for i := len(t.undo) - 1; i >= 0; i-- {
		t.undo[i]()
	}
	t.undo = nil
}

func addToIndex(z *zone, r Record) {
	ids, ok := z.byName[r.Name]
	if !ok {
		ids = map[string]bool{}
		z.byName[r.Name] = ids
	}
	ids[r.ID] = true
}
