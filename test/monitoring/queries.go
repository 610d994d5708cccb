// Package monitoring checks the PromQL of the webhook's alerting rules
// (config/prometheus) and Grafana dashboard (config/grafana) against what the
// webhook binary and kube-apiserver export: every expression parses with the
// parser of Prometheus 2.42 (Debian bookworm's), and names only metrics, and
// labels of them, that a scrape of the real binaries holds. The scrape is
// the test's (make monitoring-check), never a list typed by hand.
package monitoring

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// Query is one PromQL expression and where it is written.
type Query struct {
	// File is the file it is in, as the caller named it.
	File string
	// Where names it in the file: "group G, alert A", "panel "P", target A".
	Where string
	// Expr is the expression as written.
	Expr string
	// PromQL is Expr with a dashboard's template variables substituted
	// (substituteVariables): what is parsed. For a rule it is Expr.
	PromQL string
	// Record is the metric a recording rule writes, and Alert the alert an
	// alerting rule fires; Labels are the rule's labels. Empty for a panel.
	Record, Alert string
	Labels        []string
	// Label is, for a dashboard variable's label_values(selector, label),
	// the label it lists, which the selector's metric must have.
	Label string
}

func (q Query) String() string { return fmt.Sprintf("%s: %s: %s", q.File, q.Where, q.Expr) }

// RuleQueries reads a Prometheus rule file as Prometheus 2.42 loads it
// (rulefmt, what promtool check rules runs) and returns its expressions.
// rulefmt's errors are returned joined, each naming the file and the rule.
func RuleQueries(path string) ([]Query, error) {
	groups, errs := rulefmt.ParseFile(path)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var queries []Query
	var problems []error
	for _, g := range groups.Groups {
		for i, r := range g.Rules {
			q := Query{File: path, Expr: r.Expr.Value, PromQL: r.Expr.Value, Record: r.Record.Value, Alert: r.Alert.Value}
			switch {
			case q.Record != "":
				q.Where = fmt.Sprintf("group %s, record %s", g.Name, q.Record)
				// The common module this one builds with validates UTF-8
				// names; Prometheus 2.42 validates the legacy ones.
				if !model.LegacyValidation.IsValidMetricName(q.Record) {
					problems = append(problems, fmt.Errorf("%s: %s: not a valid metric name for Prometheus 2.42", path, q.Where))
				}
			default:
				q.Where = fmt.Sprintf("group %s, alert %s", g.Name, q.Alert)
			}
			if r.Expr.Line > 0 {
				q.Where += fmt.Sprintf(" (line %d)", r.Expr.Line)
			} else {
				q.Where += fmt.Sprintf(" (rule %d)", i+1)
			}
			for name := range r.Labels {
				q.Labels = append(q.Labels, name)
			}
			for name := range mergeKeys(r.Labels, r.Annotations) {
				if !model.LegacyValidation.IsValidLabelName(name) {
					problems = append(problems, fmt.Errorf("%s: %s: %q is not a valid label name for Prometheus 2.42", path, q.Where, name))
				}
			}
			slices.Sort(q.Labels)
			queries = append(queries, q)
		}
	}
	return queries, errors.Join(problems...)
}

func mergeKeys(maps ...map[string]string) map[string]bool {
	keys := map[string]bool{}
	for _, m := range maps {
		for k := range m {
			keys[k] = true
		}
	}
	return keys
}

// dashboard is what DashboardQueries reads of a Grafana dashboard's JSON.
type dashboard struct {
	Panels []panel `json:"panels"`
	// Rows is the schema before Grafana 5, each row with its panels.
	Rows       []panel `json:"rows"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

// panel is a panel, or a row, whose panels are those it holds collapsed.
type panel struct {
	ID      int      `json:"id"`
	Title   string   `json:"title"`
	Type    string   `json:"type"`
	Panels  []panel  `json:"panels"`
	Targets []target `json:"targets"`
}

type target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

type variable struct {
	Name string `json:"name"`
	Type string `json:"type"`
	// Query is a string, or an object with a query field (Grafana 9 on).
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
}

// DashboardQueries reads a Grafana dashboard and returns the PromQL of its
// panels' targets, rows' panels included, and of its query variables, with
// the template variables substituted (substituteVariables).
func DashboardQueries(path string) ([]Query, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	intervals := map[string]bool{}
	for _, v := range d.Templating.List {
		if v.Type == "interval" {
			intervals[v.Name] = true
		}
	}
	var queries []Query
	var problems []error
	add := func(q Query) {
		var err error
		if q.PromQL, err = substituteVariables(q.Expr, intervals); err != nil {
			problems = append(problems, fmt.Errorf("%s: %s: %s: %w", path, q.Where, q.Expr, err))
			return
		}
		queries = append(queries, q)
	}
	var walk func(panels []panel, row string)
	walk = func(panels []panel, row string) {
		for _, p := range panels {
			where := fmt.Sprintf("panel %q (id %d)", p.Title, p.ID)
			if row != "" {
				where = fmt.Sprintf("row %q, %s", row, where)
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					continue // not a Prometheus target, or an empty one
				}
				add(Query{File: path, Where: fmt.Sprintf("%s, target %s", where, t.RefID), Expr: t.Expr})
			}
			if p.Type == "row" || len(p.Panels) > 0 {
				walk(p.Panels, p.Title)
			}
		}
	}
	walk(d.Panels, "")
	walk(d.Rows, "")
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, ok, err := variableQuery(v)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: variable %s: %w", path, v.Name, err))
			continue
		}
		if !ok {
			continue
		}
		q.File = path
		add(q)
	}
	return queries, errors.Join(problems...)
}

// variableQuery returns the PromQL of a query variable of Grafana's
// Prometheus data source: label_values(selector, label), whose selector is
// PromQL and whose label the selector's metric must have, and
// query_result(expr). label_values(label), label_names() and metrics(regex)
// name no metric, and are left out (ok false).
func variableQuery(v variable) (q Query, ok bool, err error) {
	text := v.Definition
	if text == "" && len(v.Query) > 0 {
		var s string
		if json.Unmarshal(v.Query, &s) == nil {
			text = s
		} else {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return q, false, fmt.Errorf("query is neither a string nor an object with a query: %w", err)
			}
			text = obj.Query
		}
	}
	text = strings.TrimSpace(text)
	where := "variable " + v.Name
	if m := labelValues.FindStringSubmatch(text); m != nil {
		return Query{Where: where, Expr: strings.TrimSpace(m[1]), Label: m[2]}, true, nil
	}
	if inner, found := strings.CutPrefix(text, "query_result("); found && strings.HasSuffix(inner, ")") {
		return Query{Where: where, Expr: strings.TrimSuffix(inner, ")")}, true, nil
	}
	return q, false, nil
}

// labelValues matches label_values(selector, label), not label_values(label).
var labelValues = regexp.MustCompile(`^label_values\(\s*(.+?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)$`)

// These stand for Grafana's template variables when an expression is parsed;
// what Grafana puts there at run time is as plausible, so the expression
// parses the same.
const (
	// intervalValue is $__rate_interval, $__interval, $__range, $__auto
	// and any variable of type interval.
	intervalValue = "5m"
	// matchAnything is a variable in a string, such as a label matcher's
	// value ({namespace=~"$namespace"}): whatever is chosen, "All" being .*.
	matchAnything = ".*"
)

// builtins are Grafana's global variables that a PromQL expression uses,
// with what stands for them: a duration, or a number of ms or s.
var builtins = map[string]string{
	"__rate_interval": intervalValue, "__interval": intervalValue, "__range": intervalValue, "__auto": intervalValue,
	"__interval_ms": "300000", "__range_ms": "300000", "__range_s": "300",
}

// variableRef matches $var, ${var}, ${var:format} and [[var]].
var variableRef = regexp.MustCompile(`\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[^}]*)?\}|\$([a-zA-Z_][a-zA-Z0-9_]*)|\[\[([a-zA-Z_][a-zA-Z0-9_]*)(?::[^\]]*)?\]\]`)

// substituteVariables replaces Grafana's template variables in expr so that
// it parses as it would once Grafana substituted them: a builtin
// ($__rate_interval, ...) and a variable of type interval (intervals) by
// 5m, or a number for the _ms and _s ones; any other variable inside a
// string (a label matcher's value) by .*. Any other variable outside a string
// (a metric name, a grouping label) has no plausible stand-in: an error.
func substituteVariables(expr string, intervals map[string]bool) (string, error) {
	inString := stringSpans(expr)
	var out strings.Builder
	var problems []error
	last := 0
	for _, m := range variableRef.FindAllStringSubmatchIndex(expr, -1) {
		name := ""
		for g := 1; g <= 3; g++ {
			if m[2*g] >= 0 {
				name = expr[m[2*g]:m[2*g+1]]
			}
		}
		var value string
		switch {
		case builtins[name] != "":
			value = builtins[name]
		case intervals[name]:
			value = intervalValue
		case inString[m[0]]:
			value = matchAnything
		default:
			problems = append(problems, fmt.Errorf("template variable %s outside a string: no stand-in to parse it with", expr[m[0]:m[1]]))
			continue
		}
		out.WriteString(expr[last:m[0]])
		out.WriteString(value)
		last = m[1]
	}
	out.WriteString(expr[last:])
	return out.String(), errors.Join(problems...)
}

// stringSpans reports, for each byte of a PromQL expression, whether it is
// inside a string literal: "...", '...' (both with backslash escapes) or `...`.
func stringSpans(expr string) []bool {
	in := make([]bool, len(expr))
	var quote byte
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		switch {
		case quote == 0 && (c == '"' || c == '\'' || c == '`'):
			quote = c
		case quote != 0 && c == '\\' && quote != '`' && i+1 < len(expr):
			in[i], in[i+1] = true, true
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			in[i] = true
		}
	}
	return in
}
