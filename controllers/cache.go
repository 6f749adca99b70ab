package controllers

import (
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// CompactRoutes is the cache transform of TenantRoutes: the informer keeps every
// route of the cluster, so what each one costs is multiplied by 100,000 at scale.
// It drops managedFields (nothing here reads them, and updates of cached objects
// leave the server's as they are), gives the strings that repeat from route to route
// (condition types, reasons and messages, states, edge and region names, the
// namespace, the finalizer) one copy for all routes, and trims the slices the JSON
// decoder grew past their length. The routes read the same; they are only stored
// smaller.
func CompactRoutes(obj any) (any, error) {
	tr, ok := obj.(*v1.TenantRoute)
	if !ok {
		return stripManagedFields(obj)
	}
	tr.ManagedFields = nil
	// kubectl apply keeps a copy of what it applied, as big as the spec; nothing here
	// reads it, and the operator writes routes by patch only, so the server's stays.
	if _, ok := tr.Annotations[lastApplied]; ok {
		delete(tr.Annotations, lastApplied)
		if len(tr.Annotations) == 0 {
			tr.Annotations = nil
		}
	}
	in := &routeStrings
	tr.Namespace = in.get(tr.Namespace)
	tr.Finalizers = trim(tr.Finalizers)
	in.all(tr.Finalizers)

	s := &tr.Spec
	s.Region = in.get(s.Region)
	s.Hostnames = trim(s.Hostnames)
	s.Edges = trim(s.Edges)
	in.all(s.Edges)
	if s.Failover != nil {
		s.Failover.Mode = v1.FailoverMode(in.get(string(s.Failover.Mode)))
		s.Failover.PinnedEdge = in.get(s.Failover.PinnedEdge)
	}

	st := &tr.Status
	st.ActiveEdge = in.get(st.ActiveEdge)
	st.Providers = trim(st.Providers)
	for i := range st.Providers {
		p := &st.Providers[i]
		p.Edge, p.Message = in.get(p.Edge), in.get(p.Message)
		p.State = v1.RecordState(in.get(string(p.State)))
	}
	st.Hostnames = trim(st.Hostnames)
	for i := range st.Hostnames {
		in.claim(&st.Hostnames[i].ClaimStatus)
	}
	if st.TenantID != nil {
		in.claim(st.TenantID)
	}
	st.CustomDomains = trim(st.CustomDomains)
	st.Certificates = trim(st.Certificates)
	for i := range st.Certificates {
		c := &st.Certificates[i]
		c.State = v1.CertificateState(in.get(string(c.State)))
		c.Issuer, c.Source, c.Message = in.get(c.Issuer), in.get(c.Source), in.get(c.Message)
	}
	st.Conditions = trim(st.Conditions)
	for i := range st.Conditions {
		c := &st.Conditions[i]
		c.Type, c.Reason, c.Message = in.get(c.Type), in.get(c.Reason), in.get(c.Message)
		c.Status = metav1.ConditionStatus(in.get(string(c.Status)))
	}
	return tr, nil
}

var stripManagedFields = cache.TransformStripManagedFields()

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// routeStrings holds the one copy of each repeated string of the cached routes.
var routeStrings = interner{m: map[string]string{}}

// interner returns one copy of each string it has seen. Its table is bounded, and so
// are the strings it takes.
type interner struct {
	mu sync.Mutex
	m  map[string]string
}

const (
	internMaxLen     = 128
	internMaxEntries = 1 << 14
)

func (in *interner) get(s string) string {
	if s == "" || len(s) > internMaxLen {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) >= internMaxEntries {
		// Full, most likely of one-off messages (errors with request ids): start over,
		// so that the strings that repeat now are shared again. The copies already
		// shared stay shared.
		clear(in.m)
	}
	in.m[s] = s
	return s
}

func (in *interner) all(ss []string) {
	for i, s := range ss {
		ss[i] = in.get(s)
	}
}

func (in *interner) claim(c *v1.ClaimStatus) {
	c.State = v1.ClaimState(in.get(string(c.State)))
	c.Message = in.get(c.Message)
}

// trim returns s without the capacity past its length, which the decoder leaves when
// it grows a slice (five conditions are decoded into room for eight).
func trim[T any](s []T) []T {
	if cap(s) == len(s) || len(s) == 0 {
		return s
	}
	return slices.Clone(s)
}
