package v1alpha1

// Reasons of conditions and events, one constant per value: a condition's reason is
// often also the reason of the event that announces it (docs/operating.md lists
// which object carries which). Condition types are in conditions.go.

// A TenantRoute's records and claims (Ready, RecordsSynced, Conflict,
// CustomDomainsVerified).
const (
	ReasonReady             = "Ready"             // records point at the active edge in every provider
	ReasonSynced            = "Synced"            // a provider holds the desired records
	ReasonPending           = "Pending"           // records are on their way to a provider
	ReasonProviderError     = "ProviderError"     // a provider failed or rejected records
	ReasonProviderRecovered = "ProviderRecovered" // (event) a provider's records are in sync again
	ReasonRecordsChanged    = "RecordsChanged"    // (event) a queue created, updated or deleted records
	ReasonConflict          = "Conflict"          // a hostname or the tenantID is held by someone else
	ReasonNoConflict        = "NoConflict"        // every hostname and the tenantID are granted
	ReasonForbidden         = "Forbidden"         // a zone's namespaceSelector does not admit the namespace
	ReasonRegionNotFound    = "RegionNotFound"    // spec.region names no Region
	ReasonVerified          = "Verified"          // every custom domain proved control
	ReasonDomainPending     = "PendingVerification"
	ReasonDomainVerified    = "DomainVerified"   // (event) a custom domain proved control
	ReasonDomainUnverified  = "DomainUnverified" // (event) a custom domain lost its proof
)

// The active edge (FailedOver, EdgeHealthy) and health transitions.
const (
	ReasonPreferred         = "Preferred"          // the first edge, healthy or unknown
	ReasonFailedOver        = "FailedOver"         // a later edge: those before it are unhealthy or missing
	ReasonFailedBack        = "FailedBack"         // (event) traffic is back on the preferred edge
	ReasonPinned            = "Pinned"             // Manual mode
	ReasonPinnedEdgeMissing = "PinnedEdgeNotFound" // Manual mode names no EdgeProvider: the current edge stays (the first existing one once it is gone)
	ReasonFailStatic        = "FailStatic"         // no edge is healthy: the current one stays
	ReasonNoEdge            = "NoEdgeFound"        // none of spec.edges exists
	ReasonActiveEdgeChanged = "ActiveEdgeChanged"  // (event) moved for another reason: spec edited, pin
	ReasonEdgeUnhealthy     = "EdgeUnhealthy"      // the active edge fails its health check
	ReasonProbeSucceeded    = "ProbeSucceeded"
	ReasonProbeFailed       = "ProbeFailed"
	ReasonNotProbed         = "NotProbedYet"
)

// Deletion of a TenantRoute or an EdgeProvider.
const (
	ReasonDeleting        = "Deleting"
	ReasonDeletionBlocked = "DeletionBlocked" // a provider cannot confirm the records are gone yet
	// ReasonDeletionAbandoned: the deletion completed after the deletion timeout
	// without every provider's confirmation.
	ReasonDeletionAbandoned = "DeletionAbandoned"
	ReasonDeletingRecords   = "DeletingRecords" // (EdgeProvider) its records are being deleted
	ReasonRecordsDeleted    = "RecordsDeleted"  // (EdgeProvider) none of its records is left
)

// An EdgeProvider's account (CredentialsReady, ZonesReady).
const (
	ReasonSecretNotFound      = "SecretNotFound"
	ReasonSecretKeyMissing    = "SecretKeyMissing"
	ReasonCredentialsAccepted = "CredentialsAccepted"
	ReasonCredentialsRejected = "CredentialsRejected"
	ReasonZonesResolved       = "ZonesResolved"
	ReasonZoneNotFound        = "ZoneNotFound"
	ReasonZoneUnreadable      = "ZoneUnreadable" // a resolved zone's records cannot be listed
	ReasonZoneConflict        = "ZoneConflict"   // another EdgeProvider of this installation manages the zone
	ReasonProviderUnreachable = "ProviderUnreachable"
)

// A TenantRoute's certificates (events).
const (
	// ReasonCertificateIssued: a hostname is served with a new certificate.
	ReasonCertificateIssued = "CertificateIssued"
	// ReasonCertificateFailed: no certificate could be obtained for a hostname, or
	// the one served expired.
	ReasonCertificateFailed = "CertificateFailed"
	// ReasonCertificateRenewalFailed: renewing a hostname's certificate failed; the
	// current one is still served.
	ReasonCertificateRenewalFailed = "CertificateRenewalFailed"
)
