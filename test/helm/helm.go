// Package helm tests the chart in charts/flyte-mpi-webhook as users install
// it: `helm lint --strict`, renderings of a table of values, the same objects
// as config/ renders for each mode, and `helm install`, `helm upgrade` and
// `helm uninstall` through the Helm 3 and Helm 4 SDKs into envtest's API
// server. A module of its own, so that the Helm SDKs are never dependencies
// of the webhook.
package helm

import (
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	helmrelease "helm.sh/helm/v3/pkg/release"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

const (
	// ReleaseName is the release the README's install command names: with
	// it, the chart's objects have config/'s names.
	ReleaseName = "flyte-mpi-webhook"
	// Namespace is the README's namespace, config/'s.
	Namespace = "flyte-mpi-webhook-system"
)

// Capabilities a cluster may serve beyond what Helm knows without one, for Render.
const (
	MutatingAdmissionPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
	CertManagerAPI             = "cert-manager.io/v1"
	PrometheusOperatorAPI      = "monitoring.coreos.com/v1"
)

// KubeVersion is the Kubernetes version Render reports, envtest's.
var KubeVersion = chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// ChartDir returns the chart's directory.
func ChartDir() (string, error) {
	return fixtures.Path("charts", "flyte-mpi-webhook")
}

// Render renders the chart as `helm template` does, for ReleaseName in
// Namespace, with values over the chart's, on a cluster that also serves
// apiVersions (such as MutatingAdmissionPolicyAPI). Values that fail the
// schema or the chart's checks are an error, Helm's own.
func Render(values map[string]any, apiVersions ...string) (*manifests.Manifests, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	return RenderChart(dir, values, apiVersions...)
}

// RenderChart is Render for the chart in dir, such as an older release's.
func RenderChart(dir string, values map[string]any, apiVersions ...string) (*manifests.Manifests, error) {
	return renderOn(&KubeVersion, ReleaseName, dir, values, apiVersions...)
}

// RenderHooks is Render's hooks: the objects helm test and helm uninstall
// create, which a release's manifest leaves out.
func RenderHooks(values map[string]any, apiVersions ...string) (*manifests.Manifests, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	rel, err := renderRelease(&KubeVersion, ReleaseName, dir, values, apiVersions...)
	if err != nil {
		return nil, err
	}
	var stream strings.Builder
	for _, h := range rel.Hooks {
		stream.WriteString("---\n" + h.Manifest + "\n")
	}
	m, err := manifests.Parse([]byte(stream.String()))
	if err != nil {
		return nil, fmt.Errorf("the chart's hooks: %w", err)
	}
	return m, nil
}

// renderOn is RenderChart on a cluster of Kubernetes kubeVersion, for the release named release.
func renderOn(kubeVersion *chartutil.KubeVersion, release, dir string, values map[string]any, apiVersions ...string) (*manifests.Manifests, error) {
	manifest, err := renderBytes(kubeVersion, release, dir, values, apiVersions...)
	if err != nil {
		return nil, err
	}
	m, err := manifests.Parse(manifest)
	if err != nil {
		return nil, fmt.Errorf("the chart's rendering: %w", err)
	}
	return m, nil
}

// RenderBytes is Render's output as `helm template` prints it.
func RenderBytes(values map[string]any, apiVersions ...string) ([]byte, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	return renderBytes(&KubeVersion, ReleaseName, dir, values, apiVersions...)
}

func renderBytes(kubeVersion *chartutil.KubeVersion, release, dir string, values map[string]any, apiVersions ...string) ([]byte, error) {
	rel, err := renderRelease(kubeVersion, release, dir, values, apiVersions...)
	if err != nil {
		return nil, err
	}
	return []byte(rel.Manifest), nil
}

// renderRelease renders the chart in dir as `helm template` does.
func renderRelease(kubeVersion *chartutil.KubeVersion, release, dir string, values map[string]any, apiVersions ...string) (*helmrelease.Release, error) {
	chart, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly, install.DryRun = true, true
	install.ReleaseName, install.Namespace = release, Namespace
	install.KubeVersion = kubeVersion
	install.APIVersions = apiVersions
	return install.Run(chart, values)
}
