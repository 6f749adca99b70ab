package routes

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// Index finds the cached TenantRoutes that hold a value (a hostname, a tenantID, an
// edge, a region) across namespaces.
//
// It is a field index with one key per value. controller-runtime's IndexField keeps
// each value twice, under a key for the route's namespace and one for all
// namespaces, and no lookup here is namespaced: with five indexes the namespaced keys
// were half of the 138 MB the indexes took of the manager's 706 MB heap at 100,000
// routes. It is registered as controller-runtime names its own (fieldIndexPrefix,
// allNamespacesKey), so that the cache's List with client.MatchingFields finds it in
// a cache of several namespaces too (TestIndex* fail if those names change).
type Index struct {
	reader client.Reader
	field  string
	// indexer is the informer's own store, in a cache of all namespaces (the
	// manager's): looked up directly, a lookup copies no route. A cache of several
	// namespaces has one store each, and the cache's List goes through them all.
	indexer toolscache.Indexer
}

// How controller-runtime's cache names a field index and keys a value of all
// namespaces (sigs.k8s.io/controller-runtime/pkg/cache/internal: FieldIndexName,
// KeyToNamespacedKey).
const (
	fieldIndexPrefix = "field:"
	allNamespacesKey = "__all_namespaces/"
)

// NewIndex registers an index of the TenantRoutes in c by values, under field, before
// the cache starts; values is called again on every change of a route. Lookups are
// across namespaces: a List with client.InNamespace and client.MatchingFields of this
// field finds nothing.
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
	idx := &Index{reader: c, field: field}
	if shared, ok := inf.(toolscache.SharedIndexInformer); ok {
		idx.indexer = shared.GetIndexer()
	}
	return idx, nil
}

// Routes are the cached TenantRoutes that hold value, read in place: read them, never
// change them.
func (i *Index) Routes(ctx context.Context, value string) ([]*v1.TenantRoute, error) {
	if i.indexer != nil {
		objs, err := i.indexer.ByIndex(fieldIndexPrefix+i.field, allNamespacesKey+value)
		if err != nil {
			return nil, fmt.Errorf("finding the TenantRoutes by %s %q: %w", i.field, value, err)
		}
		out := make([]*v1.TenantRoute, 0, len(objs))
		for _, o := range objs {
			if tr, ok := o.(*v1.TenantRoute); ok {
				out = append(out, tr)
			}
		}
		return out, nil
	}
	var list v1.TenantRouteList
	if err := i.reader.List(ctx, &list, client.MatchingFields{i.field: value}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("finding the TenantRoutes by %s %q: %w", i.field, value, err)
	}
	out := make([]*v1.TenantRoute, len(list.Items))
	for j := range list.Items {
		out[j] = &list.Items[j]
	}
	return out, nil
}

// Keys are the names of the cached TenantRoutes that hold value.
func (i *Index) Keys(ctx context.Context, value string) ([]types.NamespacedName, error) {
	if i.indexer != nil {
		keys, err := i.indexer.IndexKeys(fieldIndexPrefix+i.field, allNamespacesKey+value)
		if err != nil {
			return nil, fmt.Errorf("finding the TenantRoutes by %s %q: %w", i.field, value, err)
		}
		out := make([]types.NamespacedName, len(keys))
		for j, k := range keys {
			ns, name, _ := strings.Cut(k, "/") // the store's key of a namespaced object
			out[j] = types.NamespacedName{Namespace: ns, Name: name}
		}
		return out, nil
	}
	routes, err := i.Routes(ctx, value)
	if err != nil {
		return nil, err
	}
	keys := make([]types.NamespacedName, len(routes))
	for j, tr := range routes {
		keys[j] = types.NamespacedName{Namespace: tr.Namespace, Name: tr.Name}
	}
	return keys, nil
}
