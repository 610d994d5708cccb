package helm

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// ruleFile reads config/prometheus/rules.yaml, the alerts the chart renders.
func ruleFile(t *testing.T) map[string]any {
	t.Helper()
	path, err := fixtures.Path("config", "prometheus", "rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rules map[string]any
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	return rules
}

// renderedGroups returns the rendered PrometheusRule's spec.groups.
func renderedGroups(t *testing.T, m *manifests.Manifests, name string) []any {
	t.Helper()
	rule, err := m.FindNamed("PrometheusRule", name)
	if err != nil {
		t.Fatal(err)
	}
	groups, _, err := unstructured.NestedSlice(rule.Object, "spec", "groups")
	if err != nil {
		t.Fatal(err)
	}
	return groups
}

// groupNamed returns the group of rules named name.
func groupNamed(t *testing.T, groups []any, name string) any {
	t.Helper()
	i := slices.IndexFunc(groups, func(g any) bool { return g.(map[string]any)["name"] == name })
	if i < 0 {
		t.Fatalf("no group %s", name)
	}
	return groups[i]
}

// TestPrometheusRuleIsConfigs holds the chart's PrometheusRule, for the README's release, to the
// groups of config/prometheus/rules.yaml, which promtool's tests check: the webhook's alerts when a
// webhook runs, the policies' when a policy does.
func TestPrometheusRuleIsConfigs(t *testing.T) {
	want := ruleFile(t)["groups"].([]any)
	webhookGroup, policyGroup := groupNamed(t, want, "flyte-mpi-webhook"), groupNamed(t, want, "flyte-mpi-webhook-policy")
	for _, tc := range []struct {
		mode string
		want []any
	}{
		{mode: "webhook", want: []any{webhookGroup}},
		{mode: "policy", want: []any{policyGroup}},
		{mode: "both", want: []any{webhookGroup, policyGroup}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			v := withImage("mode", tc.mode, "prometheusRule.enabled", true)
			if tc.mode != "policy" {
				v = withImage("mode", tc.mode, "prometheusRule.enabled", true, "serviceMonitor.enabled", true)
			}
			m, err := Render(v, PrometheusOperatorAPI, MutatingAdmissionPolicyAPI)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, renderedGroups(t, m, "flyte-mpi-webhook")); diff != "" {
				t.Errorf("spec.groups (-config/prometheus/rules.yaml +chart):\n%s", diff)
			}
		})
	}
}

// TestPrometheusRuleNames renders the alerts for another release, with the values that change
// them: the release's job, policies and runbooks, FlyteMPIJobsDenied's severity, the extra labels.
func TestPrometheusRuleNames(t *testing.T) {
	m, err := renderOn(&KubeVersion, "ml", mustChartDir(t), withImage("mode", "both", "prometheusRule.enabled", true,
		"prometheusRule.scrapeJob", "kubernetes-pods", "prometheusRule.severity", "info",
		"prometheusRule.runbookURL", "https://wiki.example/flyte/RUNBOOKS",
		"prometheusRule.additionalRuleLabels", map[string]any{"team": "ml-platform"}),
		PrometheusOperatorAPI, MutatingAdmissionPolicyAPI)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(renderedGroups(t, m, "ml-flyte-mpi-webhook"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	for _, gone := range []string{"flyte-mpi-webhook-metrics", `\"flyte-mpi-webhook-worker-command\"`, "github.com"} {
		if strings.Contains(text, gone) {
			t.Errorf("the rules still name %s", gone)
		}
	}
	for _, name := range []string{`job=\"kubernetes-pods\"`, `policy=\"ml-flyte-mpi-webhook-worker-command\"`,
		"https://wiki.example/flyte/RUNBOOKS#flytempiwebhookcallsfailing"} {
		if !strings.Contains(text, name) {
			t.Errorf("the rules do not name %s", name)
		}
	}
	alerts := 0
	for _, group := range renderedGroups(t, m, "ml-flyte-mpi-webhook") {
		for _, rule := range group.(map[string]any)["rules"].([]any) {
			alerts++
			labels := rule.(map[string]any)["labels"].(map[string]any)
			alert := rule.(map[string]any)["alert"]
			if labels["team"] != "ml-platform" {
				t.Errorf("%s: labels %v, without additionalRuleLabels' team", alert, labels)
			}
			if alert == "FlyteMPIJobsDenied" && labels["severity"] != "info" {
				t.Errorf("FlyteMPIJobsDenied's severity %v; want prometheusRule.severity's info", labels["severity"])
			}
		}
	}
	if alerts != 7 {
		t.Errorf("%d alerts; want rules.yaml's 7", alerts)
	}
}

// TestGrafanaDashboard renders the dashboard's ConfigMap: config/grafana's JSON as it is for the
// README's release, in the namespace and with the label the sidecar watches.
func TestGrafanaDashboard(t *testing.T) {
	path, err := fixtures.Path("config", "grafana", "flyte-mpi-webhook.json")
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Render(withImage("grafanaDashboard.enabled", true, "grafanaDashboard.namespace", "monitoring",
		"grafanaDashboard.annotations", map[string]any{"grafana_folder": "Flyte"}))
	if err != nil {
		t.Fatal(err)
	}
	key := "ConfigMap/flyte-mpi-webhook-dashboard "
	got := fields(t, m, map[string]string{key + "{.metadata.namespace}": "", key + "{.metadata.labels.grafana_dashboard}": "",
		key + "{.metadata.annotations.grafana_folder}": ""})
	if diff := cmp.Diff(map[string]string{key + "{.metadata.namespace}": "monitoring", key + "{.metadata.labels.grafana_dashboard}": "1",
		key + "{.metadata.annotations.grafana_folder}": "Flyte"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	dashboard := fields(t, m, map[string]string{key + `{.data.flyte-mpi-webhook\.json}`: ""})[key+`{.data.flyte-mpi-webhook\.json}`]
	if dashboard != strings.TrimSuffix(string(want), "\n") {
		t.Errorf("the ConfigMap's dashboard is not config/grafana's:\n%s", cmp.Diff(string(want), dashboard))
	}
	if !json.Valid([]byte(dashboard)) {
		t.Errorf("the dashboard is not JSON")
	}

	m, err = Render(withImage("grafanaDashboard.enabled", false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.FindNamed("ConfigMap", "flyte-mpi-webhook-dashboard"); err == nil {
		t.Errorf("a dashboard rendered while grafanaDashboard.enabled is false")
	}
}

func mustChartDir(t *testing.T) string {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
