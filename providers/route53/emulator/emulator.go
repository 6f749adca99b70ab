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
	"net/netip"
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

// --- wire format ---

type xmlRecord struct {
	Value string `xml:"Value"`
}

type xmlSet struct {
	Name            string      `xml:"Name"`
	Type            string      `xml:"Type"`
	TTL             *int64      `xml:"TTL,omitempty"`
	SetIdentifier   string      `xml:"SetIdentifier,omitempty"`
	ResourceRecords []xmlRecord `xml:"ResourceRecords>ResourceRecord"`
	AliasTarget     *struct {
		DNSName string `xml:"DNSName"`
	} `xml:"AliasTarget,omitempty"`
}

type xmlChange struct {
	Action string `xml:"Action"`
	Set    xmlSet `xml:"ResourceRecordSet"`
}

// changeRequest parses regardless of element order: the SDK emits members in
// alphabetical order (ChangeBatch>Changes before Comment).
type changeRequest struct {
	Changes []xmlChange `xml:"ChangeBatch>Changes>Change"`
	Comment string      `xml:"ChangeBatch>Comment"`
}

type changeInfo struct {
	ID          string `xml:"Id"`
	Status      string `xml:"Status"`
	SubmittedAt string `xml:"SubmittedAt"`
}

func toXML(rs RecordSet) xmlSet {
	ttl := rs.TTL
	s := xmlSet{Name: rs.Name, Type: rs.Type, TTL: &ttl}
	for _, v := range rs.Values {
		s.ResourceRecords = append(s.ResourceRecords, xmlRecord{Value: v})
	}
	return s
}

func fromXML(s xmlSet) RecordSet {
	rs := RecordSet{Name: fqdn(s.Name), Type: s.Type}
	if s.TTL != nil {
		rs.TTL = *s.TTL
	}
	for _, r := range s.ResourceRecords {
		rs.Values = append(rs.Values, r.Value)
	}
	return rs
}

func writeXML(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-RequestId", requestID())
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_ = xml.NewEncoder(w).Encode(v)
}

func requestID() string { return fmt.Sprintf("%d", time.Now().UnixNano()) }

type errorResponse struct {
	XMLName xml.Name `xml:"https://route53.amazonaws.com/doc/2013-04-01/ ErrorResponse"`
	Error   struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Error"`
	RequestID string `xml:"RequestId"`
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	var e errorResponse
	e.Error.Type = "Sender"
	if status >= 500 {
		e.Error.Type = "Receiver"
	}
	e.Error.Code, e.Error.Message, e.RequestID = code, message, requestID()
	writeXML(w, status, e)
}

type invalidChangeBatch struct {
	XMLName   xml.Name `xml:"https://route53.amazonaws.com/doc/2013-04-01/ InvalidChangeBatch"`
	Messages  []string `xml:"Messages>Message"`
	RequestID string   `xml:"RequestId"`
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
	switch verdict, _ := e.Inject(r); verdict {
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
	}

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

func (e *Emulator) changeSets(w http.ResponseWriter, body []byte, id string) {
	var req changeRequest
	if err := xml.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "InvalidInput", "could not parse the request: "+err.Error())
		return
	}
	if len(req.Changes) == 0 {
		writeError(w, http.StatusBadRequest, "InvalidInput", "1 validation error detected: Value null at 'changeBatch.changes' failed to satisfy constraint: Member must not be null")
		return
	}
	records, chars := 0, 0
	for _, c := range req.Changes {
		weight := 1
		if c.Action == "UPSERT" {
			weight = 2
		}
		for _, rr := range c.Set.ResourceRecords {
			records += weight
			chars += weight * len(rr.Value)
		}
	}
	if records > MaxRecords || chars > MaxChars {
		writeXML(w, http.StatusBadRequest, invalidChangeBatch{Messages: []string{fmt.Sprintf(
			"Number of records limit of %d exceeded or value length limit of %d exceeded: %d records, %d characters (an UPSERT counts twice)",
			MaxRecords, MaxChars, records, chars)}, RequestID: requestID()})
		return
	}
	e.mu.Lock()
	z, ok := e.zones[id]
	var msgs []string
	if ok {
		msgs = z.apply(req.Changes)
	}
	var info changeInfo
	if ok && len(msgs) == 0 {
		e.nextID++
		info = changeInfo{ID: fmt.Sprintf("/change/C%019d", e.nextID), Status: "PENDING", SubmittedAt: time.Now().UTC().Format(time.RFC3339)}
		e.changes[strings.TrimPrefix(info.ID, "/change/")] = change{submitted: time.Now()}
	}
	e.mu.Unlock()
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, "NoSuchHostedZone", "No hosted zone found with ID: "+id)
	case len(msgs) > 0:
		writeXML(w, http.StatusBadRequest, invalidChangeBatch{Messages: msgs, RequestID: requestID()})
	default:
		writeXML(w, http.StatusOK, struct {
			XMLName    xml.Name   `xml:"https://route53.amazonaws.com/doc/2013-04-01/ ChangeResourceRecordSetsResponse"`
			ChangeInfo changeInfo `xml:"ChangeInfo"`
		}{ChangeInfo: info})
	}
}

func (e *Emulator) getChange(w http.ResponseWriter, id string) {
	e.mu.Lock()
	c, ok := e.changes[id]
	e.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NoSuchChange", "A change with the specified change ID does not exist: "+id)
		return
	}
	status := "PENDING"
	if time.Since(c.submitted) >= e.InsyncAfter {
		status = "INSYNC"
	}
	writeXML(w, http.StatusOK, struct {
		XMLName    xml.Name   `xml:"https://route53.amazonaws.com/doc/2013-04-01/ GetChangeResponse"`
		ChangeInfo changeInfo `xml:"ChangeInfo"`
	}{ChangeInfo: changeInfo{ID: "/change/" + id, Status: status, SubmittedAt: c.submitted.UTC().Format(time.RFC3339)}})
}

// apply applies a change batch atomically: every change is validated against the
// state left by the ones before it, and on any error nothing is applied and every
// error is returned, as Route53 does.
func (z *hostedZone) apply(changes []xmlChange) []string {
	next := make(map[key]RecordSet, len(z.sets))
	for k, v := range z.sets {
		next[k] = v
	}
	var msgs []string
	seen := map[key]bool{}
	for _, c := range changes {
		rs := fromXML(c.Set)
		k := key{rs.Name, rs.Type}
		desc := fmt.Sprintf("[name='%s', type='%s']", rs.Name, rs.Type)
		if seen[k] {
			msgs = append(msgs, fmt.Sprintf("The request contains an invalid set of changes for a resource record set '%s %s'", rs.Type, rs.Name))
			continue
		}
		seen[k] = true
		if msg := z.validate(c, rs); msg != "" {
			msgs = append(msgs, msg)
			continue
		}
		cur, exists := next[k]
		switch c.Action {
		case "CREATE":
			if exists {
				msgs = append(msgs, fmt.Sprintf("Tried to create resource record set %s but it already exists", desc))
				continue
			}
		case "DELETE":
			if !exists {
				msgs = append(msgs, fmt.Sprintf("Tried to delete resource record set %s but it was not found", desc))
				continue
			}
			if cur.TTL != rs.TTL || !sameValues(cur.Values, rs.Values) {
				msgs = append(msgs, fmt.Sprintf("Tried to delete resource record set %s but the values provided do not match the current values", desc))
				continue
			}
			delete(next, k)
			continue
		}
		if msg := cnameConflict(next, rs, z.name); msg != "" {
			msgs = append(msgs, msg)
			continue
		}
		next[k] = rs
	}
	if len(msgs) == 0 {
		z.sets, z.order = next, nil
	}
	return msgs
}

func cnameConflict(sets map[key]RecordSet, rs RecordSet, zone string) string {
	for _, t := range []string{"A", "AAAA", "CNAME", "TXT", "MX", "NS", "SRV", "CAA"} {
		if _, ok := sets[key{rs.Name, t}]; ok && t != rs.Type && (t == "CNAME" || rs.Type == "CNAME") {
			return fmt.Sprintf("RRSet of type %s with DNS name %s is not permitted as it conflicts with other records with the same DNS name in zone %s", rs.Type, rs.Name, zone)
		}
	}
	return ""
}

func sameValues(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func (z *hostedZone) validate(c xmlChange, rs RecordSet) string {
	switch c.Action {
	case "CREATE", "DELETE", "UPSERT":
	default:
		return fmt.Sprintf("Invalid action %q", c.Action)
	}
	if rs.Name != z.name && !strings.HasSuffix(rs.Name, "."+z.name) {
		return fmt.Sprintf("RRSet with DNS name %s is not permitted in zone %s", rs.Name, z.name)
	}
	if c.Set.SetIdentifier != "" || c.Set.AliasTarget != nil {
		return "routing policies and alias records are not supported by this emulator"
	}
	if c.Set.TTL == nil {
		return fmt.Sprintf("Invalid request: Expected exactly one of [AliasTarget, all of [TTL, and ResourceRecords], or TrafficPolicyInstanceId], but found none in Change with [Action=%s, Name=%s, Type=%s, SetIdentifier=null]", c.Action, rs.Name, rs.Type)
	}
	if rs.TTL < 0 || rs.TTL > 2147483647 {
		return "Invalid TTL"
	}
	if len(rs.Values) == 0 {
		return fmt.Sprintf("Invalid request: Expected exactly one of [AliasTarget, all of [TTL, and ResourceRecords], or TrafficPolicyInstanceId], but found none in Change with [Action=%s, Name=%s, Type=%s, SetIdentifier=null]", c.Action, rs.Name, rs.Type)
	}
	for _, v := range rs.Values {
		switch rs.Type {
		case "A", "AAAA":
			addr, err := netip.ParseAddr(v)
			if err != nil || addr.Is4() != (rs.Type == "A") {
				kind := map[bool]string{true: "ARRDATAIllegalIPv4Address (Value is not a valid IPv4 address)", false: "AAAARRDATAIllegalIPv6Address (Value is not a valid IPv6 address)"}[rs.Type == "A"]
				return fmt.Sprintf("Invalid Resource Record: 'FATAL problem: %s encountered with '%s''", kind, v)
			}
		case "CNAME":
			if len(rs.Values) > 1 {
				return "Invalid Resource Record: 'FATAL problem: RRDATANotSingleField (Value contains spaces) CNAME record sets may have only one value'"
			}
		case "TXT":
			if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
				return fmt.Sprintf("Invalid Resource Record: 'FATAL problem: InvalidCharacterString (Value should be enclosed in quotation marks) encountered with '%s''", v)
			}
		case "SOA", "NS", "MX", "SRV", "CAA":
		default:
			return fmt.Sprintf("Invalid request: unsupported record type %s", rs.Type)
		}
	}
	return ""
}
