// Package testenv starts a real kube-apiserver and etcd (built from Go modules by
// hack/build-envtest-assets.sh) with the operator's CRDs installed, for integration tests.
package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	routingv1alpha1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Scheme knows the built-in kinds and the operator's kinds.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := routingv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// AssetsDir finds the kube-apiserver and etcd binaries: KUBEBUILDER_ASSETS when set,
// else the newest build under bin/k8s/.
func AssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	matches, _ := filepath.Glob(filepath.Join(RepoRoot(), "bin", "k8s", "*", "kube-apiserver"))
	if len(matches) == 0 {
		return "", fmt.Errorf("no kube-apiserver under bin/k8s: run `make envtest-assets` (or `make test`) first")
	}
	return filepath.Dir(matches[len(matches)-1]), nil
}

// Start starts the API server with the CRDs from config/crd/bases installed; options
// adjust the environment before it starts.
func Start(options ...func(*envtest.Environment)) (*envtest.Environment, *rest.Config, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	for _, o := range options {
		o(env)
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	// Integration tests create thousands of objects; the client default of 5 qps would
	// measure the client, not the operator.
	cfg.QPS, cfg.Burst = 500, 1000
	return env, cfg, nil
}

// GVK returns the GroupVersionKind of a kind of this API.
func GVK(kind string) schema.GroupVersionKind {
	return routingv1alpha1.GroupVersion.WithKind(kind)
}

// Env is a running API server and a client of it.
type Env struct {
	*envtest.Environment
	Config *rest.Config
	Client client.Client
}

// Main starts the API server, hands it to setUp, runs the package's tests and stops
// the server: the body of a TestMain.
func Main(m *testing.M, setUp func(*Env)) {
	env, cfg, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	setUp(&Env{Environment: env, Config: cfg, Client: c})
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// Apply creates every object of a multi-document YAML file of the repository (for
// example config/policy/zone_namespaces.yaml), leaving those that exist as they are.
func Apply(ctx context.Context, c client.Client, path string) error {
	objs, err := Objects(path)
	if err != nil {
		return err
	}
	for _, u := range objs {
		if err := c.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s from %s: %w", u.GetKind(), u.GetName(), path, err)
		}
	}
	return nil
}

// FinalizerPolicy is the MutatingAdmissionPolicy that gives new TenantRoutes the
// operator's finalizer.
const FinalizerPolicy = "config/policy/route_finalizer.yaml"

// WaitForFinalizerPolicy returns once the API server gives probe, created dry-run, the
// operator's finalizer (on) or no longer does (!on): it reads its admission policies
// through an informer, so a policy just created or deleted takes a moment to apply.
func WaitForFinalizerPolicy(ctx context.Context, c client.Client, probe *routingv1alpha1.TenantRoute, on bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		p := probe.DeepCopy()
		err := c.Create(ctx, p, client.DryRunAll)
		if err == nil && slices.Contains(p.Finalizers, routingv1alpha1.Finalizer) == on {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the finalizer policy still does not apply as wanted (%t) after 30 s (last dry run: %v)", on, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Objects decodes a multi-document YAML file of the repository.
func Objects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(filepath.Join(RepoRoot(), path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}
