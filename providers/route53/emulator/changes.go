package emulator

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// ChangeResourceRecordSets and GetChange: a change batch is validated as a whole and
// applied all or nothing, as Route53 does.

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
