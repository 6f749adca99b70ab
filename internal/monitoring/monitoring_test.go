package monitoring_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tenantroute/tenantroute-operator/internal/monitoring"
	"github.com/tenantroute/tenantroute-operator/internal/testenv"
)

func shipped(t *testing.T) []monitoring.Query {
	t.Helper()
	root := testenv.RepoRoot()
	dash, err := monitoring.DashboardQueries(filepath.Join(root, monitoring.DashboardPath))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := monitoring.RuleQueries(filepath.Join(root, monitoring.RulesPath))
	if err != nil {
		t.Fatal(err)
	}
	if len(dash) < 20 || len(rules) != 10 {
		t.Fatalf("%d dashboard queries and %d rules; want at least 20 and 10", len(dash), len(rules))
	}
	return append(dash, rules...)
}

// Every shipped expression parses and names only the project's metrics; the alerts
// named in the issue are all there.
func TestShippedQueriesParse(t *testing.T) {
	var alerts []string
	for _, q := range shipped(t) {
		names, err := monitoring.Metrics(q)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, n := range names {
			if !strings.HasPrefix(n, "tenantroute_") {
				t.Errorf("%s names %s, not one of the project's metrics", q.Source, n)
			}
		}
		if a, ok := strings.CutPrefix(q.Source, "alert: "); ok {
			alerts = append(alerts, a)
		}
	}
	slices.Sort(alerts)
	want := []string{"TenantRouteCertificateExpiringSoon", "TenantRouteCertificateFailed", "TenantRouteCertificateStorageFailing",
		"TenantRouteEdgeUnhealthy", "TenantRouteFailStatic", "TenantRouteLookupBreakerOpen",
		"TenantRouteProxy5xxRatio", "TenantRouteProxyOutOfDescriptors", "TenantRouteRecordsFailing", "TenantRouteRedisUnreachable"}
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %v, want %v", alerts, want)
	}
}

// The rule check is promtool's: a bad expression, a bad template or an unknown field
// is refused.
func TestBrokenRulesAreRefused(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), monitoring.RulesPath))
	if err != nil {
		t.Fatal(err)
	}
	for name, broken := range map[string]string{
		"expression": strings.Replace(string(good), "max by (edge) (tenantroute_edge_health) == 0", "max by (edge) (tenantroute_edge_health == 0", 1),
		"template":   strings.Replace(string(good), "'Edge {{ $labels.edge }} fails", "'Edge {{ $labels.edge fails", 1),
		"duration":   strings.Replace(string(good), "for: 10m", "for: ten minutes", 1),
		"field":      strings.Replace(string(good), "      for: 2m\n", "      for: 2m\n      severity: warning\n", 1),
	} {
		if broken == string(good) {
			t.Fatalf("%s: the mutation did not apply", name)
		}
		path := filepath.Join(t.TempDir(), "alerts.yaml")
		if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := monitoring.RuleQueries(path); err == nil {
			t.Errorf("a broken %s was accepted", name)
		}
	}
}

// Missing finds a metric no exposition holds, and knows a histogram's series.
func TestMissingMetrics(t *testing.T) {
	exposition := `# HELP tenantroute_edge_health Health.
# TYPE tenantroute_edge_health gauge
tenantroute_edge_health{edge="aws"} 1
# HELP tenantroute_zone_flush_duration_seconds Flush.
# TYPE tenantroute_zone_flush_duration_seconds histogram
tenantroute_zone_flush_duration_seconds_bucket{provider="aws",result="ok",le="+Inf"} 1
tenantroute_zone_flush_duration_seconds_sum{provider="aws",result="ok"} 0.2
tenantroute_zone_flush_duration_seconds_count{provider="aws",result="ok"} 1
# HELP tenantroute_failovers_total Failovers.
# TYPE tenantroute_failovers_total counter
`
	exposed, err := monitoring.Exposed(strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	missing, err := monitoring.Missing([]monitoring.Query{
		{Source: "a", Expr: `max by (edge) (tenantroute_edge_health{edge="aws"}) == 0`},
		{Source: "b", Expr: `histogram_quantile(0.99, sum by (le) (rate(tenantroute_zone_flush_duration_seconds_bucket{result="ok"}[$__rate_interval])))`},
		{Source: "c", Expr: `sum(increase(tenantroute_failovers_total[5m])) / sum(tenantroute_records_managed)`},
		{Source: "d", Expr: `sum(rate(tenantroute_zone_flush_duration_seconds_count{result="error"}[5m]))`},
	}, exposed)
	if err != nil {
		t.Fatal(err)
	}
	// A family declared without a sample is not exposed: no series, no data. A label
	// value no series has selects nothing either.
	want := []string{"c: tenantroute_failovers_total", "c: tenantroute_records_managed",
		`d: tenantroute_zone_flush_duration_seconds_count{result="error"}`}
	if !slices.Equal(missing, want) {
		t.Errorf("missing %v, want %v", missing, want)
	}
}
