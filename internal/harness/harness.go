// Package harness runs the operator the way it runs in production, for benchmarks and
// fault runs: a real kube-apiserver and etcd (envtest), the manager binary as its own
// process, both provider emulators with their real rate limits, an edge health
// endpoint per EdgeProvider, and the objects the operator needs.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	cfemulator "github.com/tenantroute/tenantroute-operator/providers/cloudflare/emulator"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
	r53emulator "github.com/tenantroute/tenantroute-operator/providers/route53/emulator"
)

// Names of the objects World creates.
const (
	OperatorNamespace = "tenantroute-system"
	RoutesNamespace   = "tenants"
	Region            = "eu"
	CloudflareEdge    = "cloudflare"
	AWSEdge           = "aws"
	AWSEdgeTarget     = "edge-aws.example.net"
	// FailbackHoldDown is both edges' failback hold-down.
	FailbackHoldDown = 30 * time.Second

	cfToken = "harness-token"
	awsKey  = "AKIAHARNESS"
	awsSec  = "harness-secret"
)

// Secrets are the credentials the world gives the manager: none may appear in its logs.
func Secrets() []string { return []string{cfToken, awsSec} }

// World is the API server, the emulators, the edges' health endpoints and the objects
// of one run.
type World struct {
	Dir        string
	Env        *envtest.Environment
	Config     *rest.Config
	Client     client.Client
	Kubeconfig string // an admin kubeconfig for the manager
	CF         *cfemulator.Emulator
	R53        *r53emulator.Emulator
	// CFZones and R53Zones map each zone's name to its id at the emulator.
	CFZones, R53Zones map[string]string
	// CFUp and AWSUp switch the edges' health endpoints (both start up).
	CFUp, AWSUp *atomic.Bool
	servers     []*httptest.Server

	mu        sync.Mutex
	restarted map[string]*child // control-plane processes started again, by name
	stopped   bool
}

// Start brings up a world over the zones: both EdgeProviders serve every zone, with
// the API's default health checks (2 s interval, 3 failures).
func Start(ctx context.Context, dir string, zones []string) (*World, error) {
	w := &World{Dir: dir, CFZones: map[string]string{}, R53Zones: map[string]string{}, CFUp: &atomic.Bool{}, AWSUp: &atomic.Bool{},
		restarted: map[string]*child{}}
	w.CFUp.Store(true)
	w.AWSUp.Store(true)
	env, cfg, err := testenv.Start()
	if err != nil {
		return nil, err
	}
	w.Env, w.Config = env, cfg
	if w.Client, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		w.Stop()
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: "manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		w.Stop()
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		w.Stop()
		return nil, err
	}
	w.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(w.Kubeconfig, kc, 0o600); err != nil {
		w.Stop()
		return nil, err
	}
	if err := w.setUp(ctx, zones); err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

// Stop stops the servers and the API server.
func (w *World) Stop() {
	for _, s := range w.servers {
		s.Close()
	}
	w.stopRestarted()
	if w.Env != nil {
		_ = w.Env.Stop()
	}
}

// SetOutage makes both emulators answer 503 (on) or answer again (off).
func (w *World) SetOutage(on bool) {
	w.CF.SetFaults(emulatorkit.Faults{Outage: on})
	w.R53.SetFaults(emulatorkit.Faults{Outage: on})
}

func (w *World) setUp(ctx context.Context, zones []string) error {
	w.CF = cfemulator.New(cfToken)
	w.R53 = r53emulator.New(awsKey, awsSec)
	var specZones []v1.Zone
	for _, z := range zones {
		w.CFZones[z] = w.CF.AddZone(z)
		w.R53Zones[z] = w.R53.AddZone(z)
		specZones = append(specZones, v1.Zone{Name: z})
	}
	cfURL := w.serve(w.CF)
	r53URL := w.serve(w.R53)
	health := func(up *atomic.Bool) string {
		return w.serve(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			if !up.Load() {
				rw.WriteHeader(http.StatusServiceUnavailable)
			}
		})) + "/healthz"
	}
	check := func(url string) v1.HealthCheck {
		return v1.HealthCheck{URL: url, Interval: metav1.Duration{Duration: 2 * time.Second},
			Timeout: metav1.Duration{Duration: time.Second}, FailureThreshold: 3, SuccessThreshold: 2,
			FailbackHoldDown: metav1.Duration{Duration: FailbackHoldDown}}
	}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: RoutesNamespace}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloudflare-token", Namespace: OperatorNamespace}, StringData: map[string]string{"token": cfToken}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "aws-credentials", Namespace: OperatorNamespace},
			StringData: map[string]string{"access-key-id": awsKey, "secret-access-key": awsSec}},
		&v1.Region{ObjectMeta: metav1.ObjectMeta{Name: Region}, Spec: v1.RegionSpec{Backends: []v1.Backend{{URL: "http://127.0.0.1:1"}}}},
		&v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: CloudflareEdge}, Spec: v1.EdgeProviderSpec{
			Zones:       specZones,
			Cloudflare:  &v1.CloudflareProvider{APITokenSecretRef: v1.SecretKeyReference{Name: "cloudflare-token", Key: "token"}, BaseURL: cfURL + "/client/v4/"},
			Edge:        v1.EdgeTarget{Target: "{{ .Hostname }}.cdn.cloudflare.net"},
			HealthCheck: check(health(w.CFUp))}},
		&v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: AWSEdge}, Spec: v1.EdgeProviderSpec{
			Zones:       specZones,
			Route53:     &v1.Route53Provider{Endpoint: r53URL, CredentialsSecretRef: &v1.SecretReference{Name: "aws-credentials"}},
			Edge:        v1.EdgeTarget{Target: AWSEdgeTarget},
			HealthCheck: check(health(w.AWSUp))}},
	}
	for _, o := range objs {
		if err := w.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

// InstallFinalizerPolicy installs config/policy/route_finalizer.yaml, as config/default
// does, and returns once the API server applies it. Without it the operator adds each
// finalizer itself.
func (w *World) InstallFinalizerPolicy(ctx context.Context) error {
	if err := testenv.Apply(ctx, w.Client, testenv.FinalizerPolicy); err != nil {
		return err
	}
	probe := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "policy-probe", Namespace: RoutesNamespace}, Spec: v1.TenantRouteSpec{
		TenantID: "policy-probe", Region: Region, Hostnames: []string{"policy-probe.example.com"}, Edges: []string{CloudflareEdge}, TTL: 60}}
	return testenv.WaitForFinalizerPolicy(ctx, w.Client, probe, true)
}

// serve serves h on a local port until Stop.
func (w *World) serve(h http.Handler) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	srv.Start()
	w.servers = append(w.servers, srv)
	return srv.URL
}

// CreateRoutes creates a TenantRoute per name, with the hostname host(name), listing
// both edges (Cloudflare preferred); names that exist are left as they are.
func (w *World) CreateRoutes(ctx context.Context, names []string, host func(name string) string) error {
	return Parallel(names, func(n string) error {
		tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: RoutesNamespace}, Spec: v1.TenantRouteSpec{
			TenantID: n, Region: Region, Hostnames: []string{host(n)}, Edges: []string{CloudflareEdge, AWSEdge}, TTL: 60}}
		if err := w.Client.Create(ctx, tr); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating TenantRoute %s: %w", n, err)
		}
		return nil
	})
}

// DeleteRoutes deletes the TenantRoutes; names that do not exist are skipped.
func (w *World) DeleteRoutes(ctx context.Context, names []string) error {
	return Parallel(names, func(n string) error {
		tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: RoutesNamespace}}
		if err := w.Client.Delete(ctx, tr); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting TenantRoute %s: %w", n, err)
		}
		return nil
	})
}

// Parallel runs f for every name, 32 at a time, and joins the errors.
func Parallel(names []string, f func(string) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	sem := make(chan struct{}, 32)
	for i, n := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Manager runs the manager binary against a World, one process at a time, each run
// logging to its own file in Dir.
type Manager struct {
	Binary, Kubeconfig, Dir string
	// Env is added to the process's environment.
	Env []string

	runs int
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
}

// Start starts the manager with the operator's namespace, no proxy, no lookup
// endpoint, no DNS resolver and no metrics endpoint, unless args say otherwise.
func (m *Manager) Start(args ...string) error {
	m.runs++
	logf, err := os.Create(filepath.Join(m.Dir, fmt.Sprintf("manager-%02d.log", m.runs)))
	if err != nil {
		return err
	}
	cmd := exec.Command(m.Binary, "--namespace", OperatorNamespace, "--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:0", "--proxy-bind-address", "0", "--lookup-bind-address", "0",
		"--dns-resolver", "")
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = append(append(os.Environ(), "KUBECONFIG="+m.Kubeconfig), m.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("starting the manager: %w", err)
	}
	done := make(chan struct{})
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	return nil
}

// Done is closed when the manager last started exits (nil before a start).
func (m *Manager) Done() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.done
}

// PID is the running manager's process id, 0 when none runs.
func (m *Manager) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Stop sends sig to the running manager and waits for it to exit.
func (m *Manager) Stop(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	<-done
}
