package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
	cfemulator "github.com/tenantroute/tenantroute-operator/providers/cloudflare/emulator"
	"github.com/tenantroute/tenantroute-operator/providers/emulatorkit"
)

// The records a route's hostname gets while Cloudflare (the first edge) is active.
func cfActive(hostname string) string { return "CNAME " + hostname + ".cdn.cloudflare.net" }

func r53Active(hostname string) string { return "CNAME " + hostname + ".cdn.cloudflare.net." }

// The MutatingAdmissionPolicy shipped in config/policy gives a new TenantRoute the
// operator's finalizer when it is created, beside the route's own finalizers, so the
// operator writes nothing of a new route but its status: its records do not wait
// behind a write of the route. Deletion still goes through the finalizer.
func TestNewRoutesArriveWithTheFinalizer(t *testing.T) {
	ctx := context.Background()
	o := newOperator(t, "admitted")
	installFinalizerPolicy(t, o.route("probe", "probe.auth.example.com"))
	o.start()
	audited := o.route("acme", "acme.auth.example.com")
	audited.Finalizers = []string{"example.com/audit"}
	o.create(audited)
	plain := o.route("globex", "globex.auth.example.com")
	o.create(plain)
	if want := []string{"example.com/audit", v1.Finalizer}; !slices.Equal(audited.Finalizers, want) {
		t.Errorf("created with finalizers %v, want %v", audited.Finalizers, want)
	}
	if want := []string{v1.Finalizer}; !slices.Equal(plain.Finalizers, want) {
		t.Errorf("created with finalizers %v, want %v", plain.Finalizers, want)
	}
	// A route that already names the finalizer, alone or among others, keeps its list
	// as it is: no duplicate.
	for _, given := range [][]string{{v1.Finalizer}, {"example.com/audit", v1.Finalizer, "example.com/backup"}} {
		tr := o.route("given", "given.auth.example.com")
		tr.Finalizers = slices.Clone(given)
		if err := k8s.Create(ctx, tr, client.DryRunAll); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(tr.Finalizers, given) {
			t.Errorf("created with finalizers %v, admitted with %v", given, tr.Finalizers)
		}
	}
	eventually(t, 20*time.Second, func() error {
		for _, name := range []string{"acme", "globex"} {
			if err := expectCondition(o.get(name).Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonReady); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
	if n := o.routeWrites.Load(); n != 0 {
		t.Errorf("the operator wrote TenantRoutes %d times besides their status", n)
	}

	if err := k8s.Delete(ctx, plain); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(plain), &v1.TenantRoute{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("globex not gone yet: %v", err)
		}
		if cf, r53 := o.cfRecords(), o.r53Records(); len(cf["globex.auth.example.com"])+len(r53["globex.auth.example.com"]) > 0 {
			return fmt.Errorf("records left: cloudflare %v, route53 %v", cf, r53)
		}
		return nil
	})
	edit(t, o.get("acme"), func(tr *v1.TenantRoute) {
		tr.Finalizers = slices.DeleteFunc(tr.Finalizers, func(f string) bool { return f == "example.com/audit" })
	})
}

// installFinalizerPolicy installs config/policy/route_finalizer.yaml until the test
// ends, returning once the API server applies it to probe.
func installFinalizerPolicy(t *testing.T, probe *v1.TenantRoute) {
	t.Helper()
	ctx := context.Background()
	t.Cleanup(func() {
		objs, err := testenv.Objects(testenv.FinalizerPolicy)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range objs {
			if err := k8s.Delete(ctx, u); err != nil {
				t.Errorf("deleting %s %s: %v", u.GetKind(), u.GetName(), err)
			}
		}
		if err := testenv.WaitForFinalizerPolicy(ctx, k8s, probe, false); err != nil {
			t.Error(err)
		}
	})
	if err := testenv.Apply(ctx, k8s, testenv.FinalizerPolicy); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitForFinalizerPolicy(ctx, k8s, probe, true); err != nil {
		t.Fatal(err)
	}
}

func TestRecordsFollowTheTenantRoute(t *testing.T) {
	o := newOperator(t, "lifecycle")
	o.start()
	ctx := context.Background()
	applied := o.route("acme", "acme.auth.example.com", "login.acme.com")
	// As kubectl apply leaves it; the cache drops it (CompactRoutes), the server keeps it.
	applied.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"kind":"TenantRoute"}`}
	o.create(applied)

	eventually(t, 20*time.Second, func() error {
		cf, r53 := o.cfRecords(), o.r53Records()
		if !slices.Equal(cf["acme.auth.example.com"], []string{cfActive("acme.auth.example.com")}) {
			return fmt.Errorf("cloudflare: %v", cf)
		}
		if !slices.Equal(r53["acme.auth.example.com"], []string{r53Active("acme.auth.example.com")}) {
			return fmt.Errorf("route53: %v", r53)
		}
		if _, ok := r53["_tenantroute-cname.acme.auth.example.com"]; !ok {
			return fmt.Errorf("route53 has no ownership registry record: %v", r53)
		}
		if _, ok := cf["login.acme.com"]; ok {
			return fmt.Errorf("a custom domain got a record: %v", cf)
		}
		return expectCondition(o.get("acme").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, v1.ReasonReady)
	})
	tr := o.get("acme")
	if !slices.Contains(tr.Finalizers, v1.Finalizer) || tr.Annotations["kubectl.kubernetes.io/last-applied-configuration"] == "" {
		t.Errorf("the operator's finalizer write lost what its cache does not hold: finalizers %v, annotations %v", tr.Finalizers, tr.Annotations)
	}
	if tr.Status.ActiveEdge != o.cfEdge || tr.Status.ObservedGeneration != tr.Generation {
		t.Errorf("status: active %q, observedGeneration %d of %d", tr.Status.ActiveEdge, tr.Status.ObservedGeneration, tr.Generation)
	}
	if cd := tr.Status.CustomDomains; len(cd) != 1 || cd[0].Hostname != "login.acme.com" || cd[0].CNAMETarget != "acme.auth.example.com" ||
		cd[0].ChallengeName != "_tenantroute-challenge.login.acme.com" || cd[0].ChallengeValue != controllers.ChallengeValue(tr.UID, "login.acme.com") {
		t.Errorf("custom domains: %+v", tr.Status.CustomDomains)
	}
	for _, p := range tr.Status.Providers {
		if p.State != v1.RecordsSynced || p.Records != 1 {
			t.Errorf("provider status %+v", p)
		}
	}
	for _, r := range o.cf.Records(o.cfZone) {
		if r.Name == "acme.auth.example.com" && r.Comment != "tenantroute:lifecycle/t-lifecycle/acme" {
			t.Errorf("cloudflare record carries comment %q", r.Comment)
		}
	}
	eventually(t, 5*time.Second, func() error { return expectEvent(tr, "TenantRoute", "RecordsChanged", "created 1") })
	if n := metricValue(t, "tenantroute_records_managed", map[string]string{"provider": o.cfEdge}); n != 1 {
		t.Errorf("tenantroute_records_managed{provider=%s} = %v, want 1", o.cfEdge, n)
	}
	if n := metricValue(t, "tenantroute_provider_api_requests_total", map[string]string{"provider": o.awsEdge, "operation": "ApplyChanges", "code": "200"}); n < 1 {
		t.Errorf("no ApplyChanges request counted for %s", o.awsEdge)
	}

	// Edit the hostnames: the old record goes, the new one comes.
	edit(t, tr, func(tr *v1.TenantRoute) { tr.Spec.Hostnames = []string{"beta.auth.example.com"} })
	eventually(t, 20*time.Second, func() error {
		cf, r53 := o.cfRecords(), o.r53Records()
		if _, old := cf["acme.auth.example.com"]; old || !slices.Equal(cf["beta.auth.example.com"], []string{cfActive("beta.auth.example.com")}) {
			return fmt.Errorf("cloudflare: %v", cf)
		}
		if _, old := r53["acme.auth.example.com"]; old || !slices.Equal(r53["beta.auth.example.com"], []string{r53Active("beta.auth.example.com")}) {
			return fmt.Errorf("route53: %v", r53)
		}
		if _, old := r53["_tenantroute-cname.acme.auth.example.com"]; old {
			return fmt.Errorf("route53 kept the old registry record: %v", r53)
		}
		return nil
	})

	// Delete: every owned record goes and the object is released.
	if err := k8s.Delete(ctx, tr); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(tr), &v1.TenantRoute{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("TenantRoute still there (%v)", err)
		}
		if len(o.cf.Records(o.cfZone)) != 0 {
			return fmt.Errorf("cloudflare: %v", o.cfRecords())
		}
		if n := len(o.r53.RecordSets(o.r53Zone)); n != 2 { // SOA and NS
			return fmt.Errorf("route53: %v", o.r53Records())
		}
		return nil
	})
}

func TestOneProviderDownTheOtherConverges(t *testing.T) {
	o := newOperator(t, "outage")
	o.start()
	eventually(t, 10*time.Second, func() error {
		ep := &v1.EdgeProvider{}
		_ = k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, ep)
		return expectCondition(ep.Status.Conditions, v1.ConditionZonesReady, metav1.ConditionTrue, "")
	})
	o.cf.SetFaults(emulatorkit.Faults{Outage: true})
	o.create(o.route("acme", "acme.auth.example.com"))

	eventually(t, 20*time.Second, func() error {
		if !slices.Equal(o.r53Records()["acme.auth.example.com"], []string{r53Active("acme.auth.example.com")}) {
			return fmt.Errorf("route53: %v", o.r53Records())
		}
		tr := o.get("acme")
		if err := expectCondition(tr.Status.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonProviderError); err != nil {
			return err
		}
		if msg := condition(tr.Status.Conditions, v1.ConditionReady).Message; !strings.Contains(msg, o.cfEdge) {
			return fmt.Errorf("Ready does not name %s: %s", o.cfEdge, msg)
		}
		for _, p := range tr.Status.Providers {
			want := v1.RecordsSynced
			if p.Edge == o.cfEdge {
				want = v1.RecordsError
			}
			if p.State != want {
				return fmt.Errorf("provider %s is %s, want %s", p.Edge, p.State, want)
			}
		}
		return expectEvent(tr, "TenantRoute", v1.ReasonProviderError, o.cfEdge)
	})
	if len(o.cf.Records(o.cfZone)) != 0 {
		t.Fatalf("records written during an outage: %v", o.cfRecords())
	}

	o.cf.SetFaults(emulatorkit.Faults{})
	eventually(t, 30*time.Second, func() error {
		if !slices.Equal(o.cfRecords()["acme.auth.example.com"], []string{cfActive("acme.auth.example.com")}) {
			return fmt.Errorf("cloudflare: %v", o.cfRecords())
		}
		return expectCondition(o.get("acme").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})

	// Deleting while Cloudflare is down: the finalizer holds the route until its
	// Cloudflare record is gone too.
	o.cf.SetFaults(emulatorkit.Faults{Outage: true})
	tr := o.get("acme")
	if err := k8s.Delete(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		if _, ok := o.r53Records()["acme.auth.example.com"]; ok {
			return fmt.Errorf("route53 record not deleted yet")
		}
		held := o.get("acme")
		if err := expectCondition(held.Status.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonDeletionBlocked); err != nil {
			return err
		}
		return expectEvent(held, "TenantRoute", v1.ReasonDeletionBlocked, o.cfEdge)
	})
	if _, ok := o.cfRecords()["acme.auth.example.com"]; !ok {
		t.Fatal("the cloudflare record vanished during the outage")
	}
	o.cf.SetFaults(emulatorkit.Faults{})
	eventually(t, 60*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(tr), &v1.TenantRoute{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("TenantRoute still held: %v", err)
		}
		if len(o.cf.Records(o.cfZone)) != 0 {
			return fmt.Errorf("cloudflare: %v", o.cfRecords())
		}
		return nil
	})
}

func TestConflicts(t *testing.T) {
	o := newOperator(t, "conflicts")
	if _, err := o.cf.AddRecord(o.cfZone, cfemulator.Record{Name: "taken.auth.example.com", Type: "A", Content: "203.0.113.5", TTL: 300}); err != nil {
		t.Fatal(err)
	}
	foreignBefore := o.cf.Records(o.cfZone)
	o.start()
	ctx := context.Background()
	o.create(o.route("first", "shared.auth.example.com"))
	eventually(t, 20*time.Second, func() error {
		return expectCondition(o.get("first").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
	o.create(o.route("second", "shared.auth.example.com", "second.auth.example.com"))
	o.create(o.route("third", "taken.auth.example.com"))

	eventually(t, 20*time.Second, func() error {
		second := o.get("second")
		if err := expectCondition(second.Status.Conditions, v1.ConditionConflict, metav1.ConditionTrue, v1.ReasonConflict); err != nil {
			return err
		}
		if msg := condition(second.Status.Conditions, v1.ConditionConflict).Message; !strings.Contains(msg, "shared.auth.example.com: granted to TenantRoute first") {
			return fmt.Errorf("conflict message: %s", msg)
		}
		if !slices.Equal(o.cfRecords()["second.auth.example.com"], []string{cfActive("second.auth.example.com")}) {
			return fmt.Errorf("the uncontested hostname of the second route: %v", o.cfRecords())
		}
		third := o.get("third")
		if msg := condition(third.Status.Conditions, v1.ConditionConflict).Message; !strings.Contains(msg, "taken.auth.example.com is held by a record the operator does not own in "+o.cfEdge) {
			return fmt.Errorf("third route conflict: %s", msg)
		}
		return expectEvent(second, "TenantRoute", v1.ReasonConflict, "shared.auth.example.com")
	})
	// The foreign record is untouched; Route53 had none, so the third route is there.
	if after := o.cf.Records(o.cfZone); !slices.Contains(after, foreignBefore[0]) {
		t.Errorf("foreign record changed: before %+v, after %+v", foreignBefore, after)
	}
	if !slices.Equal(o.r53Records()["taken.auth.example.com"], []string{r53Active("taken.auth.example.com")}) {
		t.Errorf("route53: %v", o.r53Records())
	}
	// The route granted the name first keeps it: its record still carries its owner.
	for _, r := range o.cf.Records(o.cfZone) {
		if r.Name == "shared.auth.example.com" && r.Comment != "tenantroute:conflicts/t-conflicts/first" {
			t.Errorf("shared record owned by %q", r.Comment)
		}
	}

	// Once the holder is gone, the next claimant is granted the name.
	if err := k8s.Delete(ctx, o.get("first")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		second := o.get("second")
		if err := expectCondition(second.Status.Conditions, v1.ConditionConflict, metav1.ConditionFalse, ""); err != nil {
			return err
		}
		for _, r := range o.cf.Records(o.cfZone) {
			if r.Name == "shared.auth.example.com" && r.Comment == "tenantroute:conflicts/t-conflicts/second" {
				return nil
			}
		}
		return fmt.Errorf("shared record not taken over: %v", o.cf.Records(o.cfZone))
	})
}

func TestMissingCredentialSecret(t *testing.T) {
	o := newOperator(t, "secret")
	if err := k8s.Delete(context.Background(), o.cfSecret()); err != nil {
		t.Fatal(err)
	}
	o.start()
	ep := &v1.EdgeProvider{}
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, ep); err != nil {
			return err
		}
		if err := expectCondition(ep.Status.Conditions, v1.ConditionCredentialsReady, metav1.ConditionFalse, v1.ReasonSecretNotFound); err != nil {
			return err
		}
		if msg := condition(ep.Status.Conditions, v1.ConditionCredentialsReady).Message; !strings.Contains(msg, "op-secret/cloudflare-token") {
			return fmt.Errorf("condition does not name the secret: %s", msg)
		}
		return expectEvent(ep, "EdgeProvider", v1.ReasonSecretNotFound, "cloudflare-token")
	})
	if ep.Status.Type != controllers.TypeCloudflare {
		t.Errorf("status.type %q", ep.Status.Type)
	}

	o.create(o.cfSecret())
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, ep); err != nil {
			return err
		}
		if err := expectCondition(ep.Status.Conditions, v1.ConditionCredentialsReady, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		if err := expectCondition(ep.Status.Conditions, v1.ConditionZonesReady, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		return expectEvent(ep, "EdgeProvider", v1.ReasonCredentialsAccepted, "accepted")
	})
	if len(ep.Status.Zones) != 1 || ep.Status.Zones[0].ID != o.cfZone {
		t.Errorf("resolved zones %+v, want %s", ep.Status.Zones, o.cfZone)
	}
	for _, e := range eventsFor(ep) {
		if strings.Contains(e.Note, cfToken) {
			t.Errorf("an event shows the token: %s", e.Note)
		}
	}
}

func TestWrongTokenAndMissingZone(t *testing.T) {
	o := newOperator(t, "badcreds")
	secret := o.cfSecret()
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	secret.Data = map[string][]byte{"token": []byte("revoked")}
	if err := k8s.Update(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	aws := &v1.EdgeProvider{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.awsEdge}, aws); err != nil {
		t.Fatal(err)
	}
	aws.Spec.Zones = append(aws.Spec.Zones, v1.Zone{Name: "missing.example.org"})
	if err := k8s.Update(context.Background(), aws); err != nil {
		t.Fatal(err)
	}
	o.start()
	eventually(t, 10*time.Second, func() error {
		cf := &v1.EdgeProvider{}
		_ = k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, cf)
		if err := expectCondition(cf.Status.Conditions, v1.ConditionCredentialsReady, metav1.ConditionFalse, v1.ReasonCredentialsRejected); err != nil {
			return err
		}
		_ = k8s.Get(context.Background(), client.ObjectKey{Name: o.awsEdge}, aws)
		if err := expectCondition(aws.Status.Conditions, v1.ConditionZonesReady, metav1.ConditionFalse, v1.ReasonZoneNotFound); err != nil {
			return err
		}
		if msg := condition(aws.Status.Conditions, v1.ConditionZonesReady).Message; !strings.Contains(msg, "missing.example.org") {
			return fmt.Errorf("ZonesReady does not name the zone: %s", msg)
		}
		return nil
	})
}

func TestOrphanDeletionPolicy(t *testing.T) {
	o := newOperator(t, "orphan")
	// Every zone resync looks for orphans: records still marked as the deleted route's
	// were deleted by the first one after it.
	o.zoneResync = 3 * time.Second
	o.start()
	const host = "acme.auth.example.com"
	tr := o.route("acme", host)
	tr.Annotations = map[string]string{v1.DeletionPolicyAnnotation: v1.DeletionPolicyOrphan}
	o.create(tr)
	eventually(t, 20*time.Second, func() error {
		return expectCondition(o.get("acme").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
	cfBefore, r53Before := o.cfRecords()[host], o.r53Records()[host]
	if err := k8s.Delete(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(tr), &v1.TenantRoute{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	// At least two resyncs, each with a sweep.
	time.Sleep(7 * time.Second)
	if got := o.cfRecords()[host]; !slices.Equal(got, cfBefore) {
		t.Errorf("Cloudflare record after the Orphan deletion and two sweeps: %v, want %v", got, cfBefore)
	}
	if got := o.r53Records()[host]; !slices.Equal(got, r53Before) {
		t.Errorf("Route53 record after the Orphan deletion and two sweeps: %v, want %v", got, r53Before)
	}
	// Left without this installation's marker: nothing of it changes them again.
	for _, r := range o.cf.Records(o.cfZone) {
		if r.Name == host && r.Comment != "" {
			t.Errorf("Cloudflare record %s %s still marked %q", r.Type, r.Content, r.Comment)
		}
	}
	for name, sets := range o.r53Records() {
		if strings.HasSuffix(name, "."+host) {
			t.Errorf("Route53 still holds the ownership record %s: %v", name, sets)
		}
	}
}

// metricValue reads one series of the operator's metrics registry (0 when absent).
func metricValue(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue series
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// Deleting an EdgeProvider deletes the records the operator wrote in its zones before
// it goes (a record left pointing at a decommissioned edge can be taken over), leaves
// records it does not own, and moves the routes to the other edge; its TenantRoutes
// report it, a route pinned to it (Manual) too. With the Orphan policy, the records
// stay.
func TestDeletingAnEdgeProviderDeletesItsRecords(t *testing.T) {
	o := newOperator(t, "epdelete")
	if _, err := o.cf.AddRecord(o.cfZone, cfemulator.Record{Name: "foreign.auth.example.com", Type: "A", Content: "203.0.113.9", TTL: 300}); err != nil {
		t.Fatal(err)
	}
	o.start()
	hosts := []string{"epd-a.auth.example.com", "epd-b.auth.example.com", "epd-c.auth.example.com"}
	o.create(o.route("a", hosts[0]))
	o.create(o.route("b", hosts[1]))
	// Pinned to the edge that goes: its records must move too, not stay pointing at a
	// decommissioned edge.
	pinned := o.route("c", hosts[2])
	pinned.Spec.Failover = &v1.FailoverPolicy{Mode: v1.FailoverManual, PinnedEdge: o.cfEdge}
	o.create(pinned)
	o.waitReady("a", "b", "c")
	if err := o.pointAt(onCloudflare, hosts...); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cf := &v1.EdgeProvider{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: o.cfEdge}, cf); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(ctx, cf); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: o.cfEdge}, &v1.EdgeProvider{}); err == nil {
			return fmt.Errorf("the EdgeProvider is still there")
		}
		if got := o.cfRecords(); len(got) != 1 || len(got["foreign.auth.example.com"]) != 1 {
			return fmt.Errorf("cloudflare holds %v, want only the foreign record", got)
		}
		for _, h := range hosts {
			if got := o.r53Records()[h]; !slices.Equal(got, []string{awsActive + "."}) {
				return fmt.Errorf("route53 %s: %v, want the AWS edge", h, got)
			}
		}
		c := condition(o.get("a").Status.Conditions, v1.ConditionReady)
		if c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, o.cfEdge+" not found or being deleted") {
			return fmt.Errorf("route a does not report the EdgeProvider's deletion: %+v", c)
		}
		return nil
	})

	aws := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.awsEdge}}
	edit(t, aws, func(aws *v1.EdgeProvider) {
		aws.Annotations = map[string]string{v1.DeletionPolicyAnnotation: v1.DeletionPolicyOrphan}
	})
	if err := k8s.Delete(ctx, aws); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKey{Name: o.awsEdge}, &v1.EdgeProvider{}); err == nil {
			return fmt.Errorf("the EdgeProvider with the Orphan policy is still there")
		}
		return nil
	})
	for _, h := range hosts {
		if got := o.r53Records()[h]; len(got) != 1 {
			t.Errorf("route53 %s after an Orphan deletion: %v", h, got)
		}
	}
}

// A TenantRoute whose Cloudflare zone was removed from the account cannot have its
// records there deleted: its deletion waits, says why, and completes after the
// deletion timeout with a Warning event naming what may be left; the reachable
// provider's records are deleted.
func TestDeletionCompletesAfterTheTimeoutWhenAZoneIsGone(t *testing.T) {
	o := newOperator(t, "vanished")
	o.deletionTimeout = 4 * time.Second
	o.start()
	const host = "gone.auth.example.com"
	o.create(o.route("r", host))
	o.waitReady("r")
	o.cf.RemoveZone(o.cfZone)
	tr := o.get("r")
	if err := k8s.Delete(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Second, func() error {
		tr = o.get("r")
		return expectCondition(tr.Status.Conditions, v1.ConditionReady, metav1.ConditionFalse, v1.ReasonDeletionBlocked)
	})
	before := metricValue(t, "tenantroute_deletions_abandoned_total", map[string]string{"edge": o.cfEdge})
	eventually(t, 15*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(tr), &v1.TenantRoute{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there (%v)", err)
		}
		return nil
	})
	if waited := time.Since(tr.DeletionTimestamp.Time); waited < 4*time.Second-time.Second {
		t.Errorf("deleted after %s, before the timeout", waited)
	}
	if err := expectEvent(tr, "TenantRoute", v1.ReasonDeletionAbandoned, o.cfEdge+" zone "+zoneName); err != nil {
		t.Error(err)
	}
	if got := metricValue(t, "tenantroute_deletions_abandoned_total", map[string]string{"edge": o.cfEdge}); got != before+1 {
		t.Errorf("tenantroute_deletions_abandoned_total{edge=%s} went from %v to %v", o.cfEdge, before, got)
	}
	if got := o.r53Records()[host]; len(got) != 0 {
		t.Errorf("the reachable provider's record was left: %v", got)
	}
}

// An EdgeProvider whose zone is gone at the provider (or whose credentials were
// revoked) cannot have its records deleted, and no retry will change that: its
// deletion says so once, with the way out, rather than retrying in silence forever.
func TestAnEdgeProviderWhoseZoneIsGoneSaysWhyItCannotBeDeleted(t *testing.T) {
	o := newOperator(t, "epzonegone")
	o.zoneResync = 2 * time.Second // the cached listing is dropped at each resync
	o.start()
	o.create(o.route("r", "zg.auth.example.com"))
	o.waitReady("r")
	o.cf.RemoveZone(o.cfZone)
	time.Sleep(3 * time.Second) // a resync: the zone is read from the provider again
	ep := &v1.EdgeProvider{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, ep); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Delete(context.Background(), ep); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, func() error {
		return expectEvent(ep, "EdgeProvider", v1.ReasonDeletionBlocked, v1.DeletionPolicyOrphan)
	})
	if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.cfEdge}, &v1.EdgeProvider{}); err != nil {
		t.Errorf("the EdgeProvider went without its records deleted: %v", err)
	}
}

// One EdgeProvider per zone. Records carry the installation's marker, not the
// EdgeProvider's: a second EdgeProvider on the same zone (the only way to rename one,
// or to give it a new token) deleted, with itself, every record the first one kept
// there, and the routes still read Ready from the first one's listing. The second
// now leaves the zone alone, says so, and goes without touching it; once the first is
// gone (with the Orphan policy, its records kept), the second takes the zone over.
func TestOneEdgeProviderPerZone(t *testing.T) {
	o := newOperator(t, "samezone")
	o.start()
	ctx := context.Background()
	const host = "same.auth.example.com"
	o.create(o.route("r", host))
	o.waitReady("r")
	kept := o.cfRecords()[host]
	zonesReady := func(name string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			ep := &v1.EdgeProvider{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: name}, ep); err != nil {
				return err
			}
			return expectCondition(ep.Status.Conditions, v1.ConditionZonesReady, status, reason)
		}
	}
	second := o.cloudflareEdge()
	second.Name = "cf2-samezone"
	o.create(second)
	eventually(t, 15*time.Second, zonesReady(second.Name, metav1.ConditionFalse, v1.ReasonZoneConflict))
	// A route naming the second has nothing there to wait for when it goes.
	other := o.route("s", "other.auth.example.com")
	other.Spec.Edges = []string{second.Name, o.awsEdge}
	o.create(other)
	time.Sleep(2 * time.Second)
	if err := k8s.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(other), &v1.TenantRoute{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the route naming the second EdgeProvider is still there (%v): %+v", err, o.get("s").Status.Conditions)
		}
		return nil
	})
	if err := k8s.Delete(ctx, second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, func() error {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(second), &v1.EdgeProvider{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("the second EdgeProvider is still there (%v)", err)
		}
		return nil
	})
	time.Sleep(time.Second)
	if got := o.cfRecords()[host]; !slices.Equal(got, kept) {
		t.Fatalf("deleting the second EdgeProvider on the zone left %v of the first one's record %v", got, kept)
	}

	third := o.cloudflareEdge()
	third.Name = "cf3-samezone"
	o.create(third)
	eventually(t, 15*time.Second, zonesReady(third.Name, metav1.ConditionFalse, v1.ReasonZoneConflict))
	first := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.cfEdge}}
	edit(t, first, func(ep *v1.EdgeProvider) {
		ep.Annotations = map[string]string{v1.DeletionPolicyAnnotation: v1.DeletionPolicyOrphan}
	})
	if err := k8s.Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, zonesReady(third.Name, metav1.ConditionTrue, v1.ReasonZonesResolved))
	if got := o.cfRecords()[host]; !slices.Equal(got, kept) {
		t.Errorf("after the takeover the zone holds %v, want the record kept (%v)", got, kept)
	}
}

// addZone adds a zone to both providers and both EdgeProviders, and returns its ids.
func (o *operator) addZone(name string) (cf, r53 string) {
	o.t.Helper()
	cf, r53 = o.cf.AddZone(name), o.r53.AddZone(name)
	for _, edge := range []string{o.cfEdge, o.awsEdge} {
		edit(o.t, &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: edge}}, func(ep *v1.EdgeProvider) {
			ep.Spec.Zones = append(ep.Spec.Zones, v1.Zone{Name: name})
		})
	}
	return cf, r53
}

// After a restart, with one zone's Route53 requests held: a route with its records
// elsewhere is Ready without waiting for that zone's first listing (each listing took
// one of Route53's 5 requests a second, and every route of the account waited for all
// of them). A hostname moved out of the held zone while the operator was down stays
// its route's until the first listing found and deleted its record there: only then
// may another route be granted it.
func TestReadyDoesNotWaitForTheListingOfAnotherZone(t *testing.T) {
	const oldZone = "legacy.example.com"
	o := newOperator(t, "otherzone")
	cfOld, r53Old := o.addZone(oldZone)
	const oldHost, newHost, laterHost = "acme." + oldZone, "acme." + zoneName, "later." + zoneName
	o.start()
	o.create(o.route("acme", oldHost))
	o.waitReady("acme")
	leftover := func() (cf, r53 bool) {
		for _, r := range o.cf.Records(cfOld) {
			cf = cf || r.Name == oldHost
		}
		for _, rs := range o.r53.RecordSets(r53Old) {
			r53 = r53 || strings.TrimSuffix(rs.Name, ".") == oldHost
		}
		return cf, r53
	}
	if cf, r53 := leftover(); !cf || !r53 {
		t.Fatalf("the first spec's records: in cloudflare %t, in route53 %t", cf, r53)
	}

	o.stopManager()
	edit(t, o.get("acme"), func(tr *v1.TenantRoute) { tr.Spec.Hostnames = []string{newHost} })
	const hold = 10 * time.Second
	o.r53.SetFaults(emulatorkit.Faults{PathLatency: map[string]emulatorkit.Duration{r53Old: {Duration: hold}}})
	started := time.Now()
	o.start()
	o.create(o.route("later", laterHost))
	o.create(o.route("rival", oldHost))
	eventually(t, hold, func() error {
		return expectCondition(o.get("later").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
	if _, r53 := leftover(); !r53 {
		t.Fatalf("a route in another zone was Ready only %v after the start, once the held zone was listed",
			time.Since(started).Round(time.Millisecond))
	}
	if !slices.Contains(o.cfRecords()[laterHost], cfActive(laterHost)) || !slices.Contains(o.r53Records()[laterHost], r53Active(laterHost)) {
		t.Fatalf("Ready without its records: cloudflare %v, route53 %v", o.cfRecords()[laterHost], o.r53Records()[laterHost])
	}

	// Until the held zone is read and acme's record there deleted, the name is acme's
	// (the rival's own record could only come after its grant, through the same hold).
	for {
		_, r53 := leftover()
		rival := o.get("rival")
		if st := hostnameState(rival, oldHost); st == v1.ClaimGranted && r53 {
			t.Fatalf("%s granted to rival while acme's route53 record is still there", oldHost)
		}
		if !r53 {
			break
		}
		if time.Since(started) > 4*hold {
			t.Fatalf("acme's record at %s still in route53 after %v", oldHost, 4*hold)
		}
		time.Sleep(50 * time.Millisecond)
	}
	o.r53.SetFaults(emulatorkit.Faults{})
	eventually(t, 30*time.Second, func() error {
		acme := o.get("acme")
		if acme.Status.ObservedGeneration != acme.Generation || hostnameState(acme, oldHost) != "" {
			return fmt.Errorf("acme's status: generation %d of %d, %s %q", acme.Status.ObservedGeneration, acme.Generation, oldHost, hostnameState(acme, oldHost))
		}
		if err := expectCondition(acme.Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, ""); err != nil {
			return fmt.Errorf("acme: %w", err)
		}
		if st := hostnameState(o.get("rival"), oldHost); st != v1.ClaimGranted {
			return fmt.Errorf("rival's claim on %s is %q", oldHost, st)
		}
		return nil
	})
}

// moveOutOfAFailingZone makes route mover with a hostname in zone, then, with the
// operator down, moves that hostname to the test's zone, makes Route53's zone (id
// r53ID) fail every request, and starts the operator again. It returns the name let go.
func (o *operator) moveOutOfAFailingZone(zone, r53ID string) string {
	o.t.Helper()
	oldHost := "mover." + zone
	o.start()
	o.create(o.route("mover", oldHost))
	o.waitReady("mover")
	o.stopManager()
	edit(o.t, o.get("mover"), func(tr *v1.TenantRoute) { tr.Spec.Hostnames = []string{"mover." + zoneName} })
	o.r53.SetFaults(emulatorkit.Faults{PathOutage: []string{r53ID}})
	o.start()
	return oldHost
}

// A zone that cannot be read is the business of the routes that have records there or
// wait for its listing, not of every route of its account: the others keep a desire
// there (to clean up after a spec change) and are Ready without it. Seen as a status,
// a failing listing in one of 10 zones turned every Ready route of the account to
// Error for as long as it failed, 100,000 status writes there and 100,000 back.
func TestAFailingZoneListingLeavesRoutesElsewhereReady(t *testing.T) {
	const oldZone = "legacy.example.com"
	o := newOperator(t, "listfails")
	cfOld, r53Old := o.addZone(oldZone)
	// While the operator is down, mover lets its name in the failing zone go: it waits
	// for that zone to be read. The others never had anything there.
	oldHost := o.moveOutOfAFailingZone(oldZone, r53Old)
	stayers := []string{"a", "b", "c"}
	for _, name := range stayers {
		o.create(o.route(name, name+"."+zoneName))
	}
	o.waitReady(stayers...)
	// The first listing of the failing zone takes five attempts (the SDK's retries)
	// before the queue hears of its error; the sixth is the queue's own retry, after
	// which the routes have long been told. Every poll until then must find them Ready.
	deadline := time.Now().Add(60 * time.Second)
	var settled time.Time
	for settled.IsZero() || time.Now().Before(settled) {
		if settled.IsZero() && o.r53.Injected() >= 6 {
			settled = time.Now().Add(2 * time.Second)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the failing zone was tried %d times in 60 s", o.r53.Injected())
		}
		for _, name := range stayers {
			if c := condition(o.get(name).Status.Conditions, v1.ConditionReady); c.Status != metav1.ConditionTrue {
				t.Fatalf("%s, with no record in %s, went %s (%s: %s) when the zone could not be listed",
					name, oldZone, c.Status, c.Reason, c.Message)
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	// The routes waiting for the zone say why they wait: mover, and a route being
	// deleted (the zone may hold records of it).
	blames := func(name, reason string) func() error {
		return func() error {
			conds := o.get(name).Status.Conditions
			if err := expectCondition(conds, v1.ConditionReady, metav1.ConditionFalse, reason); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if msg := condition(conds, v1.ConditionReady).Message; !strings.Contains(msg, oldZone) {
				return fmt.Errorf("%s's Ready message does not name %s: %q", name, oldZone, msg)
			}
			return nil
		}
	}
	eventually(t, 10*time.Second, blames("mover", v1.ReasonProviderError))
	// The EdgeProvider says which zone it cannot read: nothing else would for a zone
	// that holds no route's records.
	zonesReady := func(name string, status metav1.ConditionStatus, reason string) error {
		ep := &v1.EdgeProvider{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, ep); err != nil {
			return err
		}
		if err := expectCondition(ep.Status.Conditions, v1.ConditionZonesReady, status, reason); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if msg := condition(ep.Status.Conditions, v1.ConditionZonesReady).Message; status == metav1.ConditionFalse && !strings.Contains(msg, oldZone) {
			return fmt.Errorf("%s's ZonesReady does not name %s: %q", name, oldZone, msg)
		}
		return nil
	}
	eventually(t, 10*time.Second, func() error { return zonesReady(o.awsEdge, metav1.ConditionFalse, v1.ReasonZoneUnreadable) })
	if err := zonesReady(o.cfEdge, metav1.ConditionTrue, v1.ReasonZonesResolved); err != nil {
		t.Fatalf("the edge whose zones answer: %v", err)
	}
	listError := func() string {
		ep := &v1.EdgeProvider{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.awsEdge}, ep); err != nil {
			t.Fatal(err)
		}
		for _, z := range ep.Status.Zones {
			if z.Name == oldZone {
				return z.ListError
			}
		}
		return ""
	}
	// The kind and the code, stable across retries; not the SDK's text with its ids.
	if got := listError(); !strings.HasPrefix(got, "provider unreachable or throttling") || strings.Contains(got, "RequestID") {
		t.Fatalf("status.zones[%s].listError = %q", oldZone, got)
	}
	// An edit rebuilds the account: its new queue has not listed the zone yet, and the
	// status keeps saying what it last knew instead of turning True until the new
	// queue's first listing fails (a flap with an event each way).
	// The window: until the edit is reconciled and the new queue's first listing has
	// failed (the SDK's five attempts), and a second more.
	injected := o.r53.Injected()
	edited := &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.awsEdge}}
	edit(t, edited, func(ep *v1.EdgeProvider) {
		ep.Spec.HealthCheck.Timeout = metav1.Duration{Duration: 600 * time.Millisecond}
	})
	ep := &v1.EdgeProvider{}
	deadline = time.Now().Add(40 * time.Second)
	var seen time.Time
	for seen.IsZero() || time.Now().Before(seen.Add(time.Second)) {
		if time.Now().After(deadline) {
			t.Fatalf("in 40 s after the edit: observed generation %d of %d, %d failed requests", ep.Status.ObservedGeneration, edited.Generation, o.r53.Injected()-injected)
		}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.awsEdge}, ep); err != nil {
			t.Fatal(err)
		}
		if err := expectCondition(ep.Status.Conditions, v1.ConditionZonesReady, metav1.ConditionFalse, v1.ReasonZoneUnreadable); err != nil {
			t.Fatalf("after an edit (generation %d, observed %d): %v", edited.Generation, ep.Status.ObservedGeneration, err)
		}
		if got := listError(); got == "" {
			t.Fatalf("after an edit (observed %d of %d): status.zones[%s].listError went empty", ep.Status.ObservedGeneration, edited.Generation, oldZone)
		}
		if seen.IsZero() && ep.Status.ObservedGeneration == edited.Generation && o.r53.Injected()-injected >= 5 {
			seen = time.Now()
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err := k8s.Delete(context.Background(), o.get("a")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, blames("a", v1.ReasonDeletionBlocked))

	o.r53.SetFaults(emulatorkit.Faults{})
	eventually(t, 30*time.Second, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: o.ns, Name: "a"}, &v1.TenantRoute{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("a is still there once the zone can be read (%v)", err)
		}
		mover := o.get("mover")
		if mover.Status.ObservedGeneration != mover.Generation || hostnameState(mover, oldHost) != "" {
			return fmt.Errorf("mover's status: generation %d of %d, %s %q", mover.Status.ObservedGeneration, mover.Generation, oldHost, hostnameState(mover, oldHost))
		}
		if err := expectCondition(mover.Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		return zonesReady(o.awsEdge, metav1.ConditionTrue, v1.ReasonZonesResolved)
	})
	for _, rs := range o.r53.RecordSets(r53Old) {
		if strings.TrimSuffix(rs.Name, ".") == oldHost {
			t.Fatalf("mover is Ready with its old record still in route53: %+v", rs)
		}
	}
	for _, r := range o.cf.Records(cfOld) {
		if r.Name == oldHost {
			t.Fatalf("mover is Ready with its old record still in cloudflare: %+v", r)
		}
	}
	for _, name := range stayers[1:] {
		if err := expectCondition(o.get(name).Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, ""); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// lookUpByID gives the AWS EdgeProvider's zone its id: Route53 then looks it up on its
// own (GetHostedZone), a request that fails alone.
func (o *operator) lookUpByID(zone, id string) {
	o.t.Helper()
	edit(o.t, &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.awsEdge}}, func(ep *v1.EdgeProvider) {
		for i := range ep.Spec.Zones {
			if ep.Spec.Zones[i].Name == zone {
				ep.Spec.Zones[i].ID = id
			}
		}
	})
}

// A zone whose lookup fails when the operator starts has no queue until it resolves,
// and it may hold records of a hostname that a route let go meanwhile: the name stays
// the route's, and no rival is granted it, until the zone is read and the record
// deleted. The lookup of a zone given by id is a request of its own (Route53's
// GetHostedZone), which fails alone.
func TestAHostnameIsNotLetGoWhileAZoneIsUnresolved(t *testing.T) {
	const oldZone = "legacy.example.com"
	o := newOperator(t, "unresolved")
	_, r53Old := o.addZone(oldZone)
	o.lookUpByID(oldZone, r53Old)
	oldHost := o.moveOutOfAFailingZone(oldZone, r53Old)
	o.create(o.route("rival", oldHost))
	// mover's record, told from rival's (once granted) by the registry record that
	// names its owner.
	recordLeft := func() bool {
		for _, rs := range o.r53.RecordSets(r53Old) {
			if strings.HasPrefix(rs.Name, "_tenantroute-") && strings.HasSuffix(rs.Name, "."+oldHost+".") &&
				slices.ContainsFunc(rs.Values, func(v string) bool { return strings.Contains(v, "mover") }) {
				return true
			}
		}
		return false
	}
	// The EdgeProvider says the zone cannot be resolved (after five attempts, with the
	// SDK's backoff of up to 5 s between them), and tries again every 10 s; until it
	// can, mover holds the name and says why.
	eventually(t, 40*time.Second, func() error {
		mover := o.get("mover")
		if !recordLeft() {
			t.Fatal("mover's record left the unresolved zone")
		}
		if st := hostnameState(o.get("rival"), oldHost); st == v1.ClaimGranted {
			t.Fatalf("%s granted to rival while mover's route53 record is in an unresolved zone", oldHost)
		}
		if mover.Status.ObservedGeneration != mover.Generation {
			return fmt.Errorf("mover's status is of generation %d of %d", mover.Status.ObservedGeneration, mover.Generation)
		}
		if msg := condition(mover.Status.Conditions, v1.ConditionReady).Message; !strings.Contains(msg, oldZone) {
			return fmt.Errorf("mover's Ready message does not name %s: %q", oldZone, msg)
		}
		return nil
	})
	o.r53.SetFaults(emulatorkit.Faults{})
	eventually(t, 60*time.Second, func() error {
		if st := hostnameState(o.get("rival"), oldHost); st == v1.ClaimGranted && recordLeft() {
			t.Fatalf("%s granted to rival while mover's route53 record is still there", oldHost)
		}
		if recordLeft() {
			return fmt.Errorf("mover's record at %s is still in route53", oldHost)
		}
		if st := hostnameState(o.get("rival"), oldHost); st != v1.ClaimGranted {
			return fmt.Errorf("rival's claim on %s is %q", oldHost, st)
		}
		return expectCondition(o.get("mover").Status.Conditions, v1.ConditionReady, metav1.ConditionTrue, "")
	})
}

// An account rebuilt while a zone it could not list also fails its lookup has no queue
// for the zone, and the status no entry: the zone is unresolved. Once it resolves and
// its listing still fails, ZonesReady goes from Unknown to False, never to True and
// back, an event each way.
func TestAnUnreadableZoneStaysReportedThroughAFailedLookup(t *testing.T) {
	const oldZone = "legacy.example.com"
	o := newOperator(t, "lookupfails")
	_, r53Old := o.addZone(oldZone)
	o.lookUpByID(oldZone, r53Old)
	listing := r53Old + "/rrset" // the lookup's path is a prefix of the listing's
	o.r53.SetFaults(emulatorkit.Faults{PathOutage: []string{listing}})
	o.start()
	zonesReady := func() *metav1.Condition {
		ep := &v1.EdgeProvider{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: o.awsEdge}, ep); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(ep.Status.Conditions, v1.ConditionZonesReady)
	}
	wantReason := func(reason string) func() error {
		return func() error {
			if c := zonesReady(); c == nil || c.Reason != reason {
				return fmt.Errorf("ZonesReady is %+v, want reason %s", c, reason)
			}
			return nil
		}
	}
	eventually(t, 40*time.Second, wantReason(v1.ReasonZoneUnreadable))
	o.r53.SetFaults(emulatorkit.Faults{PathOutage: []string{r53Old}})
	edit(t, &v1.EdgeProvider{ObjectMeta: metav1.ObjectMeta{Name: o.awsEdge}}, func(ep *v1.EdgeProvider) {
		ep.Spec.HealthCheck.Timeout = metav1.Duration{Duration: 600 * time.Millisecond}
	})
	eventually(t, 40*time.Second, wantReason(v1.ReasonProviderUnreachable))
	// The lookup answers again (the EdgeProvider tries every 10 s); the listing does not.
	injected := o.r53.Injected()
	o.r53.SetFaults(emulatorkit.Faults{PathOutage: []string{listing}})
	deadline := time.Now().Add(60 * time.Second)
	for {
		c := zonesReady()
		if c != nil && c.Status == metav1.ConditionTrue {
			t.Fatalf("ZonesReady went True while %s cannot be listed: %s", oldZone, c.Message)
		}
		// Resolved, and its new queue's listing failed (the SDK's five attempts).
		if c != nil && c.Reason == v1.ReasonZoneUnreadable && o.r53.Injected()-injected >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("in 60 s: ZonesReady %+v, %d failed requests", c, o.r53.Injected()-injected)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
