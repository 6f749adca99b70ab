package emulator

import (
	"encoding/xml"
	"fmt"
	"net/http"
	"time"
)

// The Route53 REST-XML wire format: request and answer bodies, errors.

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
