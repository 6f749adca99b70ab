package kubectlplugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// kube is the plugin's API client: the reads and the one patch it makes, over
// client-go's REST client. controller-runtime's client and cli-runtime's flags link
// the types of every built-in API group (half the binary); the plugin needs three
// kinds.
type kube struct {
	routing, core *rest.RESTClient
}

func newKube(cfg *rest.Config) (*kube, error) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	client := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.GroupVersion, c.APIPath, c.NegotiatedSerializer = &gv, apiPath, codecs
		if c.UserAgent == "" {
			c.UserAgent = "kubectl-tenantroute"
		}
		return rest.RESTClientFor(c)
	}
	routing, err := client(v1.GroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	core, err := client(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	return &kube{routing: routing, core: core}, nil
}

func (k *kube) route(ctx context.Context, namespace, name string) (*v1.TenantRoute, error) {
	route := &v1.TenantRoute{}
	return route, k.routing.Get().Namespace(namespace).Resource("tenantroutes").Name(name).Do(ctx).Into(route)
}

// routes lists the TenantRoutes of the cluster.
func (k *kube) routes(ctx context.Context) (*v1.TenantRouteList, error) {
	list := &v1.TenantRouteList{}
	return list, k.routing.Get().Resource("tenantroutes").Do(ctx).Into(list)
}

func (k *kube) edgeProviders(ctx context.Context) (*v1.EdgeProviderList, error) {
	list := &v1.EdgeProviderList{}
	return list, k.routing.Get().Resource("edgeproviders").Do(ctx).Into(list)
}

// patchRoute merge-patches a TenantRoute.
func (k *kube) patchRoute(ctx context.Context, namespace, name string, patch []byte) error {
	return k.routing.Patch(types.MergePatchType).Namespace(namespace).Resource("tenantroutes").Name(name).Body(patch).Do(ctx).Error()
}

// secret reads a Secret, for connect.EdgeProvider.
func (k *kube) secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	return secret, k.core.Get().Namespace(namespace).Resource("secrets").Name(name).Do(ctx).Into(secret)
}
