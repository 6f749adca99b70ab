package controllers

import (
	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/tenantroute/tenantroute-operator/api/v1alpha1"
)

// routeLogs gives each reconcile of the TenantRoute controller the logger
// controller-runtime would (the controller, the route, the reconcile's id), with its
// values kept aside until a line is written. controller-runtime adds them with
// WithValues, and zap encodes them at once, into buffers of its own: at 100,000 routes
// that was 7% of the manager's CPU, for reconciles that, but for errors, log nothing.
// The values must not change once given (strings and names are given).
func routeLogs(mgr ctrl.Manager) func(*reconcile.Request) logr.Logger {
	base := mgr.GetLogger().WithValues("controller", "tenantroute", "controllerGroup", v1.GroupVersion.Group, "controllerKind", "TenantRoute")
	return func(req *reconcile.Request) logr.Logger {
		l := withLazyValues(base)
		if req != nil {
			l = l.WithValues("TenantRoute", klog.KRef(req.Namespace, req.Name), "namespace", req.Namespace, "name", req.Name)
		}
		return l
	}
}

// withLazyValues returns l with WithValues deferred to the lines written.
func withLazyValues(l logr.Logger) logr.Logger {
	sink := l.GetSink()
	if sink == nil {
		return l // discards everything already
	}
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1) // lazyValues' own frame
	}
	return l.WithSink(&lazyValues{sink: sink})
}

// lazyValues is a logr.LogSink whose WithValues only remembers the values; its sink
// gets them with each line.
type lazyValues struct {
	sink logr.LogSink
	kv   []any
}

func (l *lazyValues) Init(logr.RuntimeInfo)  {} // the sink was initialised with its logger
func (l *lazyValues) Enabled(level int) bool { return l.sink.Enabled(level) }

func (l *lazyValues) Info(level int, msg string, kv ...any) {
	l.sink.Info(level, msg, l.with(kv)...)
}

func (l *lazyValues) Error(err error, msg string, kv ...any) {
	l.sink.Error(err, msg, l.with(kv)...)
}

func (l *lazyValues) WithValues(kv ...any) logr.LogSink {
	return &lazyValues{sink: l.sink, kv: l.with(kv)}
}

func (l *lazyValues) WithName(name string) logr.LogSink {
	return &lazyValues{sink: l.sink.WithName(name), kv: l.kv}
}

func (l *lazyValues) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := l.sink.(logr.CallDepthLogSink); ok {
		return &lazyValues{sink: cd.WithCallDepth(depth), kv: l.kv}
	}
	return l
}

// with appends to a copy: loggers derived from one another share nothing they change.
func (l *lazyValues) with(kv []any) []any {
	if len(kv) == 0 {
		return l.kv
	}
	return append(l.kv[:len(l.kv):len(l.kv)], kv...)
}
