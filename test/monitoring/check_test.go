package monitoring

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fixtureIndex indexes testdata's small scrapes of the webhook and kube-apiserver.
func fixtureIndex(t *testing.T) Index {
	t.Helper()
	var all [][]*Family
	for source, file := range map[string]string{"webhook": "webhook-metrics.txt", "kube-apiserver": "apiserver-metrics.txt"} {
		f, err := os.Open(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		families, err := ParseScrape(source, f)
		_ = f.Close()
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, families)
	}
	return NewIndex(all...)
}

// TestFixturesPass checks testdata's rules and dashboard, which name only
// what testdata's scrapes hold, rows' panels, recorded metrics, ALERTS, up
// and template variables among them.
func TestFixturesPass(t *testing.T) {
	rules, err := RuleQueries(filepath.Join("testdata", "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	panels, err := DashboardQueries(filepath.Join("testdata", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var where []string
	for _, q := range panels {
		where = append(where, q.Where)
	}
	want := []string{
		`panel "Decisions" (id 1), target A`,
		`row "The API server's view", panel "p99 admission latency" (id 3), target A`,
		`row "The API server's view", panel "p99 admission latency" (id 3), target B`,
		`panel "Calls failing" (id 5), target A`,
		"variable namespace",
		"variable outcome",
	}
	if diff := cmp.Diff(want, where); diff != "" {
		t.Errorf("the dashboard's queries (-want +got):\n%s", diff)
	}
	if len(rules) != 5 {
		t.Errorf("%d rules, want 5", len(rules))
	}
	problems, notes := Check(append(rules, panels...), fixtureIndex(t))
	for _, p := range problems {
		t.Errorf("%v", p)
	}
	for _, n := range notes {
		t.Errorf("note: %v", n)
	}
}

// TestWrongNamesAreReported checks that bad-rules.yaml's wrong metric name
// and wrong label name each fail, naming the file, the alert, the
// expression and what is missing.
func TestWrongNamesAreReported(t *testing.T) {
	path := filepath.Join("testdata", "bad-rules.yaml")
	rules, err := RuleQueries(path)
	if err != nil {
		t.Fatal(err)
	}
	problems, _ := Check(rules, fixtureIndex(t))
	var got []string
	for _, p := range problems {
		got = append(got, p.Error())
	}
	want := []string{
		path + ": group wrong, alert WrongMetricName (line 6): metric flyte_mpi_webhook_decision_total is in no scrape of the webhook " +
			"or kube-apiserver (nearest: flyte_mpi_webhook_decisions_total)\n" +
			"\texpr: rate(flyte_mpi_webhook_decision_total[5m]) > 0",
		path + ": group wrong, alert WrongLabelName (line 8): metric apiserver_admission_webhook_rejection_count (a counter of " +
			"kube-apiserver) has no label webhook_name: it has error_type, name, operation, rejection_code, type\n" +
			`	expr: sum(rate(apiserver_admission_webhook_rejection_count{webhook_name="mpijob-worker-command.mpi.flyte.org"}[5m])) > 0`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the problems (-want +got):\n%s", diff)
	}
}

// TestCheck holds what each kind of mistake is reported as.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		// want is a part of the one problem reported; empty: none.
		want string
	}{
		{"a counter", `rate(flyte_mpi_webhook_decisions_total{outcome="mutated"}[5m])`, ""},
		{"a scrape label", `flyte_mpi_webhook_decisions_total{namespace="x", pod=~"a.*", job!="", instance="i", service="s", endpoint="e", container="c"}`, ""},
		{"a histogram's bucket and le", `histogram_quantile(0.9, sum by (le) (rate(controller_runtime_webhook_latency_seconds_bucket[5m])))`, ""},
		{"a histogram's sum and count", `rate(controller_runtime_webhook_latency_seconds_sum[5m]) / rate(controller_runtime_webhook_latency_seconds_count[5m])`, ""},
		{"a summary's quantile", `go_gc_duration_seconds{quantile="0.5"}`, ""},
		{"__name__ equal", `{__name__="flyte_mpi_webhook_decisions_total", outcome="mutated"}`, ""},
		{"__name__ regex", `{__name__=~"flyte_mpi_webhook_.*", outcome="mutated"}`, ""},
		{"up", `up{job="flyte-mpi-webhook"} == 0`, ""},
		{"label_replace's new label", `sum by (hook) (label_replace(controller_runtime_webhook_requests_total, "hook", "$1", "webhook", "(.*)"))`, ""},
		{"on, group_left", `controller_runtime_webhook_requests_total * on (webhook) group_left (code) controller_runtime_webhook_requests_total`, ""},
		{"without a label nobody has", `sum without (nothing) (flyte_mpi_webhook_decisions_total)`, ""},

		{"a wrong metric", `rate(flyte_mpi_webhook_decision_total[5m])`, "metric flyte_mpi_webhook_decision_total is in no scrape"},
		{"a wrong label", `flyte_mpi_webhook_decisions_total{result="mutated"}`, "has no label result: it has outcome, source"},
		{"a wrong label in a range", `rate(flyte_mpi_webhook_decisions_total{result="mutated"}[5m])`, "has no label result"},
		{"a wrong label in a subquery", `max_over_time(flyte_mpi_webhook_decisions_total{result="x"}[1h:5m])`, "has no label result"},
		{"a histogram by its family name", `controller_runtime_webhook_latency_seconds`, "is a histogram of webhook: PromQL selects controller_runtime_webhook_latency_seconds_bucket"},
		{"le on a histogram's count", `controller_runtime_webhook_latency_seconds_count{le="1"}`, "has no label le"},
		{"a wrong by", `sum by (name) (controller_runtime_webhook_requests_total)`, "sum by (name): no series under it has label name (they have: code, webhook)"},
		{"a wrong on", `flyte_mpi_webhook_decisions_total / on (webhook) controller_runtime_webhook_requests_total`, "on (webhook): no series on the left of / has label webhook"},
		{"a wrong group_left", `flyte_mpi_webhook_decisions_total * on () group_left (code, name) controller_runtime_webhook_requests_total`, "group_left (code, name): no series it copies from has label name"},
		{"a wrong label_replace source", `label_replace(flyte_mpi_webhook_decisions_total, "x", "$1", "webhook", "(.*)")`, "label_replace reads label webhook"},
		{"a __name__ regex matching nothing", `{__name__=~"flyte_mpi_hook_.*"}`, "no metric of the webhook or kube-apiserver has a name that"},
		{"no parse", `sum(rate(flyte_mpi_webhook_decisions_total[5m])`, "does not parse"},
		{"a Prometheus 3 function", `info(flyte_mpi_webhook_decisions_total)`, "does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, _ := Check([]Query{{File: "f", Where: "w", Expr: tc.expr, PromQL: tc.expr}}, fixtureIndex(t))
			switch {
			case tc.want == "" && len(problems) > 0:
				t.Errorf("want no problem, got %v", problems)
			case tc.want != "" && len(problems) != 1:
				t.Errorf("want one problem with %q, got %d: %v", tc.want, len(problems), problems)
			case tc.want != "" && !strings.Contains(problems[0].What, tc.want):
				t.Errorf("got %q, want it to contain %q", problems[0].What, tc.want)
			}
		})
	}
}

// TestUnseenValueIsANote checks that a value no scraped series has is a
// note, not a problem: the traffic that makes it may not have happened.
func TestUnseenValueIsANote(t *testing.T) {
	problems, notes := Check([]Query{{File: "f", Where: "w", Expr: "x",
		PromQL: `flyte_mpi_webhook_decisions_total{outcome="malformed"}`}}, fixtureIndex(t))
	if len(problems) != 0 {
		t.Errorf("problems: %v", problems)
	}
	if len(notes) != 1 || !strings.Contains(notes[0].What, `no scraped series has outcome="malformed" (seen: denied_invalid, mutated)`) {
		t.Errorf("notes: %v", notes)
	}
}

// TestSubstituteVariables holds what stands for each kind of template variable.
func TestSubstituteVariables(t *testing.T) {
	intervals := map[string]bool{"resolution": true}
	for _, tc := range []struct{ expr, want, err string }{
		{`rate(x[$__rate_interval])`, `rate(x[5m])`, ""},
		{`rate(x[${__interval}])`, `rate(x[5m])`, ""},
		{`x / $__range_s`, `x / 300`, ""},
		{`rate(x[$resolution])`, `rate(x[5m])`, ""},
		{`x{namespace=~"$namespace", pod="${pod:regex}", a='[[a]]'}`, `x{namespace=~".*", pod=".*", a='.*'}`, ""},
		{`x{a="\"$b"}`, `x{a="\".*"}`, ""},
		{"x{a=`$b`}", "x{a=`.*`}", ""},
		{`sum by ($group) (x)`, "", "template variable $group outside a string"},
		{`$metric{a="b"}`, "", "template variable $metric outside a string"},
	} {
		got, err := substituteVariables(tc.expr, intervals)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one with %q", tc.expr, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.expr, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("%s: got %s, want %s", tc.expr, got, tc.want)
		}
	}
}

// TestRuleFileLoadsAsPrometheusLoadsIt checks that a rule file Prometheus
// 2.42 would refuse is refused, naming the rule.
func TestRuleFileLoadsAsPrometheusLoadsIt(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"no expr", "groups: [{name: g, rules: [{alert: A}]}]", "field 'expr' must be set in rule"},
		{"an unknown field", "groups: [{name: g, rules: [{alert: A, expr: up, severity: x}]}]", "field severity not found"},
		{"a record name Prometheus 2.42 refuses", "groups: [{name: g, rules: [{record: a.b, expr: up}]}]", "not a valid metric name for Prometheus 2.42"},
		{"a label name Prometheus 2.42 refuses", "groups: [{name: g, rules: [{alert: A, expr: up, labels: {a.b: c}}]}]", `"a.b" is not a valid label name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := RuleQueries(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}
