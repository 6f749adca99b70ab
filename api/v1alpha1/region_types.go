package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RegionSpec lists where the proxy forwards the tenants of one data-residency region.
type RegionSpec struct {
	// backends are the region's backend base URLs. The proxy sends a tenant of this
	// region only to these backends, round robin over the healthy ones; it never sends
	// it to another region's backends.
	// +required
	// +listType=map
	// +listMapKey=url
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Backends []Backend `json:"backends"`
}

// Backend is one backend of a region.
type Backend struct {
	// url is the backend's base URL: http or https scheme, a host, an optional port,
	// no query or fragment, e.g. https://eu-west-a.backend.internal:8443.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname().size() > 0",message="backends[].url must be an absolute http or https URL with a host"
	// +kubebuilder:validation:XValidation:rule="!self.contains('?') && !self.contains('#')",message="backends[].url must not have a query or fragment"
	URL string `json:"url"`
}

// RegionStatus is the observed state of a Region.
type RegionStatus struct {
	// observedGeneration is the generation of the spec last processed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// backendCount is the number of backends in spec, shown by kubectl get.
	// +optional
	BackendCount int32 `json:"backendCount,omitempty"`

	// failover is the last failover or failback that moved this region's TenantRoutes
	// between edges; its counts are of this region's routes.
	// +optional
	Failover *FailoverStatus `json:"failover,omitempty"`

	// conditions describe the region's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Region is a data-residency region and the backends that serve it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=routing
// +kubebuilder:printcolumn:name="Backends",type=integer,JSONPath=`.status.backendCount`
// +kubebuilder:printcolumn:name="Failover",type=string,JSONPath=`.status.failover.reason`
// +kubebuilder:printcolumn:name="Moved",type=integer,JSONPath=`.status.failover.moved`
// +kubebuilder:printcolumn:name="Statuses Pending",type=integer,JSONPath=`.status.failover.statusesPending`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Region struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata; the name is the region's name, e.g. eu-west.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec lists the region's backends.
	// +required
	Spec RegionSpec `json:"spec"`

	// status is written by the operator.
	// +optional
	Status RegionStatus `json:"status,omitempty"`
}

// RegionList is a list of Regions.
//
// +kubebuilder:object:root=true
type RegionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Region `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Region{}, &RegionList{})
}
