package routes

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

func tr(ns, name, uid, tenant string, hosts ...string) *v1.TenantRoute {
	return &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec: v1.TenantRouteSpec{TenantID: tenant, Hostnames: hosts}}
}

func states(hosts []v1.HostnameClaim) map[string]v1.ClaimState {
	out := map[string]v1.ClaimState{}
	for _, h := range hosts {
		out[h.Hostname] = h.State
	}
	return out
}

func TestFirstGrantedKeepsWhateverTheAge(t *testing.T) {
	c := NewClaims()
	now := metav1.Now()
	young, old := tr("b", "young", "u1", "young", "x.example.com"), tr("a", "old", "u2", "old", "y.example.com")
	old.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	if _, h, _ := c.Claim(young, now, nil); h[0].State != v1.ClaimGranted {
		t.Fatalf("first claim: %+v", h)
	}
	old.Spec.Hostnames = append(old.Spec.Hostnames, "x.example.com")
	_, h, _ := c.Claim(old, now, nil)
	if s := states(h); s["x.example.com"] != v1.ClaimConflict || s["y.example.com"] != v1.ClaimGranted {
		t.Errorf("an older route adding a granted name: %v", s)
	}
	// The holder stops listing it: it keeps it, recorded as releasing, until its records
	// are gone (Let); then the next claimant is granted it.
	young.Spec.Hostnames = []string{"z.example.com"}
	_, h, freed := c.Claim(young, now, nil)
	if s := states(h); s["x.example.com"] != v1.ClaimGranted || len(freed.Hostnames) != 0 {
		t.Errorf("the holder no longer lists the name: %v, freed %v", s, freed)
	}
	if _, h, _ := c.Claim(old, now, nil); states(h)["x.example.com"] != v1.ClaimConflict {
		t.Errorf("while the holder releases it: %v", states(h))
	}
	if freed := c.Let(young, []string{"x.example.com"}); len(freed.Hostnames) != 1 {
		t.Errorf("Let freed %v", freed)
	}
	if _, h, _ := c.Claim(old, now, nil); states(h)["x.example.com"] != v1.ClaimGranted {
		t.Errorf("after release: %v", states(h))
	}
}

func TestTenantIDBelongsToOneRoute(t *testing.T) {
	c := NewClaims()
	now := metav1.Now()
	a, b := tr("a", "r", "u1", "acme", "a.example.com"), tr("b", "r", "u2", "acme", "b.example.com")
	c.Claim(a, now, nil)
	tenant, h, _ := c.Claim(b, now, nil)
	if tenant.State != v1.ClaimConflict || h[0].State != v1.ClaimConflict {
		t.Errorf("a second claimant of tenantID acme: %+v %+v", tenant, h)
	}
	// The holder goes: the next claimant gets the tenantID and its names.
	c.Release(types.NamespacedName{Namespace: "a", Name: "r"})
	if tenant, h, _ := c.Claim(b, now, nil); tenant.State != v1.ClaimGranted || h[0].State != v1.ClaimGranted {
		t.Errorf("after the holder went: %+v %+v", tenant, h)
	}
}

func TestRecreatedObjectIsANewClaimant(t *testing.T) {
	c := NewClaims()
	now := metav1.Now()
	c.Claim(tr("a", "r", "u1", "acme", "a.example.com"), now, nil)
	// Same name, new object (its predecessor deleted without us seeing it go).
	if _, h, _ := c.Claim(tr("a", "r", "u2", "acme", "a.example.com"), now, nil); h[0].State != v1.ClaimGranted {
		t.Errorf("the recreated object: %+v", h)
	}
}

// A restarted operator learns the grants from status, keeps their times, and the
// holder stays the holder even if the other route is claimed first.
func TestGrantsSurviveARestart(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = v1.AddToScheme(scheme)
	since := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	holder := tr("a", "holder", "u1", "acme", "x.example.com")
	holder.Status.TenantID = &v1.ClaimStatus{State: v1.ClaimGranted, Since: since}
	holder.Status.Hostnames = []v1.HostnameClaim{{Hostname: "x.example.com", ClaimStatus: v1.ClaimStatus{State: v1.ClaimGranted, Since: since}}}
	other := tr("b", "other", "u2", "globex", "x.example.com")
	c := NewClaims()
	if err := c.EnsureSeeded(context.Background(), fake.NewClientBuilder().WithScheme(scheme).WithObjects(holder, other).Build()); err != nil {
		t.Fatal(err)
	}
	if _, h, _ := c.Claim(other, metav1.Now(), nil); h[0].State != v1.ClaimConflict {
		t.Errorf("the other route after a restart: %+v", h)
	}
	_, h, _ := c.Claim(holder, metav1.Now(), nil)
	if h[0].State != v1.ClaimGranted || !h[0].Since.Equal(&since) {
		t.Errorf("the holder after a restart: %+v", h)
	}
	if got := Holder([]*v1.TenantRoute{other, holder}, "x.example.com"); got == nil || got.Name != "holder" {
		t.Errorf("Holder: %v", got)
	}
}

// A route that loses its tenantID (or a custom domain its proof) lets go of the
// hostnames it held, and says so, so that the next claimant gets them.
func TestIneligibleHolderFreesItsHostnames(t *testing.T) {
	c := NewClaims()
	now := metav1.Now()
	a := tr("a", "r", "u1", "acme", "x.example.com")
	c.Claim(a, now, nil)
	_, h, freed := c.Claim(a, now, map[string]v1.ClaimStatus{"x.example.com": {State: v1.ClaimPendingVerification, Message: "no proof"}})
	if h[0].State != v1.ClaimPendingVerification || len(freed.Hostnames) != 1 {
		t.Fatalf("proof gone: %+v, freed %+v", h, freed)
	}
	if _, h, _ := c.Claim(tr("b", "r", "u2", "globex", "x.example.com"), now, nil); h[0].State != v1.ClaimGranted {
		t.Errorf("the next claimant: %+v", h)
	}
}

// A hostname the route's namespace may not claim is Forbidden even while another
// route holds it (the namespace is the reason, not the holder), and a holder whose
// namespace loses the right lets it go.
func TestForbiddenHostnamesAreNeverHeld(t *testing.T) {
	c := NewClaims()
	now := metav1.Now()
	forbid := map[string]v1.ClaimStatus{"x.example.com": {State: v1.ClaimForbidden, Message: "namespace r may not"}}
	a := tr("a", "r", "u1", "acme", "x.example.com")
	c.Claim(a, now, nil)
	_, h, freed := c.Claim(a, now, forbid)
	if h[0].State != v1.ClaimForbidden || h[0].Message != "namespace r may not" || len(freed.Hostnames) != 1 {
		t.Fatalf("after the namespace lost the right: %+v, freed %+v", h, freed)
	}
	b := tr("b", "s", "u2", "globex", "x.example.com")
	if _, h, _ := c.Claim(b, now, nil); h[0].State != v1.ClaimGranted {
		t.Fatalf("the next claimant: %+v", h)
	}
	if _, h, _ := c.Claim(a, now, forbid); h[0].State != v1.ClaimForbidden {
		t.Errorf("a forbidden claimant of a held name: %+v", h)
	}
}

// Held answers from the registry without deciding: a snapshot of a route cannot take
// or free anything through it.
func TestHeldDecidesNothing(t *testing.T) {
	c := NewClaims()
	now := metav1.Now()
	a := tr("a", "r", "u1", "acme", "x.example.com", "y.example.com")
	c.Claim(a, now, nil)
	stale := tr("a", "r", "u1", "acme", "x.example.com") // an older spec, without y
	if held, claimed := c.Held(stale); !claimed || len(held) != 1 || held[0] != "x.example.com" {
		t.Errorf("held by the stale snapshot: %v %v", held, claimed)
	}
	if _, h, _ := c.Claim(tr("b", "r", "u2", "globex", "y.example.com"), now, nil); h[0].State != v1.ClaimConflict {
		t.Errorf("y was freed by looking at a snapshot: %+v", h)
	}
	if _, known := c.Held(tr("c", "r", "u3", "c", "z.example.com")); known {
		t.Error("a route never claimed counts as claimed")
	}
}

// Release says what it freed.
func TestReleaseReportsWhatItFreed(t *testing.T) {
	c := NewClaims()
	c.Claim(tr("a", "r", "u1", "acme", "x.example.com"), metav1.Now(), nil)
	freed := c.Release(types.NamespacedName{Namespace: "a", Name: "r"})
	if len(freed.Hostnames) != 1 || len(freed.TenantIDs) != 1 {
		t.Errorf("freed %+v", freed)
	}
}
