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
	verdict, retryAfter := e.Inject(r)
	switch verdict {
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
	case emulatorkit.AnswerLost:
		emulatorkit.Unanswered(func(w http.ResponseWriter) { e.serveAPI(w, r, parts, path) })
	case emulatorkit.AnswerCut:
		emulatorkit.CutShort(w, func(w http.ResponseWriter) { e.serveAPI(w, r, parts, path) })
	}
	e.serveAPI(w, r, parts, path)
}

func (e *Emulator) serveAPI(w http.ResponseWriter, r *http.Request, parts []string, path string) {
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
