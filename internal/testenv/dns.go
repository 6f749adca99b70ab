package testenv

import (
	"net"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DNSServer is a small authoritative DNS server on a local UDP port, for what a
// tenant's own DNS holds (custom domains' CNAME and challenge TXT records). Records
// are added and removed while it runs.
type DNSServer struct {
	Addr    string
	mu      sync.Mutex
	records map[string][]dns.RR // by lowercase FQDN
	delay   time.Duration
	srv     *dns.Server
}

// SetDelay makes every answer from now on wait d, as a slow authoritative server's
// does through a resolver.
func (d *DNSServer) SetDelay(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay = delay
}

// StartDNS serves on addr ("127.0.0.1:0" picks a port) until Close.
func StartDNS(addr string) (*DNSServer, error) {
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, err
	}
	d := &DNSServer{Addr: pc.LocalAddr().String(), records: map[string][]dns.RR{}}
	d.srv = &dns.Server{PacketConn: pc, Handler: d}
	go func() { _ = d.srv.ActivateAndServe() }()
	return d, nil
}

// Close stops the server.
func (d *DNSServer) Close() { _ = d.srv.Shutdown() }

// Set replaces the records of a name and type: TXT takes values, CNAME one target.
func (d *DNSServer) Set(name string, rrtype uint16, values ...string) {
	fqdn := dns.Fqdn(strings.ToLower(name))
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.records[fqdn][:0:0]
	for _, rr := range d.records[fqdn] {
		if rr.Header().Rrtype != rrtype {
			kept = append(kept, rr)
		}
	}
	hdr := dns.RR_Header{Name: fqdn, Rrtype: rrtype, Class: dns.ClassINET, Ttl: 1}
	for _, v := range values {
		switch rrtype {
		case dns.TypeTXT:
			kept = append(kept, &dns.TXT{Hdr: hdr, Txt: []string{v}})
		case dns.TypeCNAME:
			kept = append(kept, &dns.CNAME{Hdr: hdr, Target: dns.Fqdn(v)})
		}
	}
	d.records[fqdn] = kept
}

// ServeDNS answers from the records, authoritatively.
func (d *DNSServer) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	d.mu.Lock()
	delay := d.delay
	d.mu.Unlock()
	time.Sleep(delay)
	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	if len(req.Question) == 1 {
		q := req.Question[0]
		d.mu.Lock()
		rrs := d.records[strings.ToLower(q.Name)]
		for _, rr := range rrs {
			if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
				m.Answer = append(m.Answer, dns.Copy(rr))
			}
		}
		if len(rrs) == 0 {
			m.Rcode = dns.RcodeNameError
		}
		d.mu.Unlock()
	}
	_ = w.WriteMsg(m)
}
