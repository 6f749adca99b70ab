package routes

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

func TestForbidden(t *testing.T) {
	restricted := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "auth"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"sandbox"}}}}
	edges := map[string]*v1.EdgeProvider{
		"cf": {ObjectMeta: metav1.ObjectMeta{Name: "cf"}, Spec: v1.EdgeProviderSpec{Zones: []v1.Zone{
			{Name: "example.com"}, {Name: "auth.example.com", NamespaceSelector: restricted}}}},
		"unlisted": {ObjectMeta: metav1.ObjectMeta{Name: "unlisted"}, Spec: v1.EdgeProviderSpec{Zones: []v1.Zone{
			{Name: "example.com", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "x"}}}}}},
		"bad": {ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: v1.EdgeProviderSpec{Zones: []v1.Zone{
			{Name: "bad.org", NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}}}}},
	}
	route := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}, Spec: v1.TenantRouteSpec{
		Edges:     []string{"cf", "bad"},
		Hostnames: []string{"www.example.com", "auth.example.com", "a.auth.example.com", "xauth.example.com", "x.bad.org"}}}
	for _, tc := range []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{"team": "auth"}, nil},
		{map[string]string{"team": "auth", "tier": "prod"}, nil},
		{map[string]string{"team": "auth", "tier": "sandbox"}, []string{"auth.example.com", "a.auth.example.com"}},
		{map[string]string{"team": "web"}, []string{"auth.example.com", "a.auth.example.com"}},
		{nil, []string{"auth.example.com", "a.auth.example.com"}},
	} {
		got := Forbidden(route, edges, tc.labels)
		if got["x.bad.org"] == "" {
			t.Errorf("labels %v: an invalid selector admitted the namespace", tc.labels)
		}
		delete(got, "x.bad.org")
		if len(got) != len(tc.want) {
			t.Errorf("labels %v: forbidden %v, want %v", tc.labels, got, tc.want)
		}
		for _, h := range tc.want {
			if got[h] != ForbiddenMessage("ns", "auth.example.com", "cf") {
				t.Errorf("labels %v: %s: %q", tc.labels, h, got[h])
			}
		}
	}
}
