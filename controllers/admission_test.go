package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// refuseUpdates has the API server refuse the updates of one of the project's
// resources (e.g. "tenantroutes/status") for which expression, in CEL over object, is
// false: the test's stand-in for an API server that cannot take a write. It returns,
// once the policy is in force (a dry-run status update to refused is refused), the
// func that lifts the refusal (also run at the test's end).
func refuseUpdates(t *testing.T, name, resource, expression, message string, refused client.Object) (lift func()) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{v1.GroupVersion.Group}, APIVersions: []string{"*"},
						Resources: []string{resource}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: expression, Message: message}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, obj := range []client.Object{policy, binding} {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8s.Delete(ctx, obj) })
	}
	eventually(t, 20*time.Second, func() error {
		// At the stored version: refused by the policy, not by a conflict.
		current := refused.DeepCopyObject().(client.Object)
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(refused), current); err != nil {
			return err
		}
		probe := refused.DeepCopyObject().(client.Object)
		probe.SetResourceVersion(current.GetResourceVersion())
		if err := k8s.Status().Update(ctx, probe, client.DryRunAll); err == nil || !strings.Contains(err.Error(), message) {
			return fmt.Errorf("%s is not in force yet (%v)", name, err)
		}
		return nil
	})
	return func() {
		t.Helper()
		for _, obj := range []client.Object{binding, policy} {
			if err := k8s.Delete(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
}
