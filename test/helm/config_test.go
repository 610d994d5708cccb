package helm

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/test/fixtures"
	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// installs are the kustomizations of config/ that each mode installs.
var installs = map[string]string{"webhook": "default", "policy": "policy-only", "both": "default-with-policy"}

// helmLabels are the labels the chart puts on every object, and selects its
// pods by besides app.kubernetes.io/name; config/ says managed-by kustomize.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// secretNames are config/'s names of the Secrets cert-manager writes, which
// kustomize's namePrefix does not reach, and the chart's, which it prefixes
// as every other name.
var secretNames = map[string]string{
	"webhook-server-cert": "flyte-mpi-webhook-webhook-server-cert",
	"webhook-ca":          "flyte-mpi-webhook-webhook-ca",
}

// TestOneTruthWithConfig holds the chart and config/ to one install: for
// each mode, the chart's rendering and config/'s hold the same objects with
// the same fields, but for what the chart adds (its labels, the pods'
// priorityClassName, the image's pullPolicy) and what Helm does
// instead (the namespace, which `helm install -n` creates). With
// certificates.source certManager the certificates are config/certmanager's;
// with the default, generated, the chart has a Secret and a caBundle where
// config/ has cert-manager's objects and annotation. clientAuth.enabled is
// config/client-auth, in each mode that runs the webhook.
func TestOneTruthWithConfig(t *testing.T) {
	root, err := fixtures.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, install := range []struct {
		mode       string
		clientAuth bool
	}{{"webhook", false}, {"policy", false}, {"both", false}, {"webhook", true}, {"both", true}} {
		mode, dir := install.mode, installs[install.mode]
		kustomized, err := manifests.Render(filepath.Join(root, "config", dir), "")
		against := "config/" + dir
		if install.clientAuth {
			kustomized, err = manifests.RenderWith(filepath.Join(root, "config", dir), filepath.Join(root, "config", "client-auth"))
			against += " with config/client-auth"
		}
		if err != nil {
			t.Fatal(err)
		}
		repository, tag := configImage(t, kustomized)
		for _, source := range []string{"certManager", "generate"} {
			t.Run(fmt.Sprintf("%s, certificates %s, clientAuth %t, against %s", mode, source, install.clientAuth, against), func(t *testing.T) {
				// config/'s image: the chart has none by default.
				chart, err := Render(values("mode", mode, "certificates.source", source, "image.repository", repository, "image.tag", tag,
					"clientAuth.enabled", install.clientAuth), MutatingAdmissionPolicyAPI, CertManagerAPI)
				if err != nil {
					t.Fatal(err)
				}
				want := byName(kustomized, func(obj *unstructured.Unstructured) bool {
					switch {
					case obj.GetKind() == "Namespace":
						return false
					case source == "generate" && obj.GroupVersionKind().Group == "cert-manager.io":
						return false
					case source == "generate" && obj.GetKind() == "MutatingWebhookConfiguration":
						unstructured.RemoveNestedField(obj.Object, "metadata", "annotations", "cert-manager.io/inject-ca-from")
						dropEmpty(obj.Object["metadata"].(map[string]any), "annotations")
					}
					return true
				})
				got := byName(chart, func(obj *unstructured.Unstructured) bool {
					switch obj.GetKind() {
					case "Secret":
						return false
					case "MutatingWebhookConfiguration":
						webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
						for _, w := range webhooks {
							unstructured.RemoveNestedField(w.(map[string]any), "clientConfig", "caBundle")
						}
						_ = unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks")
					}
					return true
				})
				for name, obj := range got {
					withoutLabelsConfigLacks(want[name], obj)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s and the chart with mode=%s differ (-config/ +chart):\n%s", against, mode, diff)
				}
			})
		}
	}
}

// configImage returns the repository and tag of the image config/'s
// Deployment runs (any, for an install without one). A release's tag (vX.Y.Z)
// must be the chart's appVersion, the tag the chart defaults to.
func configImage(t *testing.T, m *manifests.Manifests) (repository, tag string) {
	t.Helper()
	deployment, err := m.Find("Deployment")
	if err != nil {
		return "registry.example/flyte-mpi-webhook", "v0.0.0"
	}
	containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	image, _, _ := unstructured.NestedString(containers[0].(map[string]any), "image")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repository, tag = image[:i], image[i+1:]
	} else {
		repository, tag = image, "latest"
	}
	if strings.HasPrefix(tag, "v") {
		dir, err := ChartDir()
		if err != nil {
			t.Fatal(err)
		}
		chart, err := loader.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if chart.Metadata.AppVersion != tag {
			t.Errorf("config/ runs release %s, the chart's appVersion is %s: make release sets both", tag, chart.Metadata.AppVersion)
		}
	}
	return repository, tag
}

// byName returns m's objects that keep returns true for, by Kind/name, each
// without what the chart adds (see TestOneTruthWithConfig); keep may edit them.
func byName(m *manifests.Manifests, keep func(*unstructured.Unstructured) bool) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, obj := range m.Objects {
		obj = obj.DeepCopy()
		if !keep(obj) {
			continue
		}
		withoutChartAdditions(obj.Object, "")
		out[obj.GetKind()+"/"+obj.GetName()] = obj.Object
	}
	return out
}

// withoutChartAdditions removes, at any depth of node (under key), the
// chart's labels from labels and selectors, the pods' priorityClassName and
// the containers' imagePullPolicy, and gives cert-manager's Secrets the chart's names.
func withoutChartAdditions(node any, key string) {
	switch n := node.(type) {
	case map[string]any:
		if key == "labels" || key == "matchLabels" || key == "selector" {
			for _, label := range helmLabels {
				delete(n, label)
			}
		}
		if _, isPod := n["containers"]; isPod && key == "spec" {
			delete(n, "priorityClassName")
		}
		if _, isContainer := n["image"]; isContainer {
			delete(n, "imagePullPolicy")
		}
		for k, v := range n {
			if name, ok := v.(string); ok && k == "secretName" && secretNames[name] != "" {
				n[k] = secretNames[name]
			}
			// A projected volume's Secret (config/client-auth's).
			if secret, ok := v.(map[string]any); ok && k == "secret" {
				if name, ok := secret["name"].(string); ok && secretNames[name] != "" {
					secret["name"] = secretNames[name]
				}
			}
			// kustomize's YAML library reads a folded scalar's more-indented
			// line with an empty line before it, which CEL ignores.
			if expression, ok := v.(string); ok && k == "expression" {
				n[k] = strings.ReplaceAll(expression, "\n\n", "\n")
			}
			withoutChartAdditions(v, k)
		}
		for _, k := range []string{"labels", "annotations"} {
			dropEmpty(n, k)
		}
	case []any:
		for _, v := range n {
			withoutChartAdditions(v, key)
		}
	}
}

// withoutLabelsConfigLacks removes app.kubernetes.io/name from chart's
// labels where config/'s object, want, has no labels: the chart labels
// every object, config/ all but its webhook configuration.
func withoutLabelsConfigLacks(want, chart map[string]any) {
	if want == nil {
		return
	}
	if _, found, _ := unstructured.NestedMap(want, "metadata", "labels"); !found {
		unstructured.RemoveNestedField(chart, "metadata", "labels", "app.kubernetes.io/name")
		dropEmpty(chart["metadata"].(map[string]any), "labels")
	}
}

// dropEmpty deletes n[key] when it is an empty map.
func dropEmpty(n map[string]any, key string) {
	if m, ok := n[key].(map[string]any); ok && len(m) == 0 {
		delete(n, key)
	}
}

// TestOneTruthCoversEveryKind keeps TestOneTruthWithConfig from passing on
// nothing: each mode compares the objects config/ renders.
func TestOneTruthCoversEveryKind(t *testing.T) {
	root, err := fixtures.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"default": {"Deployment", "MutatingWebhookConfiguration", "PodDisruptionBudget", "Service", "ServiceAccount"},
		"policy-only": {"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy",
			"ValidatingAdmissionPolicyBinding"},
	}
	for dir, kinds := range want {
		m, err := manifests.Render(filepath.Join(root, "config", dir), "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, obj := range m.Objects {
			got = append(got, obj.GetKind())
		}
		for _, kind := range kinds {
			if !slices.Contains(got, kind) {
				t.Errorf("config/%s renders no %s: %v", dir, kind, got)
			}
		}
	}
}
