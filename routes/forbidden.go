package routes

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/providers"
)

// Forbidden returns the hostnames of tr that its namespace may not claim, with why: a
// hostname inside a zone of one of the EdgeProviders tr lists, when that zone's
// namespaceSelector does not select the namespace (whose labels are nsLabels). Every
// such zone must admit the namespace, not only the most specific one, so that an
// admin who restricts a zone restricts all of it.
//
// The ValidatingAdmissionPolicy in config/policy applies this rule at admission; its
// message is "spec.hostnames: <hostname>: " followed by the same text.
func Forbidden(tr *v1.TenantRoute, edges map[string]*v1.EdgeProvider, nsLabels map[string]string) map[string]string {
	var out map[string]string
	for _, name := range tr.Spec.Edges {
		ep := edges[name]
		if ep == nil {
			continue
		}
		for _, z := range ep.Spec.Zones {
			if z.NamespaceSelector == nil {
				continue
			}
			why := ""
			sel, err := metav1.LabelSelectorAsSelector(z.NamespaceSelector)
			switch {
			case err != nil:
				// Admission rejects such selectors; should one get through, nobody may claim.
				why = fmt.Sprintf("zone %s of EdgeProvider %s has an invalid namespaceSelector", z.Name, ep.Name)
			case !sel.Matches(labels.Set(nsLabels)):
				why = ForbiddenMessage(tr.Namespace, z.Name, ep.Name)
			default:
				continue
			}
			for _, h := range tr.Spec.Hostnames {
				if _, done := out[h]; !done && (providers.Zone{Name: z.Name}).Contains(h) {
					if out == nil {
						out = map[string]string{}
					}
					out[h] = why
				}
			}
		}
	}
	return out
}

// ForbiddenMessage says that a namespace may not claim names in a zone.
func ForbiddenMessage(namespace, zone, edge string) string {
	return fmt.Sprintf("namespace %s may not claim names in zone %s of EdgeProvider %s", namespace, zone, edge)
}
