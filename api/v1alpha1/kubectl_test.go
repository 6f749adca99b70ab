package v1alpha1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

// TestKubectl drives the API server with the machine's kubectl the way a user would:
// the CRDs dry-run apply server-side, every sample applies, and `kubectl get` prints
// the printer columns.
func TestKubectl(t *testing.T) {
	kubectlPath, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed for this test (.ci/run checks it is installed): %v", err)
	}
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigPath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectlPath, append([]string{"--kubeconfig", kubeconfigPath}, args...)...)
		cmd.Dir = testenv.RepoRoot()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	if out := kubectl("version"); !strings.Contains(out, "Server Version: v1.37") {
		t.Errorf("kubectl version does not show the stamped server version:\n%s", out)
	}
	out := kubectl("apply", "--server-side", "--dry-run=server", "-f", "config/crd/bases")
	for _, crd := range []string{"tenantroutes", "edgeproviders", "regions"} {
		if !strings.Contains(out, crd+".routing.tenantroute.io serverside-applied (server dry run)") {
			t.Errorf("dry-run apply did not report %s:\n%s", crd, out)
		}
	}

	// The single-file install (make dist) for an image, applied server-side as a dry
	// run: every object must be accepted by the real API server. Its namespace is
	// created for real, as a dry run would not create it for the objects inside.
	install := filepath.Join(t.TempDir(), "install.yaml")
	dist := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "dist.sh"), "registry.example.com/tenantroute/operator:v1.2.3", install)
	dist.Env = append(os.Environ(), "PATH="+filepath.Dir(kubectlPath)+":"+os.Getenv("PATH"))
	if b, err := dist.CombinedOutput(); err != nil {
		t.Fatalf("hack/dist.sh: %v\n%s", err, b)
	}
	manifest, err := os.ReadFile(install)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), "image: registry.example.com/tenantroute/operator:v1.2.3") {
		t.Errorf("dist/install.yaml does not run the given image")
	}
	kinds := regexp.MustCompile(`(?m)^kind: `).FindAllIndex(manifest, -1)
	kubectl("create", "namespace", "tenantroute-system")
	out = kubectl("apply", "--server-side", "--dry-run=server", "-f", install)
	if applied := strings.Count(out, "serverside-applied (server dry run)"); applied != len(kinds) || len(kinds) < 15 {
		t.Errorf("dry-run apply of dist/install.yaml: %d of %d objects applied:\n%s", applied, len(kinds), out)
	}
	for _, want := range []string{"deployment.apps/tenantroute-controller-manager", "validatingadmissionpolicy.admissionregistration.k8s.io/tenantroute-zone-namespaces",
		"validatingadmissionpolicy.admissionregistration.k8s.io/tenantroute-tenant-namespaces",
		"customresourcedefinition.apiextensions.k8s.io/tenantroutes.routing.tenantroute.io"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry-run apply of dist/install.yaml does not list %s:\n%s", want, out)
		}
	}

	out = kubectl("apply", "-f", "config/samples")
	for _, want := range []string{"tenantroute.routing.tenantroute.io/acme created", "tenantroute.routing.tenantroute.io/globex created",
		"edgeprovider.routing.tenantroute.io/cloudflare created", "edgeprovider.routing.tenantroute.io/aws created",
		"region.routing.tenantroute.io/eu-west created"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply -f config/samples: missing %q in:\n%s", want, out)
		}
	}

	out = kubectl("get", "tenantroutes", "-n", "tenants")
	if !regexp.MustCompile(`(?m)^NAME\s+TENANT\s+REGION\s+ACTIVE EDGE\s+READY\s+AGE$`).MatchString(out) {
		t.Errorf("kubectl get tenantroutes header is not NAME TENANT REGION ACTIVE EDGE READY AGE:\n%s", out)
	}
	if !regexp.MustCompile(`(?m)^acme\s+acme\s+eu-west\s`).MatchString(out) {
		t.Errorf("kubectl get tenantroutes does not list acme with its tenant and region:\n%s", out)
	}
	out = kubectl("get", "edgeproviders")
	if !regexp.MustCompile(`(?m)^NAME\s+TYPE\s+HEALTHY\s+FAILOVER\s+MOVED\s+STATUSES PENDING\s+AGE$`).MatchString(out) {
		t.Errorf("kubectl get edgeproviders header:\n%s", out)
	}
	out = kubectl("get", "regions")
	if !regexp.MustCompile(`(?m)^NAME\s+BACKENDS\s+FAILOVER\s+MOVED\s+STATUSES PENDING\s+AGE$`).MatchString(out) {
		t.Errorf("kubectl get regions header:\n%s", out)
	}
	for _, dir := range []string{"config/default", "config/samples", "config/prometheus", "config/proxy", "config/grafana"} {
		if out := kubectl("kustomize", dir); !strings.Contains(out, "kind:") {
			t.Errorf("kubectl kustomize %s rendered nothing:\n%s", dir, out)
		}
	}
	if out := kubectl("kustomize", "config/default"); !strings.Contains(out, "kind: Deployment") || !strings.Contains(out, "namespace: tenantroute-system") {
		t.Errorf("config/default does not render the manager Deployment in tenantroute-system")
	}

	if out := kubectl("get", "routing", "-A"); !strings.Contains(out, "tenantroute.routing.tenantroute.io/acme") ||
		!strings.Contains(out, "region.routing.tenantroute.io/eu-west") || !strings.Contains(out, "edgeprovider.routing.tenantroute.io/aws") {
		t.Errorf("kubectl get routing does not list the three kinds:\n%s", out)
	}
	if out := kubectl("explain", "tenantroute.spec.hostnames"); !strings.Contains(out, "custom domain") {
		t.Errorf("kubectl explain does not show the field documentation:\n%s", out)
	}
}
