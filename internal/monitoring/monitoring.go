// Package monitoring reads the Grafana dashboard and the alert rules the project ships
// (config/grafana, config/prometheus) and checks them as promtool and a scrape would:
// every expression parses, the rules are a valid Prometheus rule file, and every
// metric they name is exposed by a running manager or proxy.
package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// Paths of the shipped dashboard and rules, from the repository's root.
const (
	DashboardPath = "config/grafana/tenantroute.json"
	RulesPath     = "config/prometheus/alerts.yaml"
)

// Query is one PromQL expression and where it comes from.
type Query struct {
	Source string // "dashboard: <panel title>" or "alert: <name>"
	Expr   string
}

var promql = parser.NewParser(parser.Options{})

// grafanaVariables stand for the dashboard's built-in variables when parsing.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// DashboardQueries returns the expressions of every panel of a Grafana dashboard,
// rows' nested panels included.
func DashboardQueries(path string) ([]Query, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []json.RawMessage `json:"panels"`
	}
	var dash struct {
		Panels []json.RawMessage `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var queries []Query
	var walk func([]json.RawMessage) error
	walk = func(raw []json.RawMessage) error {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			for _, t := range p.Targets {
				if t.Expr != "" {
					queries = append(queries, Query{Source: "dashboard: " + p.Title, Expr: t.Expr})
				}
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	return queries, walk(dash.Panels)
}

// RuleQueries reads a PrometheusRule (the Prometheus Operator's type, strictly: an
// unknown field is an error), validates its groups as Prometheus validates a rule file
// (expressions, durations, label and annotation templates), and returns its
// expressions.
func RuleQueries(path string) ([]Query, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rule monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(b, &rule); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if rule.Kind != monitoringv1.PrometheusRuleKind || len(rule.Spec.Groups) == 0 {
		return nil, fmt.Errorf("%s: not a PrometheusRule with groups", path)
	}
	file, err := yaml.Marshal(rule.Spec)
	if err != nil {
		return nil, err
	}
	if _, errs := rulefmt.Parse(file, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler)); len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", path, errors.Join(errs...))
	}
	var queries []Query
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				name = r.Record
			}
			queries = append(queries, Query{Source: "alert: " + name, Expr: r.Expr.String()})
		}
	}
	return queries, nil
}

// Metrics parses an expression and returns the metric names it selects.
func Metrics(q Query) ([]string, error) {
	sels, err := selectors(q)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, vs := range sels {
		if name := selectorName(vs); !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names, nil
}

func selectors(q Query) ([]*parser.VectorSelector, error) {
	expr, err := promql.ParseExpr(grafanaVariables.Replace(q.Expr))
	if err != nil {
		return nil, fmt.Errorf("%s: %q: %w", q.Source, q.Expr, err)
	}
	var sels []*parser.VectorSelector
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			sels = append(sels, vs)
		}
		return nil
	})
	for _, vs := range sels {
		if selectorName(vs) == "" {
			return nil, fmt.Errorf("%s: %q selects no metric by name", q.Source, q.Expr)
		}
	}
	return sels, nil
}

func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			return m.Value
		}
	}
	return ""
}

// Exposition is what /metrics serves: every series name with the label sets it has.
type Exposition map[string][]map[string]string

// Exposed reads Prometheus text expositions (what /metrics serves): a histogram's and a
// summary's _bucket, _sum and _count series included. A family declared without a
// sample has no series and is not exposed.
func Exposed(expositions ...io.Reader) (Exposition, error) {
	exposed := Exposition{}
	for _, r := range expositions {
		p := expfmt.NewTextParser(model.UTF8Validation)
		families, err := p.TextToMetricFamilies(r)
		if err != nil {
			return nil, err
		}
		for name, f := range families {
			names := []string{name}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				names = append(names, name+"_bucket", name+"_sum", name+"_count")
			case dto.MetricType_SUMMARY:
				names = append(names, name+"_sum", name+"_count")
			}
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				for _, n := range names {
					exposed[n] = append(exposed[n], labels)
				}
			}
		}
	}
	return exposed, nil
}

// Missing returns, for each query, the metrics it names that the exposition lacks
// ("source: metric"), and the label values it selects by equality that no series of
// that metric has ("source: metric{label="value"}"): a renamed metric or label value
// would otherwise leave a panel empty and an alert silent for good.
func Missing(queries []Query, exposed Exposition) ([]string, error) {
	var missing []string
	for _, q := range queries {
		sels, err := selectors(q)
		if err != nil {
			return nil, err
		}
		for _, vs := range sels {
			name := selectorName(vs)
			series, ok := exposed[name]
			if !ok {
				if entry := q.Source + ": " + name; !slices.Contains(missing, entry) {
					missing = append(missing, entry)
				}
				continue
			}
			for _, m := range vs.LabelMatchers {
				if m.Type != labels.MatchEqual || m.Name == model.MetricNameLabel || m.Value == "" {
					continue
				}
				if !slices.ContainsFunc(series, func(l map[string]string) bool { return l[m.Name] == m.Value }) {
					missing = append(missing, fmt.Sprintf("%s: %s{%s=%q}", q.Source, name, m.Name, m.Value))
				}
			}
		}
	}
	return missing, nil
}
