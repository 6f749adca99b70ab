package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EdgeProviderSpec declares one provider account that is both a DNS host and a traffic edge.
//
// +kubebuilder:validation:XValidation:rule="has(self.cloudflare) != has(self.route53)",message="exactly one of spec.cloudflare or spec.route53 must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.edge.cloudflareProxy) || has(self.cloudflare)",fieldPath=".edge.cloudflareProxy",message="spec.edge.cloudflareProxy is only allowed with spec.cloudflare"
type EdgeProviderSpec struct {
	// zones are the DNS zones this account hosts. A TenantRoute hostname inside one of
	// them gets a record in it; the most specific zone wins.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:rule="self.all(z, self.exists_one(o, o.name == z.name))",message="spec.zones names must be unique"
	Zones []Zone `json:"zones"`

	// cloudflare configures a Cloudflare account. Exactly one of cloudflare or route53 is set.
	// +optional
	Cloudflare *CloudflareProvider `json:"cloudflare,omitempty"`

	// route53 configures an AWS Route53 account. Exactly one of cloudflare or route53 is set.
	// +optional
	Route53 *Route53Provider `json:"route53,omitempty"`

	// edge says how a hostname is pointed at this provider's edge.
	// +required
	Edge EdgeTarget `json:"edge"`

	// healthCheck is how the operator decides whether this edge is healthy.
	// +required
	HealthCheck HealthCheck `json:"healthCheck"`
}

// Zone is one DNS zone hosted by the provider account.
type Zone struct {
	// name is the zone's apex, a lowercase DNS name such as auth.example.com.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?[.])+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')",message="spec.zones[].name must be a lowercase RFC 1123 DNS name (labels of 1-63 letters, digits and hyphens)"
	Name string `json:"name"`

	// id is the provider's zone id (Cloudflare zone id, Route53 hosted zone id). When
	// empty the operator looks the zone up by name.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9/_-]*$`
	ID string `json:"id,omitempty"`

	// namespaceSelector restricts which namespaces' TenantRoutes may claim hostnames in
	// this zone. When set, a TenantRoute that lists this EdgeProvider and names a
	// hostname in this zone from a namespace the selector does not select is refused at
	// admission (the ValidatingAdmissionPolicy in config/policy) and, should its
	// namespace's labels change later, the hostname is Forbidden: no records, no
	// traffic. When absent, every namespace may. A selector that does not parse (an
	// unknown operator) admits no namespace.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
}

// SecretKeyReference names one key of a Secret in the operator's namespace.
type SecretKeyReference struct {
	// name is the Secret's name, in the namespace the operator runs in.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key is the key within the Secret's data.
	// +optional
	// +kubebuilder:default=token
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key,omitempty"`
}

// SecretReference names a Secret in the operator's namespace.
type SecretReference struct {
	// name is the Secret's name, in the namespace the operator runs in.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// RateLimit caps the API requests the operator sends to one provider account.
type RateLimit struct {
	// requests is how many API requests may be sent per period.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Requests int32 `json:"requests"`

	// period is the window the requests are counted over, e.g. 5m.
	// +required
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="rateLimit.period must be at least 1s"
	Period metav1.Duration `json:"period"`
}

// CloudflareProvider configures a Cloudflare account.
type CloudflareProvider struct {
	// apiTokenSecretRef names the Secret key that holds an API token with
	// Zone:Read and DNS:Edit permissions.
	// +required
	APITokenSecretRef SecretKeyReference `json:"apiTokenSecretRef"`

	// baseURL replaces the API base URL https://api.cloudflare.com/client/v4/
	// (an emulator or an API gateway).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || (isURL(self) && url(self).getScheme() in ['http', 'https'])",message="spec.cloudflare.baseURL must be an http or https URL"
	BaseURL string `json:"baseURL,omitempty"`

	// batchSize is the most records changed by one dns_records/batch request
	// (200 on Free plans, up to 3500 on paid plans).
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3500
	BatchSize int32 `json:"batchSize,omitempty"`

	// rateLimit caps requests to this account; the default is Cloudflare's published
	// limit of 1200 requests per 5 minutes per token.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
}

// Route53Provider configures an AWS Route53 account.
type Route53Provider struct {
	// region is the AWS region the client signs for; Route53 is global and signs as us-east-1.
	// +optional
	// +kubebuilder:default=us-east-1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[a-z0-9-]+$`
	Region string `json:"region,omitempty"`

	// credentialsSecretRef names a Secret with the keys access-key-id and
	// secret-access-key (and optionally session-token). When absent the default AWS
	// credential chain is used (environment, web identity, instance role).
	// +optional
	CredentialsSecretRef *SecretReference `json:"credentialsSecretRef,omitempty"`

	// endpoint replaces the Route53 API endpoint (an emulator).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.size() == 0 || (isURL(self) && url(self).getScheme() in ['http', 'https'])",message="spec.route53.endpoint must be an http or https URL"
	Endpoint string `json:"endpoint,omitempty"`

	// rateLimit caps requests to this account; the default is Route53's published
	// limit of 5 requests per second per account.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
}

// EdgeTarget says how a hostname is pointed at this edge: exactly one of target or addresses.
//
// +kubebuilder:validation:XValidation:rule="has(self.target) != has(self.addresses)",message="exactly one of spec.edge.target or spec.edge.addresses must be set"
type EdgeTarget struct {
	// target is the CNAME target for hostnames served by this edge. The placeholder
	// {{ .Hostname }} is replaced by the tenant's hostname, e.g.
	// "{{ .Hostname }}.cdn.cloudflare.net".
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.replace('{{ .Hostname }}', 'h').matches('^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?[.])+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')",message="spec.edge.target must be a lowercase DNS name, optionally containing the placeholder {{ .Hostname }}"
	Target string `json:"target,omitempty"`

	// addresses are IPv4 and/or IPv6 addresses written as A/AAAA records instead of a CNAME.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="self.all(a, isIP(a))",message="spec.edge.addresses must be IPv4 or IPv6 addresses"
	Addresses []string `json:"addresses,omitempty"`

	// cloudflareProxy, for a Cloudflare provider only: while this edge is active, records
	// in its own zones are written proxied (orange cloud) to this origin instead of the
	// plain target.
	// +optional
	CloudflareProxy *CloudflareProxy `json:"cloudflareProxy,omitempty"`
}

// CloudflareProxy makes Cloudflare proxy a tenant's hostname to an origin.
type CloudflareProxy struct {
	// origin is the hostname Cloudflare forwards proxied traffic to.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?[.])+[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$')",message="spec.edge.cloudflareProxy.origin must be a lowercase DNS name"
	Origin string `json:"origin"`
}

// HealthCheck probes the edge.
//
// +kubebuilder:validation:XValidation:rule="duration(self.timeout) < duration(self.interval)",fieldPath=".timeout",message="spec.healthCheck.timeout must be shorter than spec.healthCheck.interval"
type HealthCheck struct {
	// url is probed with GET; a 2xx or 3xx answer is a success.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getHostname().size() > 0",message="spec.healthCheck.url must be an absolute http or https URL"
	URL string `json:"url"`

	// hostHeader overrides the Host header of the probe and, when the URL is an HTTPS
	// address (an edge probed by address), the TLS server name it asks for and checks
	// the certificate against.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	HostHeader string `json:"hostHeader,omitempty"`

	// interval between probes (at least 1s). With the default 2s interval and failure
	// threshold of 3, an edge that goes down is declared unhealthy within 4-6 s.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.healthCheck.interval must be at least 1s"
	Interval metav1.Duration `json:"interval,omitempty"`

	// timeout of one probe; shorter than the interval.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="spec.healthCheck.timeout must be positive"
	Timeout metav1.Duration `json:"timeout,omitempty"`

	// failureThreshold is how many consecutive failed probes make the edge unhealthy.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	FailureThreshold int32 `json:"failureThreshold,omitempty"`

	// successThreshold is how many consecutive successful probes make the edge healthy.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	SuccessThreshold int32 `json:"successThreshold,omitempty"`

	// failbackHoldDown is how long an unhealthy edge must pass every probe before it
	// counts as healthy again and traffic fails back to it, so that a flapping edge
	// cannot move traffic back and forth.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('24h')",message="spec.healthCheck.failbackHoldDown must be between 0s and 24h"
	FailbackHoldDown metav1.Duration `json:"failbackHoldDown,omitempty"`
}

// EdgeProviderStatus is the observed state of an EdgeProvider.
type EdgeProviderStatus struct {
	// observedGeneration is the generation of the spec last processed.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// type is the provider kind, Cloudflare or Route53.
	// +optional
	Type string `json:"type,omitempty"`

	// zones are the zones as resolved at the provider.
	// +optional
	// +listType=map
	// +listMapKey=name
	Zones []ZoneStatus `json:"zones,omitempty"`

	// lastProbe is the result of a recent health probe, written when health changes and
	// at a slow heartbeat, not after every probe.
	// +optional
	LastProbe *ProbeResult `json:"lastProbe,omitempty"`

	// failover is the last time this edge's health moved TenantRoutes: away when it
	// became unhealthy, back when it recovered. It is written when the operator
	// decides, when the records have moved, and as the routes' own statuses follow.
	// +optional
	Failover *FailoverStatus `json:"failover,omitempty"`

	// conditions: CredentialsReady, ZonesReady, Healthy.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// FailoverStatus summarises one failover (or failback) of an edge's TenantRoutes, so
// that it shows at once however many routes it moves; each route's own status follows
// at the pace the API server takes writes.
type FailoverStatus struct {
	// edge is the EdgeProvider whose health changed.
	// +required
	Edge string `json:"edge"`

	// reason: FailedOver (the edge became unhealthy and routes left it) or FailedBack
	// (it is healthy again and routes returned to it).
	// +required
	Reason string `json:"reason"`

	// startedAt is when the operator decided.
	// +required
	StartedAt metav1.MicroTime `json:"startedAt"`

	// moved is how many TenantRoutes changed active edge.
	// +optional
	Moved int32 `json:"moved,omitempty"`

	// recordsMovedAt is when every record the failover changed was applied in every
	// provider it could reach; unset while records are on their way.
	// +optional
	RecordsMovedAt *metav1.MicroTime `json:"recordsMovedAt,omitempty"`

	// statusesPending is how many of the moved TenantRoutes' statuses do not show
	// their new edge yet.
	// +optional
	StatusesPending int32 `json:"statusesPending,omitempty"`
}

// ProbeResult is the result of one health probe.
type ProbeResult struct {
	// time the probe was sent.
	// +required
	Time metav1.Time `json:"time"`

	// success: a 2xx or 3xx answer within the timeout.
	// +required
	Success bool `json:"success"`

	// latencyMilliseconds until the answer (or the failure).
	// +optional
	LatencyMilliseconds int64 `json:"latencyMilliseconds,omitempty"`

	// message is the answer's status line or the error.
	// +optional
	Message string `json:"message,omitempty"`
}

// ZoneStatus is a zone as resolved at the provider.
type ZoneStatus struct {
	// name is the zone's apex.
	// +required
	Name string `json:"name"`

	// id is the provider's zone id.
	// +optional
	ID string `json:"id,omitempty"`

	// listError says why the zone's last listing failed (the kind of failure and the
	// provider's error code); empty once a listing succeeds. Listings are retried with
	// backoff. Meanwhile the TenantRoutes with records in the zone, and those waiting
	// for it to be read (a hostname or an edge let go, a deletion), say so; the others
	// stay Ready.
	// +optional
	ListError string `json:"listError,omitempty"`
}

// EdgeProvider is one provider account that is both a DNS host and a traffic edge.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=routing
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.status.type`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`
// +kubebuilder:printcolumn:name="Failover",type=string,JSONPath=`.status.failover.reason`
// +kubebuilder:printcolumn:name="Moved",type=integer,JSONPath=`.status.failover.moved`
// +kubebuilder:printcolumn:name="Statuses Pending",type=integer,JSONPath=`.status.failover.statusesPending`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EdgeProvider struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata; TenantRoutes name the EdgeProvider in spec.edges.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec declares the account, its zones, its edge and its health check.
	// +required
	Spec EdgeProviderSpec `json:"spec"`

	// status is written by the operator.
	// +optional
	Status EdgeProviderStatus `json:"status,omitempty"`
}

// EdgeProviderList is a list of EdgeProviders.
//
// +kubebuilder:object:root=true
type EdgeProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EdgeProvider `json:"items"`
}

func init() {
	SchemeBuilder.Register(&EdgeProvider{}, &EdgeProviderList{})
}
