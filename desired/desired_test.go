package desired

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/providers"
)

func edgeProvider(name string, health metav1.ConditionStatus) *v1.EdgeProvider {
	ep := &v1.EdgeProvider{}
	ep.Name = name
	if health != "" {
		ep.Status.Conditions = []metav1.Condition{{Type: v1.ConditionHealthy, Status: health}}
	}
	return ep
}

func TestActiveEdge(t *testing.T) {
	const (
		up      = metav1.ConditionTrue
		down    = metav1.ConditionFalse
		unknown = ""
	)
	cases := []struct {
		name       string
		edges      []string
		exist      map[string]metav1.ConditionStatus
		current    string
		pinned     string
		want       string
		wantReason string
	}{
		{"first healthy", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": up, "aws": up}, "", "", "cf", v1.ReasonPreferred},
		{"unknown counts as healthy", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": unknown, "aws": up}, "", "", "cf", v1.ReasonPreferred},
		{"first unhealthy", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": down, "aws": up}, "cf", "", "aws", v1.ReasonFailedOver},
		{"first missing", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"aws": up}, "", "", "aws", v1.ReasonFailedOver},
		{"order of preference", []string{"a", "b", "c"}, map[string]metav1.ConditionStatus{"a": down, "b": down, "c": up}, "a", "", "c", v1.ReasonFailedOver},
		{"all unhealthy keeps current", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": down, "aws": down}, "aws", "", "aws", v1.ReasonFailStatic},
		{"all unhealthy, none current", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": down, "aws": down}, "", "", "cf", v1.ReasonFailStatic},
		{"all unhealthy, current gone", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": down, "aws": down}, "fastly", "", "cf", v1.ReasonFailStatic},
		{"none exist", []string{"cf", "aws"}, nil, "", "", "", v1.ReasonNoEdge},
		{"manual pin ignores health", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": up, "aws": down}, "cf", "aws", "aws", v1.ReasonPinned},
		{"manual pin to a missing edge keeps the current one", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": up}, "cf", "aws", "cf", v1.ReasonPinnedEdgeMissing},
		{"manual pin to a missing edge, nothing current", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": up}, "", "aws", "", v1.ReasonNoEdge},
		// Pinned to aws, which is deleted: its records must not stay pointing at it.
		{"manual pin to a missing edge, the current one deleted", []string{"cf", "aws"}, map[string]metav1.ConditionStatus{"cf": up}, "aws", "aws", "cf", v1.ReasonPinnedEdgeMissing},
		{"manual pin to a missing edge, no edge left", []string{"cf", "aws"}, nil, "aws", "aws", "", v1.ReasonNoEdge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			route := &v1.TenantRoute{Spec: v1.TenantRouteSpec{Edges: c.edges}, Status: v1.TenantRouteStatus{ActiveEdge: c.current}}
			if c.pinned != "" {
				route.Spec.Failover = &v1.FailoverPolicy{Mode: v1.FailoverManual, PinnedEdge: c.pinned}
			}
			edges := map[string]*v1.EdgeProvider{}
			for name, health := range c.exist {
				edges[name] = edgeProvider(name, health)
			}
			got, reason := ActiveEdge(route, edges, EdgeHealth)
			if got != c.want || reason != c.wantReason {
				t.Errorf("got %q (%s), want %q (%s)", got, reason, c.want, c.wantReason)
			}
		})
	}
}

func TestDesired(t *testing.T) {
	cf := &v1.EdgeProvider{Spec: v1.EdgeProviderSpec{
		Zones:      []v1.Zone{{Name: "example.com"}, {Name: "auth.example.com"}},
		Cloudflare: &v1.CloudflareProvider{},
		Edge: v1.EdgeTarget{Target: "{{ .Hostname }}.cdn.cloudflare.net",
			CloudflareProxy: &v1.CloudflareProxy{Origin: "origin.example.net"}},
	}}
	cf.Name = "cf"
	aws := &v1.EdgeProvider{Spec: v1.EdgeProviderSpec{
		Zones:   []v1.Zone{{Name: "auth.example.com"}},
		Route53: &v1.Route53Provider{},
		Edge:    v1.EdgeTarget{Addresses: []string{"2001:db8::1", "192.0.2.2", "192.0.2.1"}},
	}}
	aws.Name = "aws"
	edges := map[string]*v1.EdgeProvider{"cf": cf, "aws": aws}
	hostnames := []string{"acme.auth.example.com", "login.acme.com"}
	route := &v1.TenantRoute{Spec: v1.TenantRouteSpec{Edges: []string{"cf", "aws"}, TTL: 120, Hostnames: hostnames}}

	rec := func(typ string, proxied bool, values ...string) providers.Record {
		return providers.Record{Name: "acme.auth.example.com", Type: typ, TTL: 120, Proxied: proxied, Values: values}
	}
	cases := []struct {
		name   string
		active string
		want   map[string][]providers.Record // "edge zone" -> records
		cname  string
	}{
		{"cloudflare active: proxied in its own zone, plain CNAME elsewhere", "cf", map[string][]providers.Record{
			"cf auth.example.com":  {rec("CNAME", true, "origin.example.net")},
			"cf example.com":       nil,
			"aws auth.example.com": {rec("CNAME", false, "acme.auth.example.com.cdn.cloudflare.net")},
		}, "acme.auth.example.com"},
		{"aws active: A and AAAA everywhere", "aws", map[string][]providers.Record{
			"cf auth.example.com":  {rec("A", false, "192.0.2.1", "192.0.2.2"), rec("AAAA", false, "2001:db8::1")},
			"cf example.com":       nil,
			"aws auth.example.com": {rec("A", false, "192.0.2.1", "192.0.2.2"), rec("AAAA", false, "2001:db8::1")},
		}, "acme.auth.example.com"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			zones, custom := Records(route, hostnames, edges, c.active), CustomDomains(route, edges, c.active)
			got := map[string][]providers.Record{}
			for _, z := range zones {
				got[z.Edge+" "+z.Zone] = z.Records
			}
			if len(got) != len(c.want) {
				t.Fatalf("zones %v, want %v", got, c.want)
			}
			for key, want := range c.want {
				if !slices.EqualFunc(got[key], want, providers.Record.Equal) {
					t.Errorf("%s: %v, want %v", key, got[key], want)
				}
			}
			if len(custom) != 1 || custom[0].Hostname != "login.acme.com" || custom[0].CNAMETarget != c.cname {
				t.Errorf("custom domains %+v", custom)
			}
		})
	}
}

func TestOwnerKey(t *testing.T) {
	if got := OwnerKey("default", "tenants", "acme"); got != "default/tenants/acme" {
		t.Errorf("short key %q", got)
	}
	long := OwnerKey("default", "a-very-long-namespace-name-of-a-tenant-team", "an-equally-long-tenantroute-name-for-a-customer")
	if len(long) > maxOwnerKey || long[:len("default/sha256:")] != "default/sha256:" {
		t.Errorf("long key %q (%d characters)", long, len(long))
	}
}
