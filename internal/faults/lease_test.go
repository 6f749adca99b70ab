package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/harness"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// A leader that loses its lease stops at once, as controller-runtime managers do, and
// its embedded proxy stopped with it: a download passing through it was cut mid-body.
// Now the proxy stops listening at once (the manager's caches, its routes, stop with
// the manager), skipping its delay, and lets what it forwards finish before the
// process exits; nothing else of the former leader acts meanwhile (a provider write
// under way is not sent again). The lease is taken from the leader as another replica
// would take it from one that cannot reach the API server: the leader fails to renew
// it for the renew deadline.
func TestALostLeaseLetsTheEmbeddedProxyFinishWhatIsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	hw, err := harness.Start(ctx, dir, []string{zoneName})
	if err != nil {
		t.Fatal(err)
	}
	defer hw.Stop()

	// The backend streams a line every 50 ms until release, then a last line.
	release := make(chan struct{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/stream" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		for i := 0; ; i++ {
			select {
			case <-release:
				_, _ = io.WriteString(w, "end\n")
				return
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			_, _ = fmt.Fprintf(w, "line %d\n", i)
			w.(http.Flusher).Flush()
		}
	})}
	go func() { _ = backend.Serve(l) }()
	defer backend.Close()
	region := &v1.Region{}
	if err := hw.Client.Get(ctx, client.ObjectKey{Name: harness.Region}, region); err != nil {
		t.Fatal(err)
	}
	region.Spec.Backends = []v1.Backend{{URL: "http://" + l.Addr().String()}}
	if err := hw.Client.Update(ctx, region); err != nil {
		t.Fatal(err)
	}
	host := "lease." + zoneName
	if err := hw.CreateRoutes(ctx, []string{"lease"}, func(string) string { return host }); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr()
	m := &harness.Manager{Binary: buildManager(t), Kubeconfig: hw.Kubeconfig, Dir: dir}
	// A minute of delay, which a lost lease must skip; a minute for what is in flight.
	if err := m.Start("--leader-elect", "--proxy-bind-address", addr, "--shutdown-delay", "1m", "--shutdown-timeout", "1m"); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(syscall.SIGKILL)
	logs := func() string { b, _ := os.ReadFile(filepath.Join(dir, "manager-01.log")); return string(b) }

	get := func(path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		req.Host = host
		return (&http.Transport{DisableKeepAlives: true}).RoundTrip(req)
	}
	routed := false
	for deadline := time.Now().Add(90 * time.Second); !routed && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if resp, err := get("/ok"); err == nil {
			resp.Body.Close()
			routed = resp.StatusCode == http.StatusOK
		}
	}
	if !routed {
		t.Fatalf("the embedded proxy did not route %s within 90 s; manager log:\n%s", host, logs())
	}
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: harness.OperatorNamespace, Name: "tenantroute-operator.routing.tenantroute.io"}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := hw.Client.Get(ctx, key, lease)
		if err == nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the manager holds no lease: %v", err)
		}
	}

	// A download in flight: its first line has come.
	resp, err := get("/stream")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the stream: %v %v", resp, err)
	}
	body := bufio.NewReader(resp.Body)
	if line, err := body.ReadString('\n'); err != nil || !strings.HasPrefix(line, "line ") {
		t.Fatalf("the stream's first line: %q %v", line, err)
	}
	type result struct {
		rest []byte
		err  error
	}
	read := make(chan result, 1)
	go func() { rest, err := io.ReadAll(body); read <- result{rest, err} }()

	// A write to Cloudflare is under way: answered 429 with a Retry-After of 25 s, so
	// that its next attempt falls after the lease is lost.
	hw.CF.SetFaults(emulatorkit.Faults{TooManyRequests: 1 << 20, RetryAfter: emulatorkit.Duration{Duration: 25 * time.Second}})
	late := "late." + zoneName
	if err := hw.CreateRoutes(ctx, []string{"late"}, func(string) string { return late }); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); hw.CF.Injected() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no write to Cloudflare for %s within 30 s; manager log:\n%s", late, logs())
		}
	}
	throttled := time.Now()

	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := hw.Client.Get(ctx, key, lease); err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity, lease.Spec.LeaseDurationSeconds = ptr.To("another-replica"), ptr.To[int32](3600)
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		return hw.Client.Update(ctx, lease)
	}); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()

	// The proxy stops listening once the manager knows its lease is lost (the renew
	// deadline, 10 s after its last renewal), not a minute later.
	refused := false
	for deadline := time.Now().Add(20 * time.Second); !refused && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			refused = true
		} else {
			c.Close()
		}
	}
	if !refused {
		t.Fatalf("the proxy still accepts 20 s after the lease was taken; manager log:\n%s", logs())
	}
	t.Logf("the proxy stopped listening %s after the lease was taken", time.Since(taken).Round(100*time.Millisecond))
	if since := time.Since(throttled); since > 22*time.Second {
		t.Fatalf("the lease was lost %s after the write's 429, past its Retry-After: the test cannot tell", since.Round(100*time.Millisecond))
	}
	calls := func() (n int) {
		for _, c := range hw.CF.Counters() {
			n += c
		}
		return n
	}
	before := calls()
	if !strings.Contains(logs(), "leader election lost") {
		t.Errorf("the manager stopped for another reason than its lease; log:\n%s", logs())
	}

	// Cloudflare answers again, and the former leader's write, due 25 s after its 429,
	// must not be sent: the process lives on only for its proxy.
	hw.CF.SetFaults(emulatorkit.Faults{})
	time.Sleep(time.Until(throttled.Add(32 * time.Second)))
	for _, rec := range hw.CF.Records(hw.CFZones[zoneName]) {
		if strings.TrimSuffix(rec.Name, ".") == late {
			t.Errorf("the former leader wrote %s %s to Cloudflare after it lost its lease", rec.Type, rec.Name)
		}
	}
	if n := calls() - before; n > 0 {
		t.Errorf("the former leader called Cloudflare %d times after it lost its lease", n)
	}

	// The download goes on after that, and ends whole when the backend ends it.
	select {
	case r := <-read:
		t.Fatalf("the download ended when the lease was lost: %q, %v", tail(r.rest), r.err)
	default:
	}
	select {
	case <-m.Done():
		t.Fatal("the manager exited with a download in flight")
	default:
	}
	close(release)
	select {
	case r := <-read:
		if r.err != nil || !strings.HasSuffix(string(r.rest), "end\n") {
			t.Fatalf("the download after the lease was lost: ends %q, %v; want its last line", tail(r.rest), r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the download did not end 10 s after the backend ended it")
	}
	select {
	case <-m.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the manager did not exit 10 s after the last request in flight ended")
	}
	if !strings.Contains(logs(), "lets what is in flight finish") {
		t.Errorf("the manager's log does not say why it lingers:\n%s", logs())
	}
}

func tail(b []byte) string {
	if len(b) > 40 {
		b = b[len(b)-40:]
	}
	return string(b)
}
