package controllers

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// countingSink counts the WithValues its logger pays for.
type countingSink struct {
	logr.LogSink
	withValues *int
}

func (s countingSink) WithValues(kv ...any) logr.LogSink {
	*s.withValues++
	return countingSink{s.LogSink.WithValues(kv...), s.withValues}
}

func TestLazyValuesReachTheLinesWrittenOnly(t *testing.T) {
	var lines []string
	calls := 0
	base := logr.New(countingSink{funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{}).GetSink(), &calls})
	l := withLazyValues(base).WithValues("namespace", "tenants", "name", "acme")
	a := l.WithValues("reconcileID", "1")
	b := l.WithValues("reconcileID", "2") // derived from the same logger: must not overwrite a's
	if calls != 0 {
		t.Fatalf("WithValues reached the sink %d times before anything was logged", calls)
	}
	a.Info("records declared")
	b.Error(nil, "status not written", "attempt", 3)
	l.V(5).Info("not enabled") // funcr's verbosity is 0
	if len(lines) != 2 {
		t.Fatalf("lines: %q", lines)
	}
	for i, want := range []string{`"namespace"="tenants" "name"="acme" "reconcileID"="1"`, `"namespace"="tenants" "name"="acme" "reconcileID"="2" "attempt"=3`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s, want %s in it", i, lines[i], want)
		}
	}
}

// A line names the code that logged it, not the sink in between.
func TestLazyValuesKeepTheCaller(t *testing.T) {
	var line string
	l := withLazyValues(funcr.New(func(_, args string) { line = args }, funcr.Options{LogCaller: funcr.All})).WithValues("name", "acme")
	l.Info("here")
	if !strings.Contains(line, `"file"="logging_test.go"`) {
		t.Errorf("caller: %s", line)
	}
	l.WithCallDepth(0).Info("again")
	if !strings.Contains(line, `"file"="logging_test.go"`) {
		t.Errorf("caller through WithCallDepth: %s", line)
	}
}
