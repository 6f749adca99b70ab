package desired

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"slices"
	"strings"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/providers"
)

// hostnamePlaceholder in spec.edge.target is replaced by the tenant's hostname.
const hostnamePlaceholder = "{{ .Hostname }}"

// maxOwnerKey keeps "tenantroute:" + key within Cloudflare's 100-character comments.
const maxOwnerKey = 88

// OwnerKey is the ownership marker of a TenantRoute's records: the operator instance
// and the route. A key that would be too long for a Cloudflare comment names the route
// by a hash instead.
func OwnerKey(instance, namespace, name string) string {
	key := instance + "/" + namespace + "/" + name
	if len(key) <= maxOwnerKey {
		return key
	}
	sum := sha256.Sum256([]byte(namespace + "/" + name))
	return instance + "/sha256:" + hex.EncodeToString(sum[:16])
}

// ZoneFor returns the most specific zone of ep that contains hostname.
func ZoneFor(ep *v1.EdgeProvider, hostname string) (v1.Zone, bool) {
	var best v1.Zone
	found := false
	for _, z := range ep.Spec.Zones {
		if (providers.Zone{Name: z.Name}).Contains(hostname) && len(z.Name) > len(best.Name) {
			best, found = z, true
		}
	}
	return best, found
}

// ZoneRecords are the records a route wants in one zone of one EdgeProvider.
type ZoneRecords struct {
	Edge    string
	Zone    string
	Records []providers.Record
}

// Records computes the records of a route: every hostname inside a zone of a listed
// EdgeProvider gets, in that zone, a record pointing at the active edge — proxied to
// the origin in a Cloudflare zone of the active edge when it has cloudflareProxy, a
// plain CNAME (or A/AAAA) to the active edge's target everywhere else. Every zone of
// every listed EdgeProvider appears, with no records when the route has none there, so
// that records left from an earlier spec are removed. hostnames are the hostnames the
// route was granted.
func Records(route *v1.TenantRoute, hostnames []string, edges map[string]*v1.EdgeProvider, active string) []ZoneRecords {
	ttl := int64(route.Spec.TTL)
	if ttl == 0 {
		ttl = 60
	}
	activeEP := edges[active]
	n := 0
	for _, name := range route.Spec.Edges {
		if ep, ok := edges[name]; ok {
			n += len(ep.Spec.Zones)
		}
	}
	// A failover computes this for every route at once: one slice, no map per edge.
	out := make([]ZoneRecords, 0, n)
	for _, name := range route.Spec.Edges {
		ep, ok := edges[name]
		if !ok {
			continue
		}
		first := len(out)
		for _, z := range ep.Spec.Zones {
			out = append(out, ZoneRecords{Edge: name, Zone: z.Name})
		}
		if activeEP == nil {
			continue
		}
		for _, h := range hostnames {
			z, ok := ZoneFor(ep, h)
			if !ok {
				continue
			}
			for i := first; i < len(out); i++ {
				if out[i].Zone == z.Name {
					out[i].Records = append(out[i].Records, pointAt(h, ttl, activeEP, ep.Name == active)...)
					break
				}
			}
		}
	}
	return out
}

// CustomDomains are a route's hostnames outside every zone of its EdgeProviders, each
// with the CNAME target the tenant must point it at: the route's first hostname in a
// managed zone, else the active edge's target.
func CustomDomains(route *v1.TenantRoute, edges map[string]*v1.EdgeProvider, active string) []v1.CustomDomainStatus {
	managed := func(h string) bool {
		for _, name := range route.Spec.Edges {
			if ep, ok := edges[name]; ok {
				if _, ok := ZoneFor(ep, h); ok {
					return true
				}
			}
		}
		return false
	}
	var custom []v1.CustomDomainStatus
	var firstManaged string
	for _, h := range route.Spec.Hostnames {
		if managed(h) {
			if firstManaged == "" {
				firstManaged = h
			}
			continue
		}
		custom = append(custom, v1.CustomDomainStatus{Hostname: h})
	}
	for i := range custom {
		target := firstManaged
		if activeEP := edges[active]; target == "" && activeEP != nil && activeEP.Spec.Edge.Target != "" {
			target = strings.ReplaceAll(activeEP.Spec.Edge.Target, hostnamePlaceholder, custom[i].Hostname)
		}
		custom[i].CNAMETarget = target
	}
	return custom
}

// pointAt is the record set that points hostname at the active edge. inActiveZone says
// the record lives in a zone of the active edge itself (where Cloudflare can proxy).
func pointAt(hostname string, ttl int64, active *v1.EdgeProvider, inActiveZone bool) []providers.Record {
	edge := active.Spec.Edge
	if inActiveZone && active.Spec.Cloudflare != nil && edge.CloudflareProxy != nil {
		return []providers.Record{{Name: hostname, Type: providers.TypeCNAME, TTL: ttl, Proxied: true,
			Values: []string{edge.CloudflareProxy.Origin}}}
	}
	if edge.Target != "" {
		return []providers.Record{{Name: hostname, Type: providers.TypeCNAME, TTL: ttl,
			Values: []string{strings.ReplaceAll(edge.Target, hostnamePlaceholder, hostname)}}}
	}
	var v4, v6 []string
	for _, a := range edge.Addresses {
		if addr, err := netip.ParseAddr(a); err == nil && addr.Is4() {
			v4 = append(v4, a)
		} else {
			v6 = append(v6, a)
		}
	}
	var out []providers.Record
	if len(v4) > 0 {
		out = append(out, providers.Record{Name: hostname, Type: providers.TypeA, TTL: ttl, Values: slices.Sorted(slices.Values(v4))})
	}
	if len(v6) > 0 {
		out = append(out, providers.Record{Name: hostname, Type: providers.TypeAAAA, TTL: ttl, Values: slices.Sorted(slices.Values(v6))})
	}
	return out
}

// Edges are the EdgeProviders a route lists now or has records in (status.providers).
func Edges(tr *v1.TenantRoute) []string {
	out := append([]string{}, tr.Spec.Edges...)
	for _, p := range tr.Status.Providers {
		if !slices.Contains(out, p.Edge) {
			out = append(out, p.Edge)
		}
	}
	return out
}
