package charts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The manager's service account may do what the operator and controller-runtime do,
// and no more: the chart's RBAC is installed for real and the API server is asked.
// (Leader election records its events through the core API: without that rule every
// election logged a 403.)
func TestTheManagersServiceAccountMayDoWhatItDoes(t *testing.T) {
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	const release = "rbaccheck"
	_, manifest, err := renderAs(release, nil)
	if err != nil {
		t.Fatal(err)
	}
	sa := ""
	for _, o := range decode(t, manifest) {
		switch o.GetKind() {
		case "ServiceAccount":
			if sa == "" {
				sa = o.GetName()
			}
		case "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		default:
			continue
		}
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, o) })
	}
	user := fmt.Sprintf("system:serviceaccount:%s:%s", namespace, sa)
	may := func(verb, group, resource, ns string) bool {
		t.Helper()
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: ns}}}
		if err := k8s.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		return sar.Status.Allowed
	}
	for _, c := range []struct {
		verb, group, resource, ns string
		allowed                   bool
	}{
		{"create", "", "events", namespace, true},              // leader election
		{"create", "events.k8s.io", "events", "tenants", true}, // TenantRoutes' events
		{"update", "coordination.k8s.io", "leases", namespace, true},
		{"list", "routing.tenantroute.io", "tenantroutes", "", true},
		{"get", "", "secrets", namespace, true}, // provider credentials
		{"get", "", "secrets", "tenants", false},
		{"create", "", "events", "tenants", false},
		{"create", "", "pods", namespace, false},
		{"update", "", "secrets", namespace, false},
	} {
		// The API server's authorizer learns new roles from a watch: an allowed
		// answer may take a moment (a refusal is asked after the allowed ones).
		got := may(c.verb, c.group, c.resource, c.ns)
		for deadline := time.Now().Add(10 * time.Second); c.allowed && !got && time.Now().Before(deadline); got = may(c.verb, c.group, c.resource, c.ns) {
			time.Sleep(100 * time.Millisecond)
		}
		if got != c.allowed {
			t.Errorf("%s %s/%s in %q: allowed %v, want %v", c.verb, c.group, c.resource, c.ns, got, c.allowed)
		}
	}
}
