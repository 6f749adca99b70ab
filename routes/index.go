package routes

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
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
	values func(*v1.TenantRoute) []string
	// hashed: the index is keyed by a bucket of values, not by each value; a lookup
	// reads the bucket's routes and keeps those holding the value.
	hashed bool
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
	return newIndex(ctx, c, field, values, false)
}

// NewHashedIndex is NewIndex for values that few routes share (hostnames, tenantIDs).
// client-go's indexer keeps a set of route keys per indexed value; a set holding one
// key costs about as much as one holding eight, and with a set per hostname, tenantID
// and granted hostname the indexes were 115 MB of the manager's heap at 100,000
// routes. This index keys routes by one of hashBuckets buckets of their values
// instead, and a lookup keeps the bucket's routes that hold the value: at 100,000
// routes a bucket holds about six.
func NewHashedIndex(ctx context.Context, c cache.Cache, field string, values func(*v1.TenantRoute) []string) (*Index, error) {
	return newIndex(ctx, c, field, values, true)
}

// hashBuckets is how many buckets a hashed index has.
const hashBuckets = 1 << 14

func newIndex(ctx context.Context, c cache.Cache, field string, values func(*v1.TenantRoute) []string, hashed bool) (*Index, error) {
	inf, err := c.GetInformer(ctx, &v1.TenantRoute{}, cache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("the TenantRoute informer: %w", err)
	}
	idx := &Index{reader: c, field: field, values: values, hashed: hashed}
	err = inf.AddIndexers(toolscache.Indexers{fieldIndexPrefix + field: func(obj any) ([]string, error) {
		tr, ok := obj.(*v1.TenantRoute)
		if !ok {
			return nil, nil
		}
		vs := values(tr)
		keys := make([]string, 0, len(vs))
		for _, v := range vs {
			if k := allNamespacesKey + idx.key(v); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		return keys, nil
	}})
	if err != nil {
		return nil, fmt.Errorf("indexing TenantRoutes by %s: %w", field, err)
	}
	if shared, ok := inf.(toolscache.SharedIndexInformer); ok {
		idx.indexer = shared.GetIndexer()
	}
	return idx, nil
}

// key is what the index is keyed by for value: the value, or its bucket.
func (i *Index) key(value string) string {
	if !i.hashed {
		return value
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(value))
	return strconv.FormatUint(uint64(h.Sum32()%hashBuckets), 16)
}

// holds reports whether tr holds value; only a hashed index's lookups need to ask.
func (i *Index) holds(tr *v1.TenantRoute, value string) bool {
	return !i.hashed || slices.Contains(i.values(tr), value)
}

// Routes are the cached TenantRoutes that hold value, read in place: read them, never
// change them.
func (i *Index) Routes(ctx context.Context, value string) ([]*v1.TenantRoute, error) {
	if i.indexer != nil {
		objs, err := i.indexer.ByIndex(fieldIndexPrefix+i.field, allNamespacesKey+i.key(value))
		if err != nil {
			return nil, fmt.Errorf("finding the TenantRoutes by %s %q: %w", i.field, value, err)
		}
		out := make([]*v1.TenantRoute, 0, len(objs))
		for _, o := range objs {
			if tr, ok := o.(*v1.TenantRoute); ok && i.holds(tr, value) {
				out = append(out, tr)
			}
		}
		return out, nil
	}
	var list v1.TenantRouteList
	if err := i.reader.List(ctx, &list, client.MatchingFields{i.field: i.key(value)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("finding the TenantRoutes by %s %q: %w", i.field, value, err)
	}
	out := make([]*v1.TenantRoute, 0, len(list.Items))
	for j := range list.Items {
		if i.holds(&list.Items[j], value) {
			out = append(out, &list.Items[j])
		}
	}
	return out, nil
}

// Keys are the names of the cached TenantRoutes that hold value.
func (i *Index) Keys(ctx context.Context, value string) ([]types.NamespacedName, error) {
	if i.indexer != nil && !i.hashed {
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
