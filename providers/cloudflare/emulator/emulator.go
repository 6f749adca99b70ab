// Package emulator is an in-process HTTP emulator of the Cloudflare v4 API endpoints
// the operator uses (zones, DNS records, the batch endpoint), with Cloudflare's wire
// format, DNS rules and rate limit, and fault injection. The real cloudflare-go client
// talks to it over HTTP; tests, the demo and the benchmarks use it.
package emulator

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// Real limits of the Cloudflare API.
const (
	// RateLimit requests per RateWindow per token.
	RateLimit  = 1200
	RateWindow = 5 * time.Minute
	// MaxBatch is the most record operations in one batch request (Free plan).
	MaxBatch = 200
	// MaxComment is the longest record comment (Free plan).
	MaxComment = 100
	// MaxPerPage is the largest DNS record page.
	MaxPerPage = 5000
)

// Record is a DNS record as Cloudflare stores it.
type Record struct {
	ID         string    `json:"id"`
	ZoneID     string    `json:"zone_id"`
	ZoneName   string    `json:"zone_name"`
	Name       string    `json:"name"`
	Type       string    `json:"type"`
	Content    string    `json:"content"`
	TTL        int64     `json:"ttl"`
	Proxied    bool      `json:"proxied"`
	Proxiable  bool      `json:"proxiable"`
	Comment    string    `json:"comment,omitempty"`
	CreatedOn  time.Time `json:"created_on"`
	ModifiedOn time.Time `json:"modified_on"`
}

type zone struct {
	ID      string
	Name    string
	records map[string]Record
	byName  map[string]map[string]bool // name -> record ids
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

// Emulator is an http.Handler serving the Cloudflare API under any path prefix
// ending in /client/v4 (or at the root), and admin endpoints under /__admin/.
type Emulator struct {
	emulatorkit.Kit

	mu     sync.Mutex
	tokens map[string]bool
	zones  map[string]*zone
	nextID int
}

// New returns an emulator that accepts the given API tokens, with the real rate limit on.
func New(tokens ...string) *Emulator {
	e := &Emulator{tokens: map[string]bool{}, zones: map[string]*zone{}}
	for _, t := range tokens {
		e.tokens[t] = true
	}
	e.SetRateLimit(RateLimit, RateWindow)
	return e
}

// AddZone creates a zone and returns its id.
func (e *Emulator) AddZone(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, z := range e.zones {
		if z.Name == name {
			return z.ID
		}
	}
	id := e.newID()
	e.zones[id] = &zone{ID: id, Name: name, records: map[string]Record{}, byName: map[string]map[string]bool{}}
	return id
}

// RemoveZone deletes a zone and its records, as when a zone is removed from the
// account: its API answers 404 from then on.
func (e *Emulator) RemoveZone(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.zones, id)
}

// AddRecord creates a record directly, as someone else would through the dashboard.
func (e *Emulator) AddRecord(zoneID string, r Record) (Record, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	z, ok := e.zones[zoneID]
	if !ok {
		return Record{}, fmt.Errorf("no zone %s", zoneID)
	}
	created, apiErr := e.post(&txn{z: z}, r)
	if apiErr != nil {
		return Record{}, apiErr
	}
	return created, nil
}

// Records returns the zone's records sorted by name, type and content.
func (e *Emulator) Records(zoneID string) []Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	z, ok := e.zones[zoneID]
	if !ok {
		return nil
	}
	return sortedRecords(z.records)
}

func (e *Emulator) newID() string {
	e.nextID++
	return fmt.Sprintf("%032x", e.nextID)
}

// apiError is one entry of the envelope's errors, with the HTTP status to answer.
type apiError struct {
	status  int
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (a *apiError) Error() string { return fmt.Sprintf("%d: %s", a.Code, a.Message) }

func errorf(status, code int, format string, args ...any) *apiError {
	return &apiError{status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

type resultInfo struct {
	Page       int `json:"page"`
	PerPage    int `json:"per_page"`
	Count      int `json:"count"`
	TotalCount int `json:"total_count"`
	TotalPages int `json:"total_pages"`
}

type envelope struct {
	Success    bool        `json:"success"`
	Errors     []*apiError `json:"errors"`
	Messages   []any       `json:"messages"`
	Result     any         `json:"result"`
	ResultInfo *resultInfo `json:"result_info,omitempty"`
}

func writeEnvelope(w http.ResponseWriter, status int, result any, info *resultInfo, errs ...*apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(envelope{
		Success: len(errs) == 0, Errors: append([]*apiError{}, errs...), Messages: []any{},
		Result: result, ResultInfo: info,
	})
}

func writeError(w http.ResponseWriter, err *apiError) {
	writeEnvelope(w, err.status, nil, nil, err)
}

// ServeHTTP implements http.Handler.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if i := strings.Index(path, "/client/v4"); i >= 0 {
		path = path[i+len("/client/v4"):]
	}
	if strings.HasPrefix(path, "/__admin/") {
		e.serveAdmin(w, r, path)
		return
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	endpoint := r.Method + " " + routeName(parts)
	e.Count(endpoint)

	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	e.mu.Lock()
	known := ok && e.tokens[token]
	e.mu.Unlock()
	if !known {
		writeError(w, errorf(http.StatusForbidden, 10000, "Authentication error"))
		return
	}
	if wait := e.Admit(token, time.Now()); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		writeError(w, errorf(http.StatusTooManyRequests, 971, "Please wait and consider throttling your request speed"))
		return
	}
	switch verdict, retryAfter := e.Inject(r); verdict {
	case emulatorkit.Unavailable:
		writeError(w, errorf(http.StatusServiceUnavailable, 10013, "Service unavailable"))
		return
	case emulatorkit.InternalError:
		writeError(w, errorf(http.StatusInternalServerError, 10001, "Internal server error"))
		return
	case emulatorkit.Forbidden:
		writeError(w, errorf(http.StatusForbidden, 10000, "Authentication error"))
		return
	case emulatorkit.Throttled:
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
		writeError(w, errorf(http.StatusTooManyRequests, 971, "Please wait and consider throttling your request speed"))
		return
	}

	switch {
	case len(parts) == 1 && parts[0] == "zones" && r.Method == http.MethodGet:
		e.listZones(w, r)
	case len(parts) == 2 && parts[0] == "zones" && r.Method == http.MethodGet:
		e.getZone(w, parts[1])
	case len(parts) == 3 && parts[2] == "dns_records" && r.Method == http.MethodGet:
		e.listRecords(w, r, parts[1])
	case len(parts) == 3 && parts[2] == "dns_records" && r.Method == http.MethodPost:
		e.createRecord(w, r, parts[1])
	case len(parts) == 4 && parts[2] == "dns_records" && parts[3] == "batch" && r.Method == http.MethodPost:
		e.batch(w, r, parts[1])
	case len(parts) == 4 && parts[2] == "dns_records" && r.Method == http.MethodDelete:
		e.deleteRecord(w, parts[1], parts[3])
	default:
		writeError(w, errorf(http.StatusNotFound, 7003, "Could not route to %s, perhaps your object identifier is invalid?", path))
	}
}

// routeName names an endpoint for the counters, with ids replaced by placeholders.
func routeName(parts []string) string {
	out := slices.Clone(parts)
	if len(out) >= 2 && out[0] == "zones" {
		out[1] = "{id}"
	}
	if len(out) >= 4 && out[2] == "dns_records" && out[3] != "batch" {
		out[3] = "{record_id}"
	}
	return "/" + strings.Join(out, "/")
}

func (e *Emulator) serveAdmin(w http.ResponseWriter, r *http.Request, path string) {
	if e.ServeAdmin(w, r, path) {
		return
	}
	switch {
	case path == "/__admin/zones" && r.Method == http.MethodPost:
		var body struct{ Name string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Name == "" {
			http.Error(w, "want {\"name\": \"example.com\"}", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"id": e.AddZone(body.Name), "name": body.Name})
	case path == "/__admin/records" && r.Method == http.MethodGet:
		// One line per record: name, type, TTL, content, proxied, comment.
		var lines []string
		e.mu.Lock()
		for _, z := range e.zones {
			for _, rec := range sortedRecords(z.records) {
				lines = append(lines, fmt.Sprintf("%s\t%s\t%d\t%s\tproxied=%t\t%s", rec.Name, rec.Type, rec.TTL, rec.Content, rec.Proxied, rec.Comment))
			}
		}
		e.mu.Unlock()
		slices.Sort(lines)
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, strings.Join(lines, "\n"))
	default:
		http.NotFound(w, r)
	}
}

func page(r *http.Request, defaultPerPage, maxPerPage int) (int, int, *apiError) {
	q := r.URL.Query()
	p, perPage := 1, defaultPerPage
	if v := q.Get("page"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 1 {
			return 0, 0, errorf(http.StatusBadRequest, 1004, "page must be a positive integer")
		}
		p = int(n)
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.ParseFloat(v, 64)
		if err != nil || n < 1 || int(n) > maxPerPage {
			return 0, 0, errorf(http.StatusBadRequest, 1004, "per_page must be between 1 and %d", maxPerPage)
		}
		perPage = int(n)
	}
	return p, perPage, nil
}

// paginate answers an out-of-range page with an empty result, as Cloudflare does.
func paginate[T any](items []T, p, perPage int) ([]T, *resultInfo) {
	start := min((p-1)*perPage, len(items))
	end := min(start+perPage, len(items))
	info := &resultInfo{Page: p, PerPage: perPage, Count: end - start, TotalCount: len(items),
		TotalPages: (len(items) + perPage - 1) / perPage}
	return append([]T{}, items[start:end]...), info
}

type zoneJSON struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

func (e *Emulator) listZones(w http.ResponseWriter, r *http.Request) {
	p, perPage, apiErr := page(r, 20, 50)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	name := r.URL.Query().Get("name")
	e.mu.Lock()
	var zones []zoneJSON
	for _, z := range e.zones {
		if name == "" || z.Name == name {
			zones = append(zones, zoneJSON{ID: z.ID, Name: z.Name, Status: "active"})
		}
	}
	e.mu.Unlock()
	slices.SortFunc(zones, func(a, b zoneJSON) int { return strings.Compare(a.Name, b.Name) })
	result, info := paginate(zones, p, perPage)
	writeEnvelope(w, http.StatusOK, result, info)
}

func (e *Emulator) getZone(w http.ResponseWriter, id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	z := e.zoneOr404(w, id)
	if z == nil {
		return
	}
	writeEnvelope(w, http.StatusOK, zoneJSON{ID: z.ID, Name: z.Name, Status: "active"}, nil)
}

// zoneOr404 returns the zone, or answers 404 and returns nil; e.mu must be held.
func (e *Emulator) zoneOr404(w http.ResponseWriter, id string) *zone {
	z, ok := e.zones[id]
	if !ok {
		writeError(w, errorf(http.StatusNotFound, 1001, "Invalid zone identifier"))
	}
	return z
}

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
