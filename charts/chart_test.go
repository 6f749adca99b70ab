package charts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

const (
	releaseName = "tenantroute-operator" // holds the chart's name: objects are tenantroute-operator-*
	namespace   = "tenantroute-system"
)

var (
	k8s      client.Client
	chartDir = filepath.Join(testenv.RepoRoot(), "charts", "tenantroute-operator")
	// The value sets the chart is tested with: the defaults and every file in ci/.
	valueSets = []string{"", "ci/all-on-values.yaml", "ci/external-redis-values.yaml"}
)

func TestMain(m *testing.M) {
	monitoring, err := testenv.MonitoringCRDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env, cfg, err := testenv.Start(func(e *envtest.Environment) {
		e.CRDDirectoryPaths = append(e.CRDDirectoryPaths, monitoring)
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if k8s, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func values(t *testing.T, file string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	if file == "" {
		return vals
	}
	b, err := os.ReadFile(filepath.Join(chartDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &vals); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return vals
}

// render is `helm template` through Helm's library.
func render(t *testing.T, vals map[string]any) (*chart.Chart, []*unstructured.Unstructured) {
	t.Helper()
	chrt, manifest, err := renderAs(releaseName, vals)
	if err != nil {
		t.Fatalf("rendering the chart: %v", err)
	}
	return chrt, decode(t, manifest)
}

func renderAs(release string, vals map[string]any) (*chart.Chart, string, error) {
	return renderOn(&common.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"},
		common.VersionSet{"admissionregistration.k8s.io/v1/MutatingAdmissionPolicy", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicyBinding"},
		release, vals)
}

// renderOn renders the chart as helm install would against a cluster of that version
// serving those APIs beside the default set.
func renderOn(kube *common.KubeVersion, apis common.VersionSet, release string, vals map[string]any) (*chart.Chart, string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, "", err
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.Replace = release, namespace, true
	install.KubeVersion, install.APIVersions = kube, apis
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return nil, "", err
	}
	return chrt, rel.(*releasev1.Release).Manifest, nil
}

func decode(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err == io.EOF {
			return objs
		} else if err != nil {
			t.Fatalf("decoding the rendering: %v\n%s", err, manifest)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func kinds(objs []*unstructured.Unstructured) []string {
	var ks []string
	for _, o := range objs {
		ks = append(ks, o.GetKind()+"/"+o.GetName())
	}
	slices.Sort(ks)
	return ks
}

func containerArgs(t *testing.T, deploy *unstructured.Unstructured) []string {
	t.Helper()
	containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		t.Fatalf("%s has no containers", deploy.GetName())
	}
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	return args
}

// Helm's own linter finds nothing to say about the chart, for every value set.
func TestLint(t *testing.T) {
	for _, file := range valueSets {
		lint := action.NewLint()
		lint.Strict = true
		lint.Namespace = namespace
		result := lint.Run([]string{chartDir}, values(t, file))
		for _, msg := range result.Messages {
			if msg.Severity > 1 { // above INFO
				t.Errorf("helm lint (%q): %s", file, msg)
			}
		}
		for _, err := range result.Errors {
			t.Errorf("helm lint (%q): %v", file, err)
		}
	}
}

// Every rendering is accepted by the real API server (server-side apply, dry run), the
// CRDs included, and each value set turns on what it says.
func TestRenderingsApplyServerSide(t *testing.T) {
	ctx := context.Background()
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	for _, file := range valueSets {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			chrt, objs := render(t, values(t, file))
			for _, crd := range chrt.CRDObjects() {
				objs = append(objs, decode(t, string(crd.File.Data))...)
			}
			for _, o := range objs {
				err := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("helm"), client.ForceOwnership,
					&client.ApplyOptions{DryRun: []string{metav1.DryRunAll}})
				if err != nil {
					t.Errorf("server-side dry-run apply of %s %s: %v", o.GetKind(), o.GetName(), err)
				}
			}

			manager := find(objs, "Deployment", releaseName+"-controller-manager")
			if manager == nil {
				t.Fatalf("no manager Deployment in %v", kinds(objs))
			}
			args := containerArgs(t, manager)
			// Secrets reach the pods as mounted files only, never as arguments (ps).
			secret := find(objs, "Secret", releaseName+"-shared")
			for _, arg := range args {
				if secret != nil {
					for key, v := range secret.Object["data"].(map[string]any) {
						if plain := decodeB64(t, v.(string)); strings.Contains(arg, plain) {
							t.Errorf("argument %q holds the value of %s", arg, key)
						}
					}
				}
			}
			has := func(kind, name string) bool { return find(objs, kind, name) != nil }
			switch file {
			case "":
				for _, want := range []string{"--leader-elect", "--metrics-secure=true", "--lookup-token-file=/etc/tenantroute/shared/lookup-token"} {
					if !slices.Contains(args, want) {
						t.Errorf("default manager args %v lack %s", args, want)
					}
				}
				if has("ServiceMonitor", releaseName+"-manager") || has("PrometheusRule", releaseName+"-alerts") || has("Deployment", releaseName+"-proxy") {
					t.Errorf("the defaults turn on monitoring or the proxy fleet: %v", kinds(objs))
				}
				if !has("ValidatingAdmissionPolicy", releaseName+"-zone-namespaces") || !has("ValidatingAdmissionPolicy", releaseName+"-tenant-namespaces") ||
					!has("ValidatingAdmissionPolicyBinding", releaseName+"-tenant-namespaces") || !has("MutatingAdmissionPolicy", releaseName+"-route-finalizer") ||
					!has("NetworkPolicy", releaseName+"-lookup") {
					t.Errorf("the defaults lack an admission policy or the NetworkPolicy: %v", kinds(objs))
				}
				if secret == nil || len(decodeB64(t, secret.Object["data"].(map[string]any)["lookup-token"].(string))) < 32 {
					t.Errorf("no generated lookup token in the shared Secret")
				}
			case "ci/all-on-values.yaml":
				for _, want := range [][2]string{{"ServiceMonitor", releaseName + "-manager"}, {"ServiceMonitor", releaseName + "-proxy"},
					{"PrometheusRule", releaseName + "-alerts"}, {"ConfigMap", releaseName + "-dashboard"}, {"Deployment", releaseName + "-proxy"},
					{"Deployment", releaseName + "-redis"}, {"NetworkPolicy", releaseName + "-redis"}, {"Secret", releaseName + "-redis"}} {
					if !has(want[0], want[1]) {
						t.Errorf("all-on lacks %s %s: %v", want[0], want[1], kinds(objs))
					}
				}
				image, _, _ := unstructured.NestedSlice(manager.Object, "spec", "template", "spec", "containers")
				if img := image[0].(map[string]any)["image"]; img != "registry.example.com/tenantroute/operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
					t.Errorf("image %v does not pin the digest", img)
				}
				fleet := containerArgs(t, find(objs, "Deployment", releaseName+"-proxy"))
				for _, want := range []string{"--mode=proxy", "--redis-addr=" + releaseName + "-redis." + namespace + ".svc:6379",
					"--redis-password-file=/etc/tenantroute/redis/password", "--trusted-proxies=10.0.0.0/8,192.168.0.0/16",
					"--lookup-url=http://" + releaseName + "-lookup." + namespace + ".svc:8082"} {
					if !slices.Contains(fleet, want) {
						t.Errorf("proxy fleet args %v lack %s", fleet, want)
					}
				}
				// HTTPS on both proxies, the certificate status reported by the manager.
				for _, want := range []string{"--tls-bind-address=:9443", "--tls-cert-dir=/etc/tenantroute/certs",
					"--acme-ca=https://acme-v02.api.letsencrypt.org/directory", "--acme-email=platform@example.com",
					"--acme-ca-roots=/etc/tenantroute/acme-roots/ca.crt", "--https-redirect-port=443"} {
					if !slices.Contains(fleet, want) || !slices.Contains(args, want) {
						t.Errorf("proxy fleet args %v or manager args %v lack %s", fleet, args, want)
					}
				}
				if !slices.Contains(args, "--certificate-status") {
					t.Errorf("manager args %v lack --certificate-status (the fleet serves HTTPS)", args)
				}
				ports, _, _ := unstructured.NestedSlice(find(objs, "Service", releaseName+"-proxy-fleet").Object, "spec", "ports")
				if !slices.ContainsFunc(ports, func(p any) bool { return p.(map[string]any)["targetPort"] == "proxy-https" }) {
					t.Errorf("the fleet's Service has no HTTPS port: %v", ports)
				}
				// The shipped alerts and dashboard are config/'s, unchanged.
				rule := find(objs, "PrometheusRule", releaseName+"-alerts")
				wantRule := decode(t, readFile(t, "config/prometheus/alerts.yaml"))[0]
				if !equalJSON(rule.Object["spec"], wantRule.Object["spec"]) {
					t.Errorf("the chart's alert rules differ from config/prometheus/alerts.yaml")
				}
				dash, _, _ := unstructured.NestedString(find(objs, "ConfigMap", releaseName+"-dashboard").Object, "data", "tenantroute.json")
				if dash != readFile(t, "config/grafana/tenantroute.json") {
					t.Errorf("the chart's dashboard differs from config/grafana/tenantroute.json")
				}
			case "ci/external-redis-values.yaml":
				for _, want := range []string{"--redis-addr=redis.example.internal:6380", "--redis-username=tenantroute", "--redis-tls",
					"--redis-ca-file=/etc/tenantroute/redis-ca/ca.crt", "--redis-password-file=/etc/tenantroute/redis/password"} {
					if !slices.Contains(args, want) {
						t.Errorf("manager args %v lack %s", args, want)
					}
				}
				if slices.Contains(args, "--leader-elect") || has("Secret", releaseName+"-shared") || has("Deployment", releaseName+"-redis") {
					t.Errorf("external-redis: leader election, a shared Secret or a Redis was rendered: %v", kinds(objs))
				}
			}
		})
	}
}

// The chart and config/ install the same CRDs, RBAC rules and admission policy.
func TestChartAndConfigDoNotDrift(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is needed to render config/default: %v", err)
	}
	cmd := exec.Command(kubectl, "kustomize", "config/default")
	cmd.Dir = testenv.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v\n%s", err, stderr.String())
	}
	fromConfig := decode(t, string(out))
	chrt, fromChart := render(t, values(t, "ci/all-on-values.yaml"))
	for _, crd := range chrt.CRDObjects() {
		fromChart = append(fromChart, decode(t, string(crd.File.Data))...)
	}

	// Objects by kind and by name without the installation's prefix.
	index := func(objs []*unstructured.Unstructured, prefix string) map[string]*unstructured.Unstructured {
		m := map[string]*unstructured.Unstructured{}
		for _, o := range objs {
			m[o.GetKind()+"/"+strings.TrimPrefix(o.GetName(), prefix)] = o
		}
		return m
	}
	config, charted := index(fromConfig, "tenantroute-"), index(fromChart, releaseName+"-")
	compared := 0
	for key, want := range config {
		kind := want.GetKind()
		var field string
		switch kind {
		case "CustomResourceDefinition", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy":
			field = "spec"
		case "ClusterRole", "Role":
			field = "rules"
		default:
			continue
		}
		got, ok := charted[key]
		if !ok {
			t.Errorf("config/ installs %s, the chart does not", key)
			continue
		}
		compared++
		if !equalJSON(normalise(kind, got.Object[field]), normalise(kind, want.Object[field])) {
			g, _ := yaml.Marshal(got.Object[field])
			w, _ := yaml.Marshal(want.Object[field])
			t.Errorf("%s differs between the chart and config/:\nchart:\n%s\nconfig:\n%s", key, g, w)
		}
	}
	for key, got := range charted {
		switch got.GetKind() {
		case "CustomResourceDefinition", "ClusterRole", "Role", "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy":
			if _, ok := config[key]; !ok {
				t.Errorf("the chart installs %s, config/ does not", key)
			}
		}
	}
	if compared < 10 { // 3 CRDs, 5 roles, 2 policies
		t.Errorf("compared only %d objects", compared)
	}
}

// normalise makes RBAC rules comparable whatever their order and layout.
func normalise(kind string, v any) any {
	if kind != "ClusterRole" && kind != "Role" {
		return v
	}
	var rules []string
	for _, r := range v.([]any) {
		rule := r.(map[string]any)
		for _, k := range []string{"apiGroups", "resources", "verbs", "nonResourceURLs"} {
			if l, ok := rule[k].([]any); ok {
				s := make([]string, len(l))
				for i := range l {
					s[i] = l[i].(string)
				}
				slices.Sort(s)
				rule[k] = s
			}
		}
		b, _ := json.Marshal(rule)
		rules = append(rules, string(b))
	}
	slices.Sort(rules)
	return rules
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func decodeB64(t *testing.T, s string) string {
	t.Helper()
	var b []byte
	if err := json.Unmarshal([]byte(`"`+s+`"`), &b); err != nil {
		t.Fatalf("not base64: %v", err)
	}
	return string(b)
}

// Values that cannot work are refused at rendering with a clear message, and the
// longest release name still gives valid object names.
func TestValuesGuards(t *testing.T) {
	_, _, err := renderAs(releaseName, map[string]any{"replicas": 2, "leaderElection": map[string]any{"enabled": false}})
	if err == nil || !strings.Contains(err.Error(), "replicas > 1 needs leaderElection.enabled") {
		t.Errorf("two replicas without leader election: %v", err)
	}
	_, _, err = renderAs(releaseName, map[string]any{"proxyFleet": map[string]any{"enabled": true}, "lookup": map[string]any{"enabled": false}})
	if err == nil || !strings.Contains(err.Error(), "proxyFleet.enabled needs lookup.enabled") {
		t.Errorf("a proxy fleet without the lookup endpoint: %v", err)
	}
	// Each pod's own storage, lost at every rollout: every hostname ordered again.
	_, _, err = renderAs(releaseName, map[string]any{"tls": map[string]any{"enabled": true, "acme": map[string]any{"ca": "https://acme.example/directory"}}})
	if err == nil || !strings.Contains(err.Error(), "tls.acme.ca needs Redis") {
		t.Errorf("ACME without Redis: %v", err)
	}

	// A cluster older than 1.36 does not serve MutatingAdmissionPolicy: the default
	// install must not fail there ("no matches for kind"); 1.30 is the chart's floor.
	_, manifest, err := renderOn(&common.KubeVersion{Version: "v1.33.4", Major: "1", Minor: "33"}, nil, releaseName, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range decode(t, manifest) {
		if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") {
			t.Errorf("%s %s rendered for Kubernetes 1.33", o.GetKind(), o.GetName())
		}
	}
	_, manifest, _ = renderAs(releaseName, nil)
	if !strings.Contains(manifest, "kind: MutatingAdmissionPolicy\n") {
		t.Error("no MutatingAdmissionPolicy rendered for Kubernetes 1.37")
	}

	long := strings.Repeat("r", 53) // Helm's limit on release names
	_, manifest, err = renderAs(long, values(t, "ci/all-on-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range decode(t, manifest) {
		if o.GetKind() == "Service" && len(o.GetName()) > 63 {
			t.Errorf("Service name %s has %d characters; at most 63 are allowed", o.GetName(), len(o.GetName()))
		}
	}
}

// The pods restart when, and only when, the secrets they read change: their checksum
// annotation follows the Secret's values.
func TestChecksumFollowsTheSharedSecret(t *testing.T) {
	checksum := func(token string) string {
		vals := map[string]any{"sharedSecret": map[string]any{"lookupToken": token,
			"redisHMACKey": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}
		_, objs := render(t, vals)
		annotations, _, _ := unstructured.NestedStringMap(find(objs, "Deployment", releaseName+"-controller-manager").Object,
			"spec", "template", "metadata", "annotations")
		return annotations["checksum/shared"]
	}
	a, b, c := checksum("0123456789abcdef0123456789abcdef"), checksum("0123456789abcdef0123456789abcdef"), checksum("fedcba9876543210fedcba9876543210")
	if a == "" || a != b || a == c {
		t.Errorf("checksums %q, %q (same values), %q (new token): want equal, then different", a, b, c)
	}
	// An existing Secret is the user's: the chart cannot see it, and must not restart
	// the pods on every upgrade with values it made up.
	existing := func() string {
		_, objs := render(t, values(t, "ci/external-redis-values.yaml"))
		annotations, _, _ := unstructured.NestedStringMap(find(objs, "Deployment", releaseName+"-controller-manager").Object,
			"spec", "template", "metadata", "annotations")
		return annotations["checksum/shared"]
	}
	if x, y := existing(), existing(); x != y {
		t.Errorf("with sharedSecret.existingSecret the checksum changes between renderings: %q, %q", x, y)
	}
}
