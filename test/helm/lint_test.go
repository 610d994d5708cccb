package helm

import (
	"testing"

	lintv3 "helm.sh/helm/v3/pkg/lint"
	supportv3 "helm.sh/helm/v3/pkg/lint/support"
	lintv4 "helm.sh/helm/v4/pkg/chart/v2/lint"
	supportv4 "helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// TestLint runs `helm lint --strict` as Helm 3 and Helm 4 do: a warning
// fails too. The values are the README's install's, since the chart has no
// default image.
func TestLint(t *testing.T) {
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range map[string]map[string]any{
		"the README's install": withImage(),
		"every extra":          withImage("podDisruptionBudget.enabled", false, "logLevel", 2, "decisions.onInvalid", "warn"),
	} {
		t.Run("helm 3, "+name, func(t *testing.T) {
			linter := lintv3.All(dir, values, Namespace, false)
			for _, msg := range linter.Messages {
				t.Log(msg)
			}
			if linter.HighestSeverity >= supportv3.WarningSev {
				t.Errorf("helm lint --strict fails")
			}
		})
		t.Run("helm 4, "+name, func(t *testing.T) {
			linter := lintv4.RunAll(dir, values, Namespace)
			for _, msg := range linter.Messages {
				t.Log(msg)
			}
			if linter.HighestSeverity >= supportv4.WarningSev {
				t.Errorf("helm lint --strict fails")
			}
		})
	}
}
