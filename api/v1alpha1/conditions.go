package v1alpha1

// Condition types written by the operator.
const (
	// ConditionReady: the TenantRoute's records are in place in every provider.
	ConditionReady = "Ready"
	// ConditionRecordsSynced: the desired records are applied in every provider.
	ConditionRecordsSynced = "RecordsSynced"
	// ConditionConflict: a hostname is claimed by another TenantRoute or by a record
	// the operator does not own.
	ConditionConflict = "Conflict"
	// ConditionEdgeHealthy: the TenantRoute's active edge is healthy.
	ConditionEdgeHealthy = "EdgeHealthy"
	// ConditionFailedOver: the active edge is not the first edge in spec.edges.
	ConditionFailedOver = "FailedOver"
	// ConditionCustomDomainsVerified: every custom domain's owner proved control.
	ConditionCustomDomainsVerified = "CustomDomainsVerified"

	// ConditionCredentialsReady: the EdgeProvider's credentials were read and accepted.
	ConditionCredentialsReady = "CredentialsReady"
	// ConditionZonesReady: every zone of the EdgeProvider exists at the provider and
	// its last listing succeeded.
	ConditionZonesReady = "ZonesReady"
	// ConditionHealthy: the EdgeProvider's edge passes its health check.
	ConditionHealthy = "Healthy"
)
