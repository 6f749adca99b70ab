package controllers_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/desired"
	"github.com/tenantroute/tenantroute-operator/internal/kubectlplugin"
	cfemulator "github.com/tenantroute/tenantroute-operator/providers/cloudflare/emulator"
)

// kubectl tenantroute, run as a user runs it (its own kubeconfig and flags) against
// the API server, the running operator and the provider emulators.
func TestKubectlPlugin(t *testing.T) {
	o := newOperator(t, "plugin")
	o.start()
	acme := o.route("acme", "acme.auth.example.com")
	acme.Labels = map[string]string{"test": o.id} // plan -A -l: this test's routes, not every test's
	o.create(acme)
	eventually(t, 20*time.Second, func() error {
		for _, name := range []string{o.cfEdge, o.awsEdge} {
			ep := &v1.EdgeProvider{}
			if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, ep); err != nil {
				return err
			}
			if err := expectCondition(ep.Status.Conditions, v1.ConditionHealthy, metav1.ConditionTrue, ""); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return expectCondition(o.get("acme").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})

	user, err := env.AddUser(envtest.User{Name: "oncall", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	plugin := func(want int, args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"--kubeconfig", path, "-n", o.ns, "--operator-namespace", o.opNS, "--instance", o.id}, args...)
		if code := kubectlplugin.Main(context.Background(), args, &out, &errOut); code != want {
			t.Fatalf("kubectl tenantroute %s: exit %d, want %d\n%s%s", strings.Join(args[8:], " "), code, want, out.String(), errOut.String())
		}
		return out.String()
	}
	mustMatch := func(out string, patterns ...string) {
		t.Helper()
		for _, p := range patterns {
			if !regexp.MustCompile(p).MatchString(out) {
				t.Errorf("output does not match %q:\n%s", p, out)
			}
		}
	}

	// status: the hostname's state, the edges' health, and each provider's records.
	out := plugin(0, "status", "acme")
	mustMatch(out,
		`(?m)^Ready:\s+True \(Ready\)`,
		`(?m)^Active edge:\s+`+o.cfEdge+` \(preferred `+o.cfEdge+`; failover Automatic\)`,
		`(?m)^\s+acme\.auth\.example\.com\s+Granted\s`,
		`(?m)^\s+`+o.cfEdge+`\s+Cloudflare\s+Healthy`,
		`(?m)^\s+`+o.awsEdge+`\s+Route53\s+Healthy`,
		`(?m)^\s+`+o.cfEdge+`\s+auth\.example\.com\s+acme\.auth\.example\.com\s+CNAME\s+60\s+acme\.auth\.example\.com\.cdn\.cloudflare\.net$`,
		`(?m)^\s+`+o.awsEdge+`\s+auth\.example\.com\s+acme\.auth\.example\.com\s+CNAME\s+60\s+acme\.auth\.example\.com\.cdn\.cloudflare\.net$`)

	// A tenant's text is printed to the operator's terminal: an escape sequence (here
	// one that sets the clipboard) reaches it escaped, and a newline and tabs do not
	// forge a row.
	mallory := o.route("mallory", "mallory.auth.example.com")
	mallory.Spec.Failover = &v1.FailoverPolicy{Mode: v1.FailoverManual, PinnedEdge: o.cfEdge,
		Reason: "maintenance\x1b]52;c;cGF3bmVk\x07\n  forged.auth.example.com\tGranted\t2026-01-01T00:00:00Z\t-\u202e"}
	o.create(mallory)
	eventually(t, 20*time.Second, func() error {
		return expectCondition(o.get("mallory").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
	out = plugin(0, "status", "mallory")
	if i := strings.IndexFunc(out, func(r rune) bool { return r == 0x1b || r == 0x07 || r == 0x202e }); i >= 0 {
		t.Errorf("a control character reached the terminal at %d:\n%q", i, out)
	}
	if regexp.MustCompile(`(?m)^\s+forged\.auth\.example\.com\s+Granted`).MatchString(out) {
		t.Errorf("a tenant's text forged a row:\n%s", out)
	}
	mustMatch(out, `failover Manual, pinned to `+o.cfEdge+`: maintenance\\x1b\]52;c;cGF3bmVk\\a\\n`)

	// plan: nothing to do while the providers hold what the operator wants.
	mustMatch(plugin(0, "plan", "acme", "--exit-code"), `(?m)^No changes`)

	// Someone edits the record by hand in Cloudflare: plan shows the repair, and
	// writes nothing.
	var id string
	for _, r := range o.cf.Records(o.cfZone) {
		if r.Name == "acme.auth.example.com" {
			id = r.ID
		}
	}
	body := fmt.Sprintf(`{"patches":[{"id":%q,"content":"hijacked.example.org"}]}`, id)
	req, _ := http.NewRequest(http.MethodPost, o.cfURL+"zones/"+o.cfZone+"/dns_records/batch", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+cfToken)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("editing the record by hand: %v %v", err, resp)
	}
	writes := func() int {
		n := 0
		for endpoint, count := range o.cf.Counters() {
			if !strings.HasPrefix(endpoint, "GET ") {
				n += count
			}
		}
		for endpoint, count := range o.r53.Counters() {
			if !strings.HasPrefix(endpoint, "GET ") {
				n += count
			}
		}
		return n
	}
	before := writes()
	out = plugin(2, "plan", "acme", "--exit-code")
	mustMatch(out,
		`(?m)^TenantRoute `+o.ns+`/acme$`,
		`(?m)^  ~ `+o.cfEdge+`/auth\.example\.com: update acme\.auth\.example\.com CNAME 60 acme\.auth\.example\.com\.cdn\.cloudflare\.net \(now hijacked\.example\.org\)$`,
		`(?m)^1 changes, 0 conflicts$`)
	if strings.Contains(out, o.awsEdge+"/") {
		t.Errorf("plan shows changes in Route53, which holds the right record:\n%s", out)
	}
	if after := writes(); after != before {
		t.Errorf("plan wrote to a provider: %d write requests before, %d after", before, after)
	}
	if got := o.cfRecords()["acme.auth.example.com"]; len(got) != 1 || got[0] != "CNAME hijacked.example.org" {
		t.Errorf("the hand-edited record changed during plan: %v", got)
	}

	// -A lists the records of a TenantRoute that no longer exists.
	if _, err := o.cf.AddRecord(o.cfZone, cfemulator.Record{Name: "ghost.auth.example.com", Type: "CNAME", TTL: 60,
		Content: "edge-aws.example.net", Comment: "tenantroute:" + desired.OwnerKey(o.id, o.ns, "ghost")}); err != nil {
		t.Fatal(err)
	}
	out = plugin(0, "plan", "-A", "-l", "test="+o.id)
	mustMatch(out,
		`(?m)^Records of deleted TenantRoutes$`,
		`(?m)^  - `+o.cfEdge+`/auth\.example\.com: delete ghost\.auth\.example\.com CNAME 60 edge-aws\.example\.net \(owner `+regexp.QuoteMeta(desired.OwnerKey(o.id, o.ns, "ghost"))+` no longer exists\)$`)

	// pin: the route moves to the AWS edge whatever health says, the reason recorded.
	if out := plugin(1, "pin", "acme", "nowhere"); out != "" {
		t.Errorf("pin to an edge the route does not list printed %q", out)
	}
	plugin(0, "pin", "acme", o.awsEdge, "--reason", "Cloudflare maintenance CHG-1234")
	eventually(t, 20*time.Second, func() error {
		if got := o.cfRecords()["acme.auth.example.com"]; len(got) != 1 || got[0] != "CNAME "+awsEdgeTarget {
			return fmt.Errorf("cloudflare: %v", got)
		}
		return expectCondition(o.get("acme").Status.Conditions, v1.ConditionFailedOver, metav1.ConditionFalse, v1.ReasonPinned)
	})
	if f := o.get("acme").Spec.Failover; f == nil || f.Mode != v1.FailoverManual || f.PinnedEdge != o.awsEdge || f.Reason != "Cloudflare maintenance CHG-1234" {
		t.Errorf("spec.failover after pin: %+v", f)
	}
	mustMatch(plugin(0, "status", "acme"),
		`(?m)^Active edge:\s+`+o.awsEdge+` \(preferred `+o.cfEdge+`; failover Manual, pinned to `+o.awsEdge+`: Cloudflare maintenance CHG-1234\)`,
		`(?m)^Failed over:\s+False \(Pinned\) failover\.mode is Manual: traffic stays on `+o.awsEdge+` \(Cloudflare maintenance CHG-1234\)$`)

	plugin(0, "unpin", "acme")
	eventually(t, 20*time.Second, func() error {
		if got := o.cfRecords()["acme.auth.example.com"]; len(got) != 1 || got[0] != cfActive("acme.auth.example.com") {
			return fmt.Errorf("cloudflare: %v", got)
		}
		return nil
	})
	if f := o.get("acme").Spec.Failover; f == nil || f.Mode != v1.FailoverAutomatic || f.PinnedEdge != "" || f.Reason != "" {
		t.Errorf("spec.failover after unpin: %+v", f)
	}

	// With the operator stopped, plan tells what its reconcile will do with an edit:
	// a pin moves the active edge in every provider; an edge no longer listed loses
	// the route's records.
	eventually(t, 10*time.Second, func() error {
		if out := plugin(0, "plan", "acme"); !strings.Contains(out, "No changes") {
			return fmt.Errorf("plan after unpin:\n%s", out)
		}
		return nil
	})
	o.stopManager()
	plugin(0, "pin", "acme", o.awsEdge)
	mustMatch(plugin(2, "plan", "acme", "--exit-code"),
		`(?m)^TenantRoute `+o.ns+`/acme \(the active edge becomes `+o.awsEdge+` \(Pinned\)\)$`,
		`(?m)^  ~ `+o.cfEdge+`/auth\.example\.com: update acme\.auth\.example\.com CNAME 60 edge-aws\.example\.net \(now acme\.auth\.example\.com\.cdn\.cloudflare\.net\)$`,
		`(?m)^  ~ `+o.awsEdge+`/auth\.example\.com: update acme\.auth\.example\.com CNAME 60 edge-aws\.example\.net \(now acme\.auth\.example\.com\.cdn\.cloudflare\.net\)$`,
		`(?m)^2 changes, 0 conflicts$`)
	plugin(0, "unpin", "acme")
	edit(t, o.get("acme"), func(tr *v1.TenantRoute) { tr.Spec.Edges = []string{o.cfEdge} })
	mustMatch(plugin(2, "plan", "acme", "--exit-code"),
		`(?m)^  - `+o.awsEdge+`/auth\.example\.com: delete acme\.auth\.example\.com CNAME 60 acme\.auth\.example\.com\.cdn\.cloudflare\.net$`,
		`(?m)^1 changes, 0 conflicts$`)
}
