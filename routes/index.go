package routes

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// Index finds the cached TenantRoutes that hold a value (a hostname, a tenantID, an
// edge, a region) across namespaces.
//
// It is a controller-runtime field index with one key per value. IndexField keeps
// each value twice, under a key for the route's namespace and one for all
// namespaces, and no lookup here is namespaced: with five indexes the namespaced keys
// were half of 138 MB that the indexes took of the manager's 706 MB heap at 100,000
// routes. The index is registered as controller-runtime names its own
// (fieldIndexPrefix, allNamespacesKey), so that the cache's List with
// client.MatchingFields finds it, in a cache of all namespaces and in one of several
// alike (TestIndex* fail if those names change).
type Index struct {
	reader client.Reader
	field  string
}

// How controller-runtime's cache names a field index and keys a value of all
// namespaces (sigs.k8s.io/controller-runtime/pkg/cache/internal: FieldIndexName,
// KeyToNamespacedKey).
const (
	fieldIndexPrefix = "field:"
	allNamespacesKey = "__all_namespaces/"
)

// NewIndex registers an index of the TenantRoutes in c by values, under field, before
// the cache starts; values is called again on every change of a route.
func NewIndex(ctx context.Context, c cache.Cache, field string, values func(*v1.TenantRoute) []string) (*Index, error) {
	inf, err := c.GetInformer(ctx, &v1.TenantRoute{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("the TenantRoute informer: %w", err)
	}
	err = inf.AddIndexers(toolscache.Indexers{fieldIndexPrefix + field: func(obj any) ([]string, error) {
		tr, ok := obj.(*v1.TenantRoute)
		if !ok {
			return nil, nil
		}
		vs := values(tr)
		keys := make([]string, len(vs))
		for i, v := range vs {
			keys[i] = allNamespacesKey + v
		}
		return keys, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("indexing TenantRoutes by %s: %w", field, err)
	}
	return &Index{reader: c, field: field}, nil
}

// Routes are the cached TenantRoutes that hold value, read in place: read them, never
// change them.
func (i *Index) Routes(ctx context.Context, value string) ([]v1.TenantRoute, error) {
	var list v1.TenantRouteList
	if err := i.reader.List(ctx, &list, client.MatchingFields{i.field: value}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("finding the TenantRoutes by %s %q: %w", i.field, value, err)
	}
	return list.Items, nil
}

// Keys are the names of the cached TenantRoutes that hold value.
func (i *Index) Keys(ctx context.Context, value string) ([]types.NamespacedName, error) {
	routes, err := i.Routes(ctx, value)
	if err != nil {
		return nil, err
	}
	keys := make([]types.NamespacedName, len(routes))
	for j := range routes {
		keys[j] = types.NamespacedName{Namespace: routes[j].Namespace, Name: routes[j].Name}
	}
	return keys, nil
}
