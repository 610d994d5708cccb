package monitoring

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// ScrapeLabels are the labels Prometheus puts on every series it scrapes
// (job, instance), and those a prometheus-operator ServiceMonitor or
// PodMonitor adds from the target (namespace, pod, service, endpoint,
// container): an expression may match them whatever a binary exports.
var ScrapeLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// ScrapeSeries are the series Prometheus writes itself for each target,
// with the ScrapeLabels only: up{job="..."} is how an alert sees a target
// it cannot scrape.
var ScrapeSeries = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped",
	"scrape_samples_post_metric_relabeling", "scrape_series_added"}

// Alert series: Prometheus writes ALERTS{alertname, alertstate, ...} and
// ALERTS_FOR_STATE{alertname, ...} for each alerting rule, with the rule's
// labels and those of its expression's result.
const (
	alertsSeries         = "ALERTS"
	alertsForStateSeries = "ALERTS_FOR_STATE"
)

// Problem is what is wrong with one query: it does not parse, or it names a
// metric or a label that the scrape lacks.
type Problem struct {
	Query Query
	What  string
}

func (p Problem) Error() string {
	expr := p.Query.Expr
	if p.Query.PromQL != p.Query.Expr {
		expr += "\n\tparsed as: " + p.Query.PromQL
	}
	return fmt.Sprintf("%s: %s: %s\n\texpr: %s", p.Query.File, p.Query.Where, p.What, expr)
}

// Check parses each query with Prometheus 2.42's parser and checks what it
// names against ix, the scrapes: the metric of each vector and matrix
// selector (a histogram's name_bucket, name_sum, name_count), each label a
// selector matches, each label of by (...), on (...), group_left (...)
// and label_replace's source. A metric a recording rule among queries
// writes counts as exported, with the labels of the series its expression
// selects and the rule's; so do Prometheus' own ALERTS and ScrapeSeries.
// The labels of ScrapeLabels always count. It returns the problems, and as
// notes the matchers whose value no scraped series has (the traffic that
// makes it may not have happened: not a failure).
func Check(queries []Query, ix Index) (problems, notes []Problem) {
	ix = maps.Clone(ix)
	for _, name := range ScrapeSeries {
		if _, ok := ix[name]; !ok {
			ix[name] = &Series{Labels: map[string]bool{}, Origin: "a series Prometheus writes for each target"}
		}
	}
	parsed := make([]parser.Expr, len(queries))
	for i, q := range queries {
		expr, err := parser.ParseExpr(q.PromQL)
		if err != nil {
			problems = append(problems, Problem{q, fmt.Sprintf("does not parse: %v", err)})
			continue
		}
		parsed[i] = expr
	}
	addRuleSeries(queries, parsed, ix)
	for i, q := range queries {
		if parsed[i] == nil {
			continue
		}
		p, n := checkExpr(parsed[i], ix)
		if q.Label != "" && !isScrapeLabel(q.Label) && !available(parsed[i], ix)[q.Label] {
			p = append(p, fmt.Sprintf("label_values lists label %s, which no series of %s has", q.Label, q.Expr))
		}
		for _, what := range p {
			problems = append(problems, Problem{q, what})
		}
		for _, what := range n {
			notes = append(notes, Problem{q, what})
		}
	}
	return problems, notes
}

// addRuleSeries adds to ix the metrics the recording rules write and the
// ALERTS series. A record may select another: it repeats until nothing changes.
func addRuleSeries(queries []Query, parsed []parser.Expr, ix Index) {
	for changed, rounds := true, 0; changed && rounds <= len(queries); rounds++ {
		changed = false
		for i, q := range queries {
			if q.Record == "" || parsed[i] == nil {
				continue
			}
			l := outputLabels(parsed[i], ix, q.Labels)
			if old, ok := ix[q.Record]; ok && old.Family == nil && maps.Equal(old.Labels, l) {
				continue
			}
			if old, ok := ix[q.Record]; ok && old.Family != nil {
				continue // a scraped name: the record clashes, and Prometheus reports it
			}
			ix[q.Record] = &Series{Labels: l, Origin: "recorded by " + q.File + ": " + q.Where}
			changed = true
		}
	}
	alerts := map[string]bool{"alertname": true, "alertstate": true}
	for i, q := range queries {
		if q.Alert != "" && parsed[i] != nil {
			maps.Copy(alerts, outputLabels(parsed[i], ix, q.Labels))
		}
	}
	ix[alertsSeries] = &Series{Labels: alerts, Origin: "the alerts' series Prometheus writes"}
	forState := maps.Clone(alerts)
	delete(forState, "alertstate")
	ix[alertsForStateSeries] = &Series{Labels: forState, Origin: "the alerts' series Prometheus writes"}
}

// outputLabels is what a rule's series may carry: available's labels, and the rule's own.
func outputLabels(expr parser.Expr, ix Index, ruleLabels []string) map[string]bool {
	l := available(expr, ix)
	for _, name := range ScrapeLabels {
		l[name] = true
	}
	for _, name := range ruleLabels {
		l[name] = true
	}
	return l
}

// checkExpr returns what expr names that ix lacks, and notes on values.
func checkExpr(expr parser.Expr, ix Index) (problems, notes []string) {
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			p, nt := checkSelector(n, ix)
			problems, notes = append(problems, p...), append(notes, nt...)
		case *parser.AggregateExpr:
			if n.Without {
				return nil // leaving out a label no series has changes nothing
			}
			have := available(n.Expr, ix)
			for _, l := range n.Grouping {
				if !isScrapeLabel(l) && !have[l] {
					problems = append(problems, fmt.Sprintf("%s by (%s): no series under it has label %s (they have: %s)",
						n.Op, strings.Join(n.Grouping, ", "), l, labelList(have)))
				}
			}
		case *parser.BinaryExpr:
			problems = append(problems, checkMatching(n, ix)...)
		case *parser.Call:
			problems = append(problems, checkLabelFunction(n, ix)...)
		}
		return nil
	})
	return problems, notes
}

// checkSelector checks a selector's metric names and the labels it matches.
func checkSelector(vs *parser.VectorSelector, ix Index) (problems, notes []string) {
	names, problem := selectorNames(vs, ix)
	if problem != "" {
		return []string{problem}, nil
	}
	for _, name := range names {
		s, ok := ix[name]
		if !ok {
			if f := ix.familyOf(name); f != nil {
				problems = append(problems, fmt.Sprintf("metric %s is a %s of %s: PromQL selects %s_bucket, %s_sum or %s_count",
					name, f.Type, f.Source, name, name, name))
				continue
			}
			problems = append(problems, fmt.Sprintf("metric %s is in no scrape of the webhook or kube-apiserver%s", name, ix.suggest(name)))
			continue
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName || isScrapeLabel(m.Name) {
				continue
			}
			if !s.Labels[m.Name] {
				problems = append(problems, fmt.Sprintf("metric %s (%s) has no label %s: it has %s", name, s.Origin, m.Name, labelList(s.Labels)))
				continue
			}
			if note := unseenValue(s, m); note != "" {
				notes = append(notes, fmt.Sprintf("metric %s: %s", name, note))
			}
		}
	}
	return problems, notes
}

// selectorNames returns the metric names a selector selects: its name, or
// those of ix that its __name__ matchers match.
func selectorNames(vs *parser.VectorSelector, ix Index) ([]string, string) {
	if vs.Name != "" {
		return []string{vs.Name}, ""
	}
	var nameMatchers []*labels.Matcher
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName {
			if m.Type == labels.MatchEqual {
				return []string{m.Value}, ""
			}
			nameMatchers = append(nameMatchers, m)
		}
	}
	if len(nameMatchers) == 0 {
		return nil, "" // the parser refuses a selector without a name matcher that matches a non-empty value
	}
	var names []string
	for _, name := range slices.Sorted(maps.Keys(ix)) {
		if !slices.ContainsFunc(nameMatchers, func(m *labels.Matcher) bool { return !m.Matches(name) }) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Sprintf("no metric of the webhook or kube-apiserver has a name that %s matches", vs.String())
	}
	return names, ""
}

// unseenValue notes an equality matcher whose value none of the family's
// scraped series has (le and quantile are not kept: not checked).
func unseenValue(s *Series, m *labels.Matcher) string {
	if s.Family == nil || m.Type != labels.MatchEqual || m.Value == "" {
		return ""
	}
	for _, series := range s.Family.Series {
		if v, ok := series[m.Name]; !ok || v == m.Value {
			return ""
		}
	}
	return fmt.Sprintf("no scraped series has %s=%q (seen: %s)", m.Name, m.Value, strings.Join(s.Family.LabelValues()[m.Name], ", "))
}

// checkMatching checks the labels of on (...) on both sides, and those of
// group_left (...) or group_right (...) on the side they are copied from.
func checkMatching(n *parser.BinaryExpr, ix Index) []string {
	vm := n.VectorMatching
	if vm == nil {
		return nil
	}
	var problems []string
	lhs, rhs := available(n.LHS, ix), available(n.RHS, ix)
	if vm.On {
		for _, l := range vm.MatchingLabels {
			for side, have := range map[string]map[string]bool{"left": lhs, "right": rhs} {
				if !isScrapeLabel(l) && !have[l] {
					problems = append(problems, fmt.Sprintf("on (%s): no series on the %s of %s has label %s (they have: %s)",
						strings.Join(vm.MatchingLabels, ", "), side, n.Op, l, labelList(have)))
				}
			}
		}
	}
	from, group := rhs, "group_left"
	if vm.Card == parser.CardOneToMany {
		from, group = lhs, "group_right"
	}
	for _, l := range vm.Include {
		if !isScrapeLabel(l) && !from[l] {
			problems = append(problems, fmt.Sprintf("%s (%s): no series it copies from has label %s (they have: %s)",
				group, strings.Join(vm.Include, ", "), l, labelList(from)))
		}
	}
	slices.Sort(problems) // the map's order
	return problems
}

// checkLabelFunction checks the source labels of label_replace and label_join.
func checkLabelFunction(n *parser.Call, ix Index) []string {
	var sources []parser.Expr
	switch n.Func.Name {
	case "label_replace":
		sources = n.Args[3:4]
	case "label_join":
		sources = n.Args[3:]
	default:
		return nil
	}
	have := available(n.Args[0], ix)
	var problems []string
	for _, arg := range sources {
		lit, ok := arg.(*parser.StringLiteral)
		if !ok || lit.Val == "" || isScrapeLabel(lit.Val) || have[lit.Val] {
			continue
		}
		problems = append(problems, fmt.Sprintf("%s reads label %s, which no series it is given has (they have: %s)",
			n.Func.Name, lit.Val, labelList(have)))
	}
	return problems
}

// available returns the labels that the series under node may carry: those
// of every metric a selector in it selects, and those label_replace,
// label_join and count_values add. It is their union, not what each step
// keeps: it catches a label that no metric has, not one a sum dropped.
func available(node parser.Node, ix Index) map[string]bool {
	have := map[string]bool{}
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			names, _ := selectorNames(n, ix)
			for _, name := range names {
				if s, ok := ix[name]; ok {
					maps.Copy(have, s.Labels)
				}
			}
		case *parser.Call:
			if (n.Func.Name == "label_replace" || n.Func.Name == "label_join") && len(n.Args) > 1 {
				if dst, ok := n.Args[1].(*parser.StringLiteral); ok {
					have[dst.Val] = true
				}
			}
		case *parser.AggregateExpr:
			if n.Op == parser.COUNT_VALUES {
				if l, ok := n.Param.(*parser.StringLiteral); ok {
					have[l.Val] = true
				}
			}
		}
		return nil
	})
	return have
}

func isScrapeLabel(name string) bool { return slices.Contains(ScrapeLabels, name) }

func labelList(set map[string]bool) string {
	if len(set) == 0 {
		return "no labels"
	}
	return strings.Join(slices.Sorted(maps.Keys(set)), ", ")
}

// suggest names up to three metrics of ix that share at least their first
// two words with name, the nearest first (edit distance), for the message.
func (ix Index) suggest(name string) string {
	words := strings.Split(name, "_")
	var near []string
	for other := range ix {
		o := strings.Split(other, "_")
		if len(words) > 1 && len(o) > 1 && words[0] == o[0] && words[1] == o[1] {
			near = append(near, other)
		}
	}
	if len(near) == 0 {
		return ""
	}
	slices.SortFunc(near, func(a, b string) int {
		if d := editDistance(name, a) - editDistance(name, b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return " (nearest: " + strings.Join(near[:min(3, len(near))], ", ") + ")"
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
