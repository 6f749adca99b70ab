package v1alpha1_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

var (
	env *envtest.Environment
	cfg *rest.Config
	k8s client.Client
)

func TestMain(m *testing.M) {
	testenv.Main(m, func(e *testenv.Env) { env, cfg, k8s = e.Environment, e.Config, e.Client })
}

func validTenantRoute(name string) *v1.TenantRoute {
	return &v1.TenantRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.TenantRouteSpec{
			TenantID:  "acme",
			Region:    "eu-west",
			Hostnames: []string{"acme.auth.example.com", "login.acme.com"},
			Edges:     []string{"cloudflare", "aws"},
			TTL:       60,
		},
	}
}

func validEdgeProvider(name string) *v1.EdgeProvider {
	return &v1.EdgeProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.EdgeProviderSpec{
			Zones: []v1.Zone{{Name: "auth.example.com"}},
			Cloudflare: &v1.CloudflareProvider{
				APITokenSecretRef: v1.SecretKeyReference{Name: "cloudflare-token", Key: "token"},
			},
			Edge: v1.EdgeTarget{Target: "{{ .Hostname }}.cdn.cloudflare.net"},
			HealthCheck: v1.HealthCheck{
				URL:      "https://probe.example.com/healthz",
				Interval: metav1.Duration{Duration: 5 * time.Second},
				Timeout:  metav1.Duration{Duration: 2 * time.Second},
			},
		},
	}
}

func validRegion(name string) *v1.Region {
	return &v1.Region{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.RegionSpec{Backends: []v1.Backend{{URL: "https://eu-west-a.backend.internal:8443"}}},
	}
}

// TestValidObjectsAccepted guards the table below: each invalid case is one change
// away from an object the API server accepts.
func TestValidObjectsAccepted(t *testing.T) {
	ctx := context.Background()
	objs := []client.Object{validTenantRoute("valid"), validEdgeProvider("valid"), validRegion("valid")}
	route53 := validEdgeProvider("valid-route53")
	route53.Spec.Cloudflare = nil
	route53.Spec.Route53 = &v1.Route53Provider{}
	route53.Spec.Edge = v1.EdgeTarget{Addresses: []string{"192.0.2.10", "2001:db8::10"}}
	manual := validTenantRoute("valid-manual")
	manual.Spec.Failover = &v1.FailoverPolicy{Mode: v1.FailoverManual, PinnedEdge: "aws"}
	objs = append(objs, route53, manual)
	for _, obj := range objs {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Errorf("valid %T %s rejected: %v", obj, obj.GetName(), err)
		}
	}
	// Defaults are applied by the schema.
	var got v1.EdgeProvider
	if err := k8s.Get(ctx, client.ObjectKey{Name: "valid-route53"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Route53.Region != "us-east-1" || got.Spec.HealthCheck.FailureThreshold != 3 || got.Spec.HealthCheck.SuccessThreshold != 2 {
		t.Errorf("defaults not applied: region %q, thresholds %d/%d", got.Spec.Route53.Region,
			got.Spec.HealthCheck.FailureThreshold, got.Spec.HealthCheck.SuccessThreshold)
	}
}

func TestInvalidObjectsRejected(t *testing.T) {
	cases := []struct {
		name string
		obj  func() client.Object
		// field is the path the API server must report; message a phrase users read.
		field   string
		message string
	}{
		{"uppercase hostname", tr(func(s *v1.TenantRouteSpec) { s.Hostnames = []string{"ok.example.com", "Acme.auth.example.com"} }),
			"spec.hostnames", `"Acme.auth.example.com" is not a lowercase RFC 1123`},
		{"wildcard hostname", tr(func(s *v1.TenantRouteSpec) { s.Hostnames = []string{"*.auth.example.com"} }),
			"spec.hostnames", "no wildcards"},
		{"label longer than 63", tr(func(s *v1.TenantRouteSpec) { s.Hostnames = []string{strings.Repeat("a", 64) + ".example.com"} }),
			"spec.hostnames", "labels of 1-63"},
		{"empty label", tr(func(s *v1.TenantRouteSpec) { s.Hostnames = []string{"acme..example.com"} }),
			"spec.hostnames", "is not a lowercase RFC 1123"},
		{"single-label hostname", tr(func(s *v1.TenantRouteSpec) { s.Hostnames = []string{"localhost"} }),
			"spec.hostnames", "at least two labels"},
		{"hostname longer than 253", tr(func(s *v1.TenantRouteSpec) {
			s.Hostnames = []string{strings.Repeat(strings.Repeat("a", 60)+".", 4) + "example.com"}
		}), "spec.hostnames[0]", "230"},
		// 231 characters: a valid DNS name, but "_tenantroute-challenge." before it is not,
		// and Route53 refused its ownership record for good.
		{"hostname whose derived names are too long", tr(func(s *v1.TenantRouteSpec) {
			s.Hostnames = []string{strings.Repeat(strings.Repeat("a", 62)+".", 3) + strings.Repeat("b", 30) + ".example.com"}
		}), "spec.hostnames[0]", "230"},
		{"duplicate hostnames", tr(func(s *v1.TenantRouteSpec) { s.Hostnames = []string{"a.example.com", "a.example.com"} }),
			"spec.hostnames[1]", "Duplicate value"},
		{"no hostnames", tr(func(s *v1.TenantRouteSpec) { s.Hostnames = nil }),
			"spec.hostnames", "Required"},
		{"101 hostnames", tr(func(s *v1.TenantRouteSpec) {
			s.Hostnames = nil
			for i := range 101 {
				s.Hostnames = append(s.Hostnames, fmt.Sprintf("t%d.example.com", i))
			}
		}), "spec.hostnames", "100"},
		{"no edges", tr(func(s *v1.TenantRouteSpec) { s.Edges = []string{} }),
			"spec.edges", "1 item"},
		{"duplicate edges", tr(func(s *v1.TenantRouteSpec) { s.Edges = []string{"aws", "aws"} }),
			"spec.edges[1]", "Duplicate value"},
		{"nine edges", tr(func(s *v1.TenantRouteSpec) { s.Edges = []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} }),
			"spec.edges", "8"},
		{"manual without pinned edge", tr(func(s *v1.TenantRouteSpec) { s.Failover = &v1.FailoverPolicy{Mode: v1.FailoverManual} }),
			"spec.failover.pinnedEdge", "required when spec.failover.mode is Manual"},
		{"pinned edge not listed", tr(func(s *v1.TenantRouteSpec) {
			s.Failover = &v1.FailoverPolicy{Mode: v1.FailoverManual, PinnedEdge: "fastly"}
		}), "spec.failover.pinnedEdge", "must be one of spec.edges"},
		{"pinned edge in automatic mode", tr(func(s *v1.TenantRouteSpec) {
			s.Failover = &v1.FailoverPolicy{Mode: v1.FailoverAutomatic, PinnedEdge: "aws"}
		}), "spec.failover.pinnedEdge", "only allowed when spec.failover.mode is Manual"},
		{"unknown failover mode", tr(func(s *v1.TenantRouteSpec) { s.Failover = &v1.FailoverPolicy{Mode: "Sometimes"} }),
			"spec.failover.mode", "Unsupported value"},
		{"ttl below 30", tr(func(s *v1.TenantRouteSpec) { s.TTL = 10 }), "spec.ttl", "greater than or equal to 30"},
		{"ttl above 86400", tr(func(s *v1.TenantRouteSpec) { s.TTL = 86401 }), "spec.ttl", "less than or equal to 86400"},
		{"bad tenant id", tr(func(s *v1.TenantRouteSpec) { s.TenantID = "Acme_Corp" }), "spec.tenantID", "lowercase letters"},
		{"route name longer than 63", func() client.Object { return validTenantRoute(strings.Repeat("r", 64)) },
			"<nil>", "at most 63 characters"},

		{"both cloudflare and route53", ep(func(s *v1.EdgeProviderSpec) { s.Route53 = &v1.Route53Provider{} }),
			"spec", "exactly one of spec.cloudflare or spec.route53"},
		{"neither cloudflare nor route53", ep(func(s *v1.EdgeProviderSpec) { s.Cloudflare = nil }),
			"spec", "exactly one of spec.cloudflare or spec.route53"},
		{"no zones", ep(func(s *v1.EdgeProviderSpec) { s.Zones = nil }), "spec.zones", "Required"},
		{"duplicate zone names", ep(func(s *v1.EdgeProviderSpec) {
			s.Zones = []v1.Zone{{Name: "example.com"}, {Name: "example.com", ID: "x"}}
		}), "spec.zones", "names must be unique"},
		{"invalid zone name", ep(func(s *v1.EdgeProviderSpec) { s.Zones = []v1.Zone{{Name: "Example.COM"}} }),
			"spec.zones[0].name", "lowercase RFC 1123"},
		{"both target and addresses", ep(func(s *v1.EdgeProviderSpec) { s.Edge.Addresses = []string{"192.0.2.1"} }),
			"spec.edge", "exactly one of spec.edge.target or spec.edge.addresses"},
		{"neither target nor addresses", ep(func(s *v1.EdgeProviderSpec) { s.Edge.Target = "" }),
			"spec.edge", "exactly one of spec.edge.target or spec.edge.addresses"},
		{"invalid address", ep(func(s *v1.EdgeProviderSpec) { s.Edge = v1.EdgeTarget{Addresses: []string{"192.0.2.300"}} }),
			"spec.edge.addresses", "IPv4 or IPv6"},
		{"invalid target", ep(func(s *v1.EdgeProviderSpec) { s.Edge.Target = "edge_aws.example.net" }),
			"spec.edge.target", "lowercase DNS name"},
		{"cloudflareProxy with route53", ep(func(s *v1.EdgeProviderSpec) {
			s.Cloudflare = nil
			s.Route53 = &v1.Route53Provider{}
			s.Edge.CloudflareProxy = &v1.CloudflareProxy{Origin: "origin.example.net"}
		}), "spec.edge.cloudflareProxy", "only allowed with spec.cloudflare"},
		{"interval below 1s", ep(func(s *v1.EdgeProviderSpec) {
			s.HealthCheck.Interval = metav1.Duration{Duration: 500 * time.Millisecond}
			s.HealthCheck.Timeout = metav1.Duration{Duration: 100 * time.Millisecond}
		}), "spec.healthCheck.interval", "at least 1s"},
		{"timeout not below interval", ep(func(s *v1.EdgeProviderSpec) { s.HealthCheck.Timeout = metav1.Duration{Duration: 5 * time.Second} }),
			"spec.healthCheck.timeout", "shorter than spec.healthCheck.interval"},
		{"failure threshold negative", ep(func(s *v1.EdgeProviderSpec) { s.HealthCheck.FailureThreshold = -1 }),
			"spec.healthCheck.failureThreshold", "greater than or equal to 1"},
		{"success threshold 11", ep(func(s *v1.EdgeProviderSpec) { s.HealthCheck.SuccessThreshold = 11 }),
			"spec.healthCheck.successThreshold", "less than or equal to 10"},
		{"health check not http", ep(func(s *v1.EdgeProviderSpec) { s.HealthCheck.URL = "ftp://probe.example.com/" }),
			"spec.healthCheck.url", "http or https"},
		{"cloudflare base URL not a URL", ep(func(s *v1.EdgeProviderSpec) { s.Cloudflare.BaseURL = "not a url" }),
			"spec.cloudflare.baseURL", "http or https URL"},

		{"region without backends", rg(func(s *v1.RegionSpec) { s.Backends = nil }), "spec.backends", "Required"},
		{"backend not http", rg(func(s *v1.RegionSpec) { s.Backends = []v1.Backend{{URL: "tcp://10.0.0.1:80"}} }),
			"spec.backends[0].url", "http or https"},
		{"backend relative", rg(func(s *v1.RegionSpec) { s.Backends = []v1.Backend{{URL: "/backend"}} }),
			"spec.backends[0].url", "http or https"},
		{"backend with query", rg(func(s *v1.RegionSpec) { s.Backends = []v1.Backend{{URL: "https://a.internal/?x=1"}} }),
			"spec.backends[0].url", "query or fragment"},
	}
	ctx := context.Background()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj := c.obj()
			if obj.GetName() == "" {
				obj.SetName(fmt.Sprintf("invalid-%d", i))
			}
			err := k8s.Create(ctx, obj)
			assertInvalid(t, err, c.field, c.message)
		})
	}
}

func TestUnknownFieldsRejected(t *testing.T) {
	for _, kind := range []string{"TenantRoute", "EdgeProvider", "Region"} {
		t.Run(kind, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(testenv.GVK(kind))
			u.SetName("unknown-field")
			if kind == "TenantRoute" {
				u.SetNamespace("default")
			}
			if err := unstructured.SetNestedField(u.Object, "yes", "spec", "colour"); err != nil {
				t.Fatal(err)
			}
			err := k8s.Create(context.Background(), u, client.FieldValidation(metav1.FieldValidationStrict))
			if err == nil || !strings.Contains(err.Error(), `unknown field "spec.colour"`) {
				t.Fatalf("want unknown field spec.colour rejected, got %v", err)
			}
		})
	}
}

func assertInvalid(t *testing.T, err error, field, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want rejection naming %s", field)
	}
	var status *apierrors.StatusError
	if !errors.As(err, &status) || !apierrors.IsInvalid(err) {
		t.Fatalf("want an Invalid status error, got %v", err)
	}
	if !strings.Contains(err.Error(), message) {
		t.Errorf("message %q does not say %q", err.Error(), message)
	}
	if field == "<nil>" { // object-level rule: reported without a field path
		return
	}
	var fields []string
	for _, cause := range status.ErrStatus.Details.Causes {
		fields = append(fields, cause.Field)
		if cause.Field == field {
			return
		}
	}
	t.Errorf("causes name fields %q, want %q (message: %s)", fields, field, err.Error())
}

func tr(mutate func(*v1.TenantRouteSpec)) func() client.Object {
	return func() client.Object {
		o := validTenantRoute("")
		mutate(&o.Spec)
		return o
	}
}

func ep(mutate func(*v1.EdgeProviderSpec)) func() client.Object {
	return func() client.Object {
		o := validEdgeProvider("")
		mutate(&o.Spec)
		return o
	}
}

func rg(mutate func(*v1.RegionSpec)) func() client.Object {
	return func() client.Object {
		o := validRegion("")
		mutate(&o.Spec)
		return o
	}
}
