package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FailoverMode says how a TenantRoute's active edge is chosen.
// +kubebuilder:validation:Enum=Automatic;Manual
type FailoverMode string

const (
	// FailoverAutomatic makes the first healthy edge in spec.edges the active edge.
	FailoverAutomatic FailoverMode = "Automatic"
	// FailoverManual makes spec.failover.pinnedEdge the active edge, whatever its health.
	FailoverManual FailoverMode = "Manual"
)

// DeletionPolicyAnnotation on a TenantRoute or an EdgeProvider set to
// DeletionPolicyOrphan leaves its records in the providers when it is deleted.
const (
	DeletionPolicyAnnotation = "routing.tenantroute.io/deletion-policy"
	DeletionPolicyOrphan     = "Orphan"
)

// Finalizer holds a TenantRoute or an EdgeProvider until its records are deleted from
// every provider. The operator adds it; config/policy/route_finalizer.yaml gives it to
// new TenantRoutes at admission, which saves the operator a write per route.
const Finalizer = "routing.tenantroute.io/records"

// TenantRouteSpec declares how one tenant is reached.
//
// +kubebuilder:validation:XValidation:rule="!has(self.failover) || self.failover.mode != 'Manual' || (has(self.failover.pinnedEdge) && self.failover.pinnedEdge.size() > 0)",fieldPath=".failover.pinnedEdge",reason=FieldValueRequired,message="spec.failover.pinnedEdge is required when spec.failover.mode is Manual"
// +kubebuilder:validation:XValidation:rule="!has(self.failover) || !has(self.failover.pinnedEdge) || self.failover.pinnedEdge.size() == 0 || self.failover.pinnedEdge in self.edges",fieldPath=".failover.pinnedEdge",message="spec.failover.pinnedEdge must be one of spec.edges"
// +kubebuilder:validation:XValidation:rule="!has(self.failover) || self.failover.mode == 'Manual' || !has(self.failover.pinnedEdge) || self.failover.pinnedEdge.size() == 0",fieldPath=".failover.pinnedEdge",message="spec.failover.pinnedEdge is only allowed when spec.failover.mode is Manual"
type TenantRouteSpec struct {
	// tenantID identifies the tenant to the region's backends (sent as the
	// X-Tenant-ID header by the proxy). It belongs to one TenantRoute in the cluster,
	// and cannot be changed.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="spec.tenantID must be lowercase letters, digits and hyphens, starting and ending with a letter or digit"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.tenantID cannot be changed: a TenantRoute is one tenant; create another TenantRoute for another tenant"
	TenantID string `json:"tenantID"`

	// region names the Region whose backends serve this tenant.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Region string `json:"region"`

	// hostnames the tenant is reached at: lowercase DNS names (internationalised names
	// in their xn-- punycode form), wildcards not supported. A hostname inside a zone of
	// one of the edges gets records; any other hostname is a custom domain, routed by
	// the proxy, for which status.customDomains tells the CNAME the tenant must create.
	// At most 230 characters: the names the operator derives from a hostname (the
	// Route53 ownership record "_tenantroute-<type>.<hostname>", a custom domain's
	// challenge "_tenantroute-challenge.<hostname>") must fit DNS's 253.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=230
	// +kubebuilder:validation:XValidation:rule="self.all(h, h.matches('^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?[.])+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'))",messageExpression="'spec.hostnames: \"' + self.filter(h, !h.matches('^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?[.])+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$'))[0] + '\" is not a lowercase RFC 1123 DNS name with at least two labels (labels of 1-63 letters, digits and hyphens; no wildcards, no trailing dot)'"
	Hostnames []string `json:"hostnames"`

	// edges are EdgeProvider names in order of preference. Every hostname gets records
	// in every listed provider's zones, all pointing at the active edge.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Edges []string `json:"edges"`

	// ttl of the records in seconds (30-86400). Cloudflare zones below the plan's
	// minimum (60 s on most plans) get that minimum.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=86400
	TTL int32 `json:"ttl,omitempty"`

	// failover chooses the active edge.
	// +optional
	Failover *FailoverPolicy `json:"failover,omitempty"`
}

// FailoverPolicy chooses a TenantRoute's active edge.
type FailoverPolicy struct {
	// mode is Automatic (the first healthy edge in spec.edges is active; if none is
	// healthy the current one stays) or Manual (pinnedEdge is active whatever its health).
	// +optional
	// +kubebuilder:default=Automatic
	Mode FailoverMode `json:"mode,omitempty"`

	// pinnedEdge is the active edge in Manual mode; one of spec.edges.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PinnedEdge string `json:"pinnedEdge,omitempty"`

	// reason says why the route is pinned (kubectl tenantroute pin --reason), for the
	// next person on call; it is repeated in the FailedOver condition.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`
}

// RecordState summarises a TenantRoute's records in one provider.
// +kubebuilder:validation:Enum=Synced;Pending;Error
type RecordState string

const (
	// RecordsSynced: every record is in place.
	RecordsSynced RecordState = "Synced"
	// RecordsPending: changes are queued or being applied.
	RecordsPending RecordState = "Pending"
	// RecordsError: the provider rejected or could not be reached; see message.
	RecordsError RecordState = "Error"
)

// ProviderRecordStatus is the state of a TenantRoute's records in one EdgeProvider.
type ProviderRecordStatus struct {
	// edge is the EdgeProvider's name.
	// +required
	Edge string `json:"edge"`

	// state is Synced, Pending or Error.
	// +required
	State RecordState `json:"state"`

	// records is the number of records the operator manages for this TenantRoute there.
	// +optional
	Records int32 `json:"records,omitempty"`

	// message explains an Error or Pending state.
	// +optional
	Message string `json:"message,omitempty"`
}

// CustomDomainStatus tells the tenant how to prove control of a custom domain and
// point it at its route; the domain is routed only once both records are in place.
type CustomDomainStatus struct {
	// hostname is the custom domain, outside every managed zone.
	// +required
	Hostname string `json:"hostname"`

	// cnameTarget is what the tenant's own DNS must CNAME the hostname to.
	// +optional
	CNAMETarget string `json:"cnameTarget,omitempty"`

	// challengeName is the TXT record the tenant must create:
	// _tenantroute-challenge.<hostname>.
	// +optional
	ChallengeName string `json:"challengeName,omitempty"`

	// challengeValue is the value that TXT record must hold; it is this TenantRoute's
	// own, so no other TenantRoute can use the same proof.
	// +optional
	ChallengeValue string `json:"challengeValue,omitempty"`

	// verifiedAt is when both records were last found in place.
	// +optional
	VerifiedAt *metav1.Time `json:"verifiedAt,omitempty"`

	// message says what the last check found missing.
	// +optional
	Message string `json:"message,omitempty"`
}

// CertificateState says whether a hostname has a certificate.
// +kubebuilder:validation:Enum=Issued;Pending;Failed
type CertificateState string

const (
	// CertificateIssued: the proxies serve a valid certificate (a renewal failure, if
	// any, is in the message).
	CertificateIssued CertificateState = "Issued"
	// CertificatePending: no certificate served yet; an on-demand one is obtained on
	// the hostname's first HTTPS request.
	CertificatePending CertificateState = "Pending"
	// CertificateFailed: obtaining one failed (see message), or the one served expired.
	CertificateFailed CertificateState = "Failed"
)

// HostnameCertificate is the certificate of one granted hostname.
type HostnameCertificate struct {
	// hostname is one of the granted hostnames.
	// +required
	Hostname string `json:"hostname"`

	// state is Issued, Pending or Failed.
	// +required
	State CertificateState `json:"state"`

	// issuer is the certificate issuer's name.
	// +optional
	Issuer string `json:"issuer,omitempty"`

	// notAfter is when the certificate expires.
	// +optional
	NotAfter *metav1.Time `json:"notAfter,omitempty"`

	// source is acme (obtained on demand) or secret (a mounted TLS Secret).
	// +optional
	Source string `json:"source,omitempty"`

	// message says why a certificate failed, or that its renewal failed.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ClaimState says whether a TenantRoute holds a hostname or its tenantID.
// +kubebuilder:validation:Enum=Granted;Conflict;PendingVerification;Forbidden
type ClaimState string

const (
	// ClaimGranted: the TenantRoute holds it. Only granted hostnames get records and
	// traffic.
	ClaimGranted ClaimState = "Granted"
	// ClaimConflict: another TenantRoute was granted it first and still lists it.
	ClaimConflict ClaimState = "Conflict"
	// ClaimPendingVerification: a custom domain whose owner has not proven control.
	ClaimPendingVerification ClaimState = "PendingVerification"
	// ClaimForbidden: the TenantRoute's namespace may not claim names in that zone.
	ClaimForbidden ClaimState = "Forbidden"
)

// ClaimStatus is the state of one claim and since when it holds.
type ClaimStatus struct {
	// state is Granted, Conflict, PendingVerification or Forbidden.
	// +required
	State ClaimState `json:"state"`

	// since is when the claim entered this state.
	// +required
	Since metav1.Time `json:"since"`

	// message says why, for any state but Granted.
	// +optional
	Message string `json:"message,omitempty"`
}

// HostnameClaim is the claim state of one hostname of the TenantRoute.
type HostnameClaim struct {
	// hostname is one of spec.hostnames.
	// +required
	Hostname string `json:"hostname"`

	ClaimStatus `json:",inline"`
}

// TenantRouteStatus is the observed state of a TenantRoute.
type TenantRouteStatus struct {
	// observedGeneration is the generation of the spec last fully reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// activeEdge is the EdgeProvider every record currently points at.
	// +optional
	ActiveEdge string `json:"activeEdge,omitempty"`

	// lastFailoverTime is when the active edge last changed because of health.
	// +optional
	LastFailoverTime *metav1.Time `json:"lastFailoverTime,omitempty"`

	// providers is the state of the records in each EdgeProvider of spec.edges.
	// +optional
	// +listType=map
	// +listMapKey=edge
	Providers []ProviderRecordStatus `json:"providers,omitempty"`

	// hostnames is the claim state of each hostname. A hostname is granted to the first
	// TenantRoute that claims it and stays with it while it lists it; only granted
	// hostnames get records and traffic.
	// +optional
	// +listType=map
	// +listMapKey=hostname
	Hostnames []HostnameClaim `json:"hostnames,omitempty"`

	// tenantID is the claim state of spec.tenantID, which belongs to one TenantRoute in
	// the cluster: a TenantRoute whose tenantID another holds gets no hostname.
	// +optional
	TenantID *ClaimStatus `json:"tenantID,omitempty"`

	// customDomains are the hostnames outside every managed zone, with the CNAME the
	// tenant must create for each.
	// +optional
	// +listType=map
	// +listMapKey=hostname
	CustomDomains []CustomDomainStatus `json:"customDomains,omitempty"`

	// certificates is the certificate each granted hostname is served with over HTTPS
	// by the proxies (reported when they serve HTTPS; see the README's HTTPS section).
	// +optional
	// +listType=map
	// +listMapKey=hostname
	Certificates []HostnameCertificate `json:"certificates,omitempty"`

	// conditions: Ready, RecordsSynced, EdgeHealthy, FailedOver, Conflict.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TenantRoute routes one tenant's hostnames to its region through the active edge.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tr,categories=routing
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.tenantID`
// +kubebuilder:printcolumn:name="Region",type=string,JSONPath=`.spec.region`
// +kubebuilder:printcolumn:name="Active Edge",type=string,JSONPath=`.status.activeEdge`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name of a TenantRoute must be at most 63 characters"
type TenantRoute struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec declares the tenant's hostnames, region and edges.
	// +required
	Spec TenantRouteSpec `json:"spec"`

	// status is written by the operator.
	// +optional
	Status TenantRouteStatus `json:"status,omitempty"`
}

// TenantRouteList is a list of TenantRoutes.
//
// +kubebuilder:object:root=true
type TenantRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TenantRoute `json:"items"`
}

func init() {
	SchemeBuilder.Register(&TenantRoute{}, &TenantRouteList{})
}
