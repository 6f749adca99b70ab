package controllers_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	cfemulator "github.com/tenantroute/tenantroute-operator/providers/cloudflare/emulator"
	"github.com/tenantroute/tenantroute-operator/providers/connect"
	r53emulator "github.com/tenantroute/tenantroute-operator/providers/route53/emulator"
	"github.com/tenantroute/tenantroute-operator/providers/zonequeue"
	"github.com/tenantroute/tenantroute-operator/routes"
)

var (
	env *envtest.Environment
	cfg *rest.Config
	k8s client.Client
)

func TestMain(m *testing.M) {
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(logLevel())))
	testenv.Main(m, func(e *testenv.Env) { env, cfg, k8s = e.Environment, e.Config, e.Client })
}

// logLevel keeps the operator's logs to errors unless TEST_LOG=debug.
func logLevel() zapcore.Level {
	switch os.Getenv("TEST_LOG") {
	case "debug":
		return zapcore.DebugLevel
	case "info":
		return zapcore.InfoLevel
	}
	return zapcore.ErrorLevel + 1
}

const (
	zoneName      = "auth.example.com"
	cfToken       = "test-token"
	awsKeyID      = "AKIATEST"
	awsSecret     = "test-secret"
	awsEdgeTarget = "edge-aws.example.net"
)

// operator is one test's world: its own namespaces, provider emulators, EdgeProviders,
// Region and a manager that sees only them, so tests cannot disturb each other.
type operator struct {
	t               testing.TB
	id              string
	opNS, ns        string
	cf              *cfemulator.Emulator
	cfURL, cfZone   string
	r53             *r53emulator.Emulator
	r53URL, r53Zone string
	cfEdge, awsEdge string
	region          string
	// cfUp and awsUp switch the edges' health endpoints between 200 and 503.
	cfUp, awsUp *atomic.Bool
	// cfRefused, if set, is a record name whose batches Cloudflare refuses for their
	// content (a 400), as it refuses a record it finds invalid.
	cfRefused         atomic.Pointer[string]
	cfProbe, awsProbe string
	queue             zonequeue.Options
	zoneResync        time.Duration
	stopManager       func()
	// extraNS are more namespaces the manager sees, for tests across namespaces.
	extraNS []string
	// kv, if set, is the shared cache the operator keeps, synchronised every kvSync.
	kv     *routes.KV
	kvSync time.Duration
	// dns, if set, is the resolver custom domains are verified through.
	dns string
	// deletionTimeout, if set, replaces the default of 1 h.
	deletionTimeout time.Duration
	// domainInterval, if set, replaces the tests' custom-domain check interval of 500 ms.
	domainInterval time.Duration
	// failoverEvents, if set, replaces the default per-transition limit of per-route
	// failover events.
	failoverEvents int
	// certBook, if set, is read into status.certificates every certInterval.
	certBook     routes.CertBook
	certInterval time.Duration
	// laggingReads, if set, serves the operator every TenantRoute one read behind.
	laggingReads bool
	// routeWrites counts the operator's writes of TenantRoutes, their status excepted.
	routeWrites atomic.Int64
	// reconciles counts the TenantRoute reconciles that read their route.
	reconciles atomic.Int64
}

// routeWriteCounter counts the updates and patches of TenantRoutes (not of their
// status, which go through Status()), and the reconciles' reads of their route (the
// only reads of one TenantRoute without a deep copy).
type routeWriteCounter struct {
	client.Client
	n, reconciles *atomic.Int64
}

func (c routeWriteCounter) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	var o client.GetOptions
	o.ApplyOptions(opts)
	if _, ok := obj.(*v1.TenantRoute); ok && o.UnsafeDisableDeepCopy != nil && *o.UnsafeDisableDeepCopy {
		c.reconciles.Add(1)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c routeWriteCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if _, ok := obj.(*v1.TenantRoute); ok {
		c.n.Add(1)
	}
	return c.Client.Update(ctx, obj, opts...)
}

func (c routeWriteCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if _, ok := obj.(*v1.TenantRoute); ok {
		c.n.Add(1)
	}
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// laggingClient serves each TenantRoute as the previous read found it: an informer
// cache that has not yet seen the operator's last write, every time.
type laggingClient struct {
	client.Client
	mu   sync.Mutex
	last map[client.ObjectKey]*v1.TenantRoute
}

func (c *laggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	route, ok := obj.(*v1.TenantRoute)
	if !ok {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	if err := c.Client.Get(ctx, key, route, opts...); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fresh := route.DeepCopy()
	if previous, ok := c.last[key]; ok {
		*route = *previous.DeepCopy()
	}
	c.last[key] = fresh
	return nil
}

func newOperator(t testing.TB, id string) *operator {
	t.Helper()
	o := &operator{t: t, id: id, opNS: "op-" + id, ns: "t-" + id, cfEdge: "cf-" + id, awsEdge: "aws-" + id, region: "eu-" + id}
	o.cf = cfemulator.New(cfToken)
	cfSrv := httptest.NewServer(http.HandlerFunc(o.serveCloudflare))
	t.Cleanup(cfSrv.Close)
	o.cfURL, o.cfZone = cfSrv.URL+"/client/v4/", o.cf.AddZone(zoneName)
	o.cfUp, o.cfProbe = healthServer(t)
	o.awsUp, o.awsProbe = healthServer(t)
	o.r53 = r53emulator.New(awsKeyID, awsSecret)
	r53Srv := httptest.NewServer(o.r53)
	t.Cleanup(r53Srv.Close)
	o.r53URL, o.r53Zone = r53Srv.URL, o.r53.AddZone(zoneName)

	for _, ns := range []string{o.opNS, o.ns} {
		o.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	}
	o.create(o.cfSecret())
	o.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "aws-credentials", Namespace: o.opNS},
		StringData: map[string]string{connect.SecretKeyAccessKeyID: awsKeyID, connect.SecretKeySecretAccessKey: awsSecret}})
	o.create(&v1.Region{ObjectMeta: o.meta(o.region), Spec: v1.RegionSpec{Backends: []v1.Backend{{URL: "http://127.0.0.1:1"}}}})
	o.create(o.cloudflareEdge())
	o.create(&v1.EdgeProvider{ObjectMeta: o.meta(o.awsEdge), Spec: v1.EdgeProviderSpec{
		Zones:       []v1.Zone{{Name: zoneName}},
		Route53:     &v1.Route53Provider{Endpoint: o.r53URL, CredentialsSecretRef: &v1.SecretReference{Name: "aws-credentials"}},
		Edge:        v1.EdgeTarget{Target: awsEdgeTarget},
		HealthCheck: healthCheck(o.awsProbe),
	}})
	return o
}

// serveCloudflare is the emulator, refusing the batches that name o.cfRefused.
func (o *operator) serveCloudflare(w http.ResponseWriter, r *http.Request) {
	if name := o.cfRefused.Load(); name != nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/dns_records/batch") {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if bytes.Contains(body, []byte(`"`+*name+`"`)) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"success":false,"errors":[{"code":9039,"message":"Content for CNAME record is invalid."}],"messages":[],"result":null}`)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	o.cf.ServeHTTP(w, r)
}

func (o *operator) cfSecret() *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cloudflare-token", Namespace: o.opNS},
		StringData: map[string]string{"token": cfToken}}
}

func (o *operator) cloudflareEdge() *v1.EdgeProvider {
	return &v1.EdgeProvider{ObjectMeta: o.meta(o.cfEdge), Spec: v1.EdgeProviderSpec{
		Zones:       []v1.Zone{{Name: zoneName}},
		Cloudflare:  &v1.CloudflareProvider{APITokenSecretRef: v1.SecretKeyReference{Name: "cloudflare-token", Key: "token"}, BaseURL: o.cfURL},
		Edge:        v1.EdgeTarget{Target: "{{ .Hostname }}.cdn.cloudflare.net"},
		HealthCheck: healthCheck(o.cfProbe),
	}}
}

// healthCheck probes every second: failover within about 3 s of an edge going down,
// failback 2 s after it comes back.
func healthCheck(url string) v1.HealthCheck {
	return v1.HealthCheck{URL: url, Interval: metav1.Duration{Duration: time.Second},
		Timeout: metav1.Duration{Duration: 500 * time.Millisecond}, FailureThreshold: 3, SuccessThreshold: 2,
		FailbackHoldDown: metav1.Duration{Duration: 2 * time.Second}}
}

// healthServer is an edge's health endpoint; the switch starts on. Requests to
// /flapping answer up and down in turn, whatever the switch.
func healthServer(t testing.TB) (*atomic.Bool, string) {
	up := &atomic.Bool{}
	up.Store(true)
	var flips atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		healthy := up.Load()
		if r.URL.Path == "/flapping" {
			healthy = flips.Add(1)%2 == 0
		}
		if !healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	return up, srv.URL + "/healthz"
}

func (o *operator) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": o.id}}
}

func (o *operator) create(obj client.Object) {
	o.t.Helper()
	if err := k8s.Create(context.Background(), obj); err != nil {
		o.t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}

// start runs a manager with the operator's controllers, seeing only this test's objects.
func (o *operator) start() {
	o.t.Helper()
	sel := labels.SelectorFromSet(labels.Set{"test": o.id})
	namespaces := map[string]cache.Config{o.ns: {}, o.opNS: {}}
	for _, ns := range o.extraNS {
		namespaces[ns] = cache.Config{}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 testenv.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: namespaces,
			ByObject: map[client.Object]cache.ByObject{
				&v1.EdgeProvider{}: {Label: sel},
				&v1.Region{}:       {Label: sel},
				// As the manager stores them (cmd/).
				&v1.TenantRoute{}: {Transform: controllers.CompactRoutes},
			},
		},
		// Tests run several managers in one process.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient: func(config *rest.Config, options client.Options) (client.Client, error) {
			c, err := client.New(config, options)
			if err != nil {
				return nil, err
			}
			if o.laggingReads {
				c = &laggingClient{Client: c, last: map[client.ObjectKey]*v1.TenantRoute{}}
			}
			return routeWriteCounter{Client: c, n: &o.routeWrites, reconciles: &o.reconciles}, nil
		},
	})
	if err != nil {
		o.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var routeNamespaces []string
	for ns := range namespaces {
		routeNamespaces = append(routeNamespaces, ns)
	}
	if _, err := controllers.Setup(ctx, mgr, controllers.Options{Namespace: o.opNS, Instance: o.id, Queue: o.queue, ZoneResync: o.zoneResync,
		RouteNamespaces: routeNamespaces,
		RedisKV:         o.kv, KVSyncInterval: o.kvSync,
		DNSResolver: o.dns, DeletionTimeout: o.deletionTimeout, CustomDomainInterval: cmp.Or(o.domainInterval, 500*time.Millisecond), CustomDomainGrace: 4 * time.Second,
		FailoverEvents: o.failoverEvents, CertBook: o.certBook, CertStatusInterval: o.certInterval}); err != nil {
		o.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	o.stopManager = func() {
		cancel()
		if err := <-done; err != nil {
			o.t.Errorf("manager: %v", err)
		}
		o.stopManager = nil
	}
	o.t.Cleanup(func() {
		if o.stopManager != nil {
			o.stopManager()
		}
	})
}

func (o *operator) route(name string, hostnames ...string) *v1.TenantRoute {
	return &v1.TenantRoute{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: o.ns},
		Spec: v1.TenantRouteSpec{TenantID: name, Region: o.region, Hostnames: hostnames,
			Edges: []string{o.cfEdge, o.awsEdge}, TTL: 60},
	}
}

// cfRecords maps name -> "TYPE content" of every Cloudflare record, failing on a
// duplicate name+type+content.
func (o *operator) cfRecords() map[string][]string {
	out := map[string][]string{}
	for _, r := range o.cf.Records(o.cfZone) {
		out[r.Name] = append(out[r.Name], r.Type+" "+r.Content)
	}
	return out
}

func (o *operator) r53Records() map[string][]string {
	out := map[string][]string{}
	for _, rs := range o.r53.RecordSets(o.r53Zone) {
		name := strings.TrimSuffix(rs.Name, ".")
		out[name] = append(out[name], rs.Type+" "+strings.Join(rs.Values, ","))
	}
	return out
}

func (o *operator) get(name string) *v1.TenantRoute {
	tr := &v1.TenantRoute{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: name}, tr); err != nil {
		o.t.Fatalf("getting TenantRoute %s: %v", name, err)
	}
	return tr
}

// edit re-reads obj, applies change and updates it, retrying on conflicts: the
// running manager writes status to the same objects, and every status write
// moves the resourceVersion a test read a moment before.
func edit[T client.Object](t testing.TB, obj T, change func(T)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		change(obj)
		return k8s.Update(context.Background(), obj)
	})
	if err != nil {
		t.Fatalf("updating %s: %v", client.ObjectKeyFromObject(obj), err)
	}
}

// eventually retries check until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func condition(conds []metav1.Condition, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(conds, typ); c != nil {
		return *c
	}
	return metav1.Condition{Type: typ, Status: "absent"}
}

func expectCondition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) error {
	c := condition(conds, typ)
	if c.Status != status || (reason != "" && c.Reason != reason) {
		return fmt.Errorf("condition %s is %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
	return nil
}

// eventsFor lists the events.k8s.io Events regarding an object.
func eventsFor(obj client.Object) []eventsv1.Event {
	var list eventsv1.EventList
	ns := obj.GetNamespace()
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		return nil
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Name == obj.GetName() && e.Regarding.Kind == obj.GetObjectKind().GroupVersionKind().Kind {
			out = append(out, e)
		}
	}
	return out
}

func expectEvent(obj client.Object, kind, reason, contains string) error {
	obj.GetObjectKind().SetGroupVersionKind(v1.GroupVersion.WithKind(kind))
	var seen []string
	for _, e := range eventsFor(obj) {
		if e.Reason == reason && strings.Contains(e.Note, contains) {
			return nil
		}
		seen = append(seen, e.Reason+": "+e.Note)
	}
	return fmt.Errorf("no %s event mentioning %q for %s; events: %q", reason, contains, obj.GetName(), seen)
}
