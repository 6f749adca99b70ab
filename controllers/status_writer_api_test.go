package controllers_test

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
	"github.com/tenantroute/tenantroute-operator/controllers"
)

// Against the API server: the patch is applied, the answer is the route's metadata
// alone, a locked write returns the saved version, and one on a stale version is
// refused.
func TestStatusWriterAgainstTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "status-writer"}}
	if err := k8s.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	tr := &v1.TenantRoute{ObjectMeta: metav1.ObjectMeta{Name: "acme", Namespace: ns.Name},
		Spec: v1.TenantRouteSpec{TenantID: "acme", Region: "eu", Hostnames: []string{"acme.example.com"}, Edges: []string{"cf"}}}
	if err := k8s.Create(ctx, tr); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := controllers.NewStatusWriterForTest(cfg, hc, k8s.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	after := tr.DeepCopy()
	after.Status.ActiveEdge = "cf"
	answer, err := w.Patch(ctx, tr, after, false)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	err = json.NewDecoder(answer).Decode(&got)
	_ = answer.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got["kind"] != "PartialObjectMetadata" || got["status"] != nil || got["spec"] != nil {
		t.Errorf("the answer is not the metadata alone: %v", got)
	}

	var saved v1.TenantRoute
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tr), &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Status.ActiveEdge != "cf" {
		t.Fatalf("status not written: %+v", saved.Status)
	}
	next := saved.DeepCopy()
	next.Status.ActiveEdge = "aws"
	rv, err := w.WriteLocked(ctx, &saved, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(tr), &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Status.ActiveEdge != "aws" || rv != saved.ResourceVersion {
		t.Errorf("locked write: status %+v, version %s, saved version %s", saved.Status, rv, saved.ResourceVersion)
	}
	stale := next.DeepCopy() // still at the version before the locked write
	stale.Status.ActiveEdge = "gcp"
	if _, err := w.WriteLocked(ctx, next, stale); !apierrors.IsConflict(err) {
		t.Errorf("a locked write on a stale version: %v, want Conflict", err)
	}
	if err := w.Write(ctx, &saved, stale, false); err != nil {
		t.Errorf("an unlocked write: %v", err)
	}
}
