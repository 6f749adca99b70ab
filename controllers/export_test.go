package controllers

import (
	"context"
	"io"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// StatusWriterForTest is the status writer, for the tests against the API server.
type StatusWriterForTest struct{ w *statusWriter }

func NewStatusWriterForTest(cfg *rest.Config, hc *http.Client, scheme *runtime.Scheme) (StatusWriterForTest, error) {
	w, err := newStatusWriter(cfg, hc, scheme)
	return StatusWriterForTest{w}, err
}

func (t StatusWriterForTest) Patch(ctx context.Context, before, after *v1.TenantRoute, lock bool) (io.ReadCloser, error) {
	return t.w.patch(ctx, before, after, lock)
}

func (t StatusWriterForTest) Write(ctx context.Context, before, after *v1.TenantRoute, lock bool) error {
	return t.w.write(ctx, before, after, lock)
}

func (t StatusWriterForTest) WriteLocked(ctx context.Context, before, after *v1.TenantRoute) (string, error) {
	return t.w.writeLocked(ctx, before, after)
}

// NewEventSinkForTest is the operator's event sink over inner, at the default budgets.
func NewEventSinkForTest(inner events.EventRecorder) events.EventRecorder {
	return newEventSink(inner, DefaultEventQPS, DefaultEventBurst, DefaultFailoverEvents)
}
