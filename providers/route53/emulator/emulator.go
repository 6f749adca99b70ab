// Package emulator is an in-process HTTP emulator of the Route53 REST-XML API
// endpoints the operator uses (hosted zones, record sets, changes), with SigV4
// authentication, Route53's atomic change batches and their limits, its DNS rules,
// its rate limit, and fault injection. The real aws-sdk-go-v2 client talks to it.
package emulator

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// Real limits of Route53.
const (
	// RateLimit requests per RateWindow per account (access key).
	RateLimit  = 5
	RateWindow = time.Second
	// MaxRecords resource records per change batch, an UPSERT counting twice.
	MaxRecords = 1000
	// MaxChars characters of values per change batch, an UPSERT counting twice.
	MaxChars = 32000
	// MaxItems record sets per list page.
	MaxItems = 300

	xmlns = "https://route53.amazonaws.com/doc/2013-04-01/"
)

// RecordSet is a resource record set as Route53 stores it.
type RecordSet struct {
	Name   string // with the trailing dot
	Type   string
	TTL    int64
	Values []string
}

type key struct{ name, typ string }

type hostedZone struct {
	id   string
	name string // with the trailing dot
	sets map[key]RecordSet
	// order caches sets in list order; nil after a change.
	order []RecordSet
}

type change struct {
	submitted time.Time
}

// Emulator is an http.Handler serving the Route53 API at /2013-04-01/ and admin
// endpoints under /__admin/.
type Emulator struct {
	emulatorkit.Kit

	mu      sync.Mutex
	secrets map[string]string // access key id -> secret access key
	zones   map[string]*hostedZone
	changes map[string]change
	nextID  int
	// InsyncAfter is how long a change stays PENDING.
	InsyncAfter time.Duration
}

// New returns an emulator that accepts the given access key id and secret, with the
// real rate limit on.
func New(accessKeyID, secretAccessKey string) *Emulator {
	e := &Emulator{
		secrets: map[string]string{accessKeyID: secretAccessKey},
		zones:   map[string]*hostedZone{}, changes: map[string]change{},
		InsyncAfter: 2 * time.Second,
	}
	e.SetRateLimit(RateLimit, RateWindow)
	return e
}

// AddZone creates a hosted zone with its SOA and NS records and returns its id
// (without the /hostedzone/ prefix).
func (e *Emulator) AddZone(name string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	fqdn := fqdn(name)
	for _, z := range e.zones {
		if z.name == fqdn {
			return z.id
		}
	}
	e.nextID++
	id := fmt.Sprintf("Z%019d", e.nextID)
	e.zones[id] = &hostedZone{id: id, name: fqdn, sets: map[key]RecordSet{
		{fqdn, "SOA"}: {Name: fqdn, Type: "SOA", TTL: 900, Values: []string{
			"ns-1.awsdns-emulator.org. awsdns-hostmaster.amazon.com. 1 7200 900 1209600 86400"}},
		{fqdn, "NS"}: {Name: fqdn, Type: "NS", TTL: 172800, Values: []string{
			"ns-1.awsdns-emulator.org.", "ns-2.awsdns-emulator.net."}},
	}}
	return id
}

// AddRecordSet creates a record set directly, as someone else would in the console.
func (e *Emulator) AddRecordSet(zoneID string, rs RecordSet) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	z, ok := e.zones[zoneID]
	if !ok {
		return fmt.Errorf("no hosted zone %s", zoneID)
	}
	rs.Name = fqdn(rs.Name)
	if msgs := z.apply([]xmlChange{{Action: "CREATE", Set: toXML(rs)}}); len(msgs) > 0 {
		return fmt.Errorf("%s", strings.Join(msgs, "; "))
	}
	return nil
}

// RecordSets returns the zone's record sets in Route53's order.
func (e *Emulator) RecordSets(zoneID string) []RecordSet {
	e.mu.Lock()
	defer e.mu.Unlock()
	z, ok := e.zones[zoneID]
	if !ok {
		return nil
	}
	return z.sorted()
}

func fqdn(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, ".")) + "."
}

// reversed is the sort key Route53 lists by: labels reversed (com.example.www).
func reversed(name string) string {
	labels := strings.Split(strings.TrimSuffix(name, "."), ".")
	slices.Reverse(labels)
	return strings.Join(labels, ".")
}

func compareSets(a, b key) int {
	return cmp.Or(strings.Compare(reversed(a.name), reversed(b.name)), strings.Compare(a.typ, b.typ))
}

// sorted returns the sets in list order; callers must not modify the result.
func (z *hostedZone) sorted() []RecordSet {
	if z.order != nil {
		return z.order
	}
	type entry struct {
		rev string
		set RecordSet
	}
	entries := make([]entry, 0, len(z.sets))
	for _, rs := range z.sets {
		entries = append(entries, entry{reversed(rs.Name), rs})
	}
	slices.SortFunc(entries, func(a, b entry) int {
		return cmp.Or(strings.Compare(a.rev, b.rev), strings.Compare(a.set.Type, b.set.Type))
	})
	z.order = make([]RecordSet, len(entries))
	for i, e := range entries {
		z.order[i] = e.set
	}
	return z.order
}

// --- HTTP ---

// ServeHTTP implements http.Handler.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if strings.HasPrefix(path, "/__admin/") {
		e.serveAdmin(w, r, path)
		return
	}
	rest, ok := strings.CutPrefix(path, "/2013-04-01/")
	if !ok {
		writeError(w, http.StatusNotFound, "UnknownOperationException", "unknown path "+path)
		return
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	e.Count(r.Method + " " + routeName(parts))

	accessKey, body, authErr := e.authenticate(r)
	if authErr != nil {
		writeError(w, http.StatusForbidden, authErr.code, authErr.message)
		return
	}
	if wait := e.Admit(accessKey, time.Now()); wait > 0 {
		writeError(w, http.StatusBadRequest, "Throttling", "Rate exceeded")
		return
	}
	verdict, _ := e.Inject(r)
	switch verdict {
	case emulatorkit.Unavailable:
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "Service is unavailable")
		return
	case emulatorkit.InternalError:
		writeError(w, http.StatusInternalServerError, "InternalFailure", "An internal error occurred")
		return
	case emulatorkit.Forbidden:
		writeError(w, http.StatusForbidden, "AccessDenied", "User is not authorized to perform this action")
		return
	case emulatorkit.Throttled:
		writeError(w, http.StatusBadRequest, "Throttling", "Rate exceeded")
		return
	case emulatorkit.AnswerLost:
		emulatorkit.Unanswered(func(w http.ResponseWriter) { e.serveAPI(w, r, parts, body) })
	case emulatorkit.AnswerCut:
		emulatorkit.CutShort(w, func(w http.ResponseWriter) { e.serveAPI(w, r, parts, body) })
	}
	e.serveAPI(w, r, parts, body)
}

func (e *Emulator) serveAPI(w http.ResponseWriter, r *http.Request, parts []string, body []byte) {
	path := r.URL.Path
	switch {
	case len(parts) == 1 && parts[0] == "hostedzone" && r.Method == http.MethodGet:
		e.listZones(w, r, "")
	case len(parts) == 1 && parts[0] == "hostedzonesbyname" && r.Method == http.MethodGet:
		e.listZones(w, r, r.URL.Query().Get("dnsname"))
	case len(parts) == 2 && parts[0] == "hostedzone" && r.Method == http.MethodGet:
		e.getZone(w, parts[1])
	case len(parts) == 3 && parts[0] == "hostedzone" && parts[2] == "rrset" && r.Method == http.MethodGet:
		e.listSets(w, r, parts[1])
	case len(parts) == 3 && parts[0] == "hostedzone" && parts[2] == "rrset" && r.Method == http.MethodPost:
		e.changeSets(w, body, parts[1])
	case len(parts) == 2 && parts[0] == "change" && r.Method == http.MethodGet:
		e.getChange(w, parts[1])
	default:
		writeError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.Method+" "+path)
	}
}

func routeName(parts []string) string {
	out := slices.Clone(parts)
	if len(out) >= 2 && (out[0] == "hostedzone" || out[0] == "change") {
		out[1] = "{Id}"
	}
	return "/2013-04-01/" + strings.Join(out, "/")
}

func (e *Emulator) serveAdmin(w http.ResponseWriter, r *http.Request, path string) {
	if e.ServeAdmin(w, r, path) {
		return
	}
	switch {
	case path == "/__admin/zones" && r.Method == http.MethodPost:
		name := r.URL.Query().Get("name")
		if name == "" {
			http.Error(w, "want ?name=example.com", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"id\": %q, \"name\": %q}\n", e.AddZone(name), name)
	case path == "/__admin/records" && r.Method == http.MethodGet:
		e.mu.Lock()
		var lines []string
		for _, z := range e.zones {
			for _, rs := range z.sorted() {
				lines = append(lines, fmt.Sprintf("%s\t%s\t%d\t%s", rs.Name, rs.Type, rs.TTL, strings.Join(rs.Values, " ")))
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

type xmlZone struct {
	ID              string `xml:"Id"`
	Name            string `xml:"Name"`
	CallerReference string `xml:"CallerReference"`
	Config          struct {
		PrivateZone bool `xml:"PrivateZone"`
	} `xml:"Config"`
	ResourceRecordSetCount int `xml:"ResourceRecordSetCount"`
}

func (z *hostedZone) toXML() xmlZone {
	return xmlZone{ID: "/hostedzone/" + z.id, Name: z.name, CallerReference: z.id, ResourceRecordSetCount: len(z.sets)}
}

// listZones serves ListHostedZones and, with byName, ListHostedZonesByName (zones
// in name order starting at byName).
func (e *Emulator) listZones(w http.ResponseWriter, r *http.Request, byName string) {
	e.mu.Lock()
	var zs []xmlZone
	for _, z := range e.zones {
		if byName == "" || reversed(z.name) >= reversed(fqdn(byName)) {
			zs = append(zs, z.toXML())
		}
	}
	e.mu.Unlock()
	slices.SortFunc(zs, func(a, b xmlZone) int { return strings.Compare(reversed(a.Name), reversed(b.Name)) })
	maxItems := 100
	if n, err := strconv.Atoi(r.URL.Query().Get("maxitems")); err == nil && n > 0 && n < maxItems {
		maxItems = n
	}
	truncated := len(zs) > maxItems
	zs = zs[:min(len(zs), maxItems)]
	if byName != "" {
		writeXML(w, http.StatusOK, struct {
			XMLName     xml.Name  `xml:"https://route53.amazonaws.com/doc/2013-04-01/ ListHostedZonesByNameResponse"`
			HostedZones []xmlZone `xml:"HostedZones>HostedZone"`
			DNSName     string    `xml:"DNSName"`
			IsTruncated bool      `xml:"IsTruncated"`
			MaxItems    int       `xml:"MaxItems"`
		}{HostedZones: zs, DNSName: byName, IsTruncated: truncated, MaxItems: maxItems})
		return
	}
	writeXML(w, http.StatusOK, struct {
		XMLName     xml.Name  `xml:"https://route53.amazonaws.com/doc/2013-04-01/ ListHostedZonesResponse"`
		HostedZones []xmlZone `xml:"HostedZones>HostedZone"`
		Marker      string    `xml:"Marker"`
		IsTruncated bool      `xml:"IsTruncated"`
		MaxItems    int       `xml:"MaxItems"`
	}{HostedZones: zs, IsTruncated: truncated, MaxItems: maxItems})
}

func (e *Emulator) getZone(w http.ResponseWriter, id string) {
	e.mu.Lock()
	z, ok := e.zones[id]
	e.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NoSuchHostedZone", "No hosted zone found with ID: "+id)
		return
	}
	writeXML(w, http.StatusOK, struct {
		XMLName    xml.Name `xml:"https://route53.amazonaws.com/doc/2013-04-01/ GetHostedZoneResponse"`
		HostedZone xmlZone  `xml:"HostedZone"`
	}{HostedZone: z.toXML()})
}

func (e *Emulator) listSets(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	maxItems := MaxItems
	if v := q.Get("maxitems"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, "InvalidInput", "maxitems must be a positive integer")
			return
		}
		maxItems = min(n, MaxItems)
	}
	e.mu.Lock()
	z, ok := e.zones[id]
	var sets []RecordSet
	if ok {
		sets = z.sorted()
	}
	e.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NoSuchHostedZone", "No hosted zone found with ID: "+id)
		return
	}
	if start := q.Get("name"); start != "" {
		from := key{fqdn(start), q.Get("type")}
		i, _ := slices.BinarySearchFunc(sets, from, func(rs RecordSet, k key) int {
			return compareSets(key{rs.Name, rs.Type}, k)
		})
		sets = sets[i:]
	}
	resp := struct {
		XMLName            xml.Name `xml:"https://route53.amazonaws.com/doc/2013-04-01/ ListResourceRecordSetsResponse"`
		ResourceRecordSets []xmlSet `xml:"ResourceRecordSets>ResourceRecordSet"`
		IsTruncated        bool     `xml:"IsTruncated"`
		NextRecordName     string   `xml:"NextRecordName,omitempty"`
		NextRecordType     string   `xml:"NextRecordType,omitempty"`
		MaxItems           int      `xml:"MaxItems"`
	}{MaxItems: maxItems}
	if len(sets) > maxItems {
		resp.IsTruncated = true
		resp.NextRecordName, resp.NextRecordType = sets[maxItems].Name, sets[maxItems].Type
		sets = sets[:maxItems]
	}
	resp.ResourceRecordSets = []xmlSet{}
	for _, rs := range sets {
		resp.ResourceRecordSets = append(resp.ResourceRecordSets, toXML(rs))
	}
	writeXML(w, http.StatusOK, resp)
}
