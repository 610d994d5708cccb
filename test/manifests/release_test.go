package manifests_test

// What a user meets installing from config/ or the Makefile: the released
// image pinned, an overlay in another namespace, the order undeploy deletes
// in, and the settings make stops without.

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// installs are the three installs of config/, as make's INSTALL names them.
var installs = []string{"default", "policy-only", "default-with-policy"}

// newestRelease is the newest release CHANGELOG.md lists.
func newestRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?)\]`).FindSubmatch(b)
	if m == nil {
		t.Fatal("CHANGELOG.md: no release heading such as ## [v0.1.0]")
	}
	return string(m[1])
}

func TestOverlayInAnotherNamespaceMovesEveryReference(t *testing.T) {
	const namespace = "ml-platform"
	for _, install := range installs {
		t.Run(install, func(t *testing.T) {
			m := render(t, namespaceOverlay(t, filepath.Join(configDir, install), namespace), "")
			if bytes.Contains(m.YAML, []byte("flyte-mpi-webhook-system")) {
				t.Errorf("the render still names flyte-mpi-webhook-system:\n%s", m.YAML)
			}
			checks := map[string]struct {
				kind  string
				path  []string
				want  any
				found bool
			}{
				"the serving Certificate's DNS names": {kind: "Certificate", path: []string{"spec", "dnsNames"}, want: []any{
					"flyte-mpi-webhook-webhook-service." + namespace + ".svc",
					"flyte-mpi-webhook-webhook-service." + namespace + ".svc.cluster.local",
				}},
				"cert-manager.io/inject-ca-from": {kind: "MutatingWebhookConfiguration",
					path: []string{"metadata", "annotations", "cert-manager.io/inject-ca-from"},
					want: namespace + "/flyte-mpi-webhook-serving-cert"},
				// Where config/follow-namespace reads the namespace from.
				"the Namespace's name": {kind: "Namespace", path: []string{"metadata", "name"}, want: namespace},
			}
			wantFound := map[string][]string{
				"default":             {"the serving Certificate's DNS names", "cert-manager.io/inject-ca-from", "the Namespace's name"},
				"policy-only":         {"the Namespace's name"},
				"default-with-policy": {"the serving Certificate's DNS names", "cert-manager.io/inject-ca-from", "the Namespace's name"},
			}[install]
			var found []string
			for _, obj := range m.Objects {
				for what, c := range checks {
					if obj.GetKind() != c.kind || (c.kind == "Certificate" && obj.GetName() != "flyte-mpi-webhook-serving-cert") {
						continue
					}
					got, ok, err := unstructured.NestedFieldNoCopy(obj.Object, c.path...)
					if err != nil || !ok {
						t.Errorf("%s: %s %s has no %s", what, c.kind, obj.GetName(), strings.Join(c.path, "."))
						continue
					}
					found = append(found, what)
					if diff := cmp.Diff(c.want, got); diff != "" {
						t.Errorf("%s (-want +got):\n%s", what, diff)
					}
				}
			}
			slices.Sort(found)
			slices.Sort(wantFound)
			if diff := cmp.Diff(wantFound, found); diff != "" {
				t.Errorf("values checked (-want +got):\n%s", diff)
			}
		})
	}
}

// namespaceOverlay writes, to a temporary directory, an overlay of base
// that sets namespace as docs/DEPLOY.md says: namespace:, and
// config/follow-namespace as a transformer.
func namespaceOverlay(t *testing.T, base, namespace string) string {
	t.Helper()
	dir := t.TempDir()
	rel := func(path string) string {
		abs, err := filepath.Abs(path)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(dir, abs)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	kustomization := "namespace: " + namespace + "\nresources:\n- " + rel(base) +
		"\ntransformers:\n- " + rel(filepath.Join(configDir, "follow-namespace")) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runMake runs make in the repository with args, and returns its output.
func runMake(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestUndeployDeletesWhatSendsJobsFirst(t *testing.T) {
	admission := []string{"MutatingAdmissionPolicyBinding", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicyBinding"}
	for _, install := range installs {
		t.Run(install, func(t *testing.T) {
			// A kubectl that writes what each call was given to delete.
			dir := t.TempDir()
			kubectl := filepath.Join(dir, "kubectl")
			if err := os.WriteFile(kubectl, []byte("#!/bin/sh\n{ echo \"# kubectl $*\"; cat; echo; echo '# end'; } >> "+dir+"/calls\n"), 0o700); err != nil {
				t.Fatal(err)
			}
			if out, err := runMake(t, "undeploy", "INSTALL="+install, "KUBECTL="+kubectl); err != nil {
				t.Fatalf("make undeploy: %v\n%s", err, out)
			}
			calls, err := os.ReadFile(filepath.Join(dir, "calls"))
			if err != nil {
				t.Fatal(err)
			}
			var deleted [][]string
			for call := range strings.SplitSeq(strings.TrimSuffix(string(calls), "# end\n"), "# end\n") {
				var kinds []string
				for line := range strings.SplitSeq(call, "\n") {
					if kind, ok := strings.CutPrefix(line, "kind: "); ok {
						kinds = append(kinds, kind)
					}
				}
				deleted = append(deleted, kinds)
			}
			if len(deleted) != 2 {
				t.Fatalf("kubectl ran %d times, want twice:\n%s", len(deleted), calls)
			}
			var rendered []string
			for _, obj := range render(t, filepath.Join(configDir, install), "").Objects {
				rendered = append(rendered, obj.GetKind())
			}
			wantFirst := slices.DeleteFunc(slices.Clone(rendered), func(k string) bool { return !slices.Contains(admission, k) })
			wantSecond := slices.DeleteFunc(slices.Clone(rendered), func(k string) bool { return slices.Contains(admission, k) })
			if len(wantFirst) == 0 {
				t.Fatalf("config/%s renders none of %v", install, admission)
			}
			if diff := cmp.Diff(wantFirst, deleted[0]); diff != "" {
				t.Errorf("the first delete (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantSecond, deleted[1]); diff != "" {
				t.Errorf("the second delete, after (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMakeStopsWithoutAnImage(t *testing.T) {
	for _, target := range []string{"deploy", "build-installer"} {
		t.Run(target, func(t *testing.T) {
			installer := filepath.Join(t.TempDir(), "install.yaml")
			out, err := runMake(t, target, "IMG=", "KUBECTL=false", "INSTALLER="+installer)
			if err == nil || !strings.Contains(out, "IMG is not set") || !strings.Contains(out, manifests.ImageName+":"+newestRelease(t)) {
				t.Errorf("make %s without IMG: %v, output %q; want it to stop, saying IMG is not set and naming the released image", target, err, out)
			}
			if _, err := os.Stat(installer); err == nil {
				t.Errorf("make %s without IMG wrote %s", target, installer)
			}
		})
	}
	t.Run("policy-only runs no image", func(t *testing.T) {
		installer := filepath.Join(t.TempDir(), "install.yaml")
		if out, err := runMake(t, "build-installer", "INSTALL=policy-only", "IMG=", "INSTALLER="+installer); err != nil {
			t.Fatalf("make build-installer INSTALL=policy-only: %v\n%s", err, out)
		}
		if _, err := os.Stat(installer); err != nil {
			t.Error(err)
		}
	})
	t.Run("with IMG", func(t *testing.T) {
		installer := filepath.Join(t.TempDir(), "install.yaml")
		const img = "registry.example/flyte-mpi-webhook:v9.9.9"
		if out, err := runMake(t, "build-installer", "IMG="+img, "INSTALLER="+installer); err != nil {
			t.Fatalf("make build-installer: %v\n%s", err, out)
		}
		b, err := os.ReadFile(installer)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("image: "+img+"\n")) || bytes.Contains(b, []byte(manifests.ImageName)) {
			t.Errorf("%s: want image %s, and the released image nowhere", installer, img)
		}
	})
}

func TestReleaseRefusesAVersionThatIsNotSemver(t *testing.T) {
	for _, version := range []string{"1.2.3", "v1.2", "v1.2.3+build.1", "latest", ""} {
		t.Run(version, func(t *testing.T) {
			out, err := runMake(t, "release", "VERSION="+version, "HELM=true")
			if err == nil || !strings.Contains(out, "VERSION="+version+": want a release version") {
				t.Errorf("make release VERSION=%s: %v, output %q; want it refused, naming VERSION", version, err, out)
			}
		})
	}
}
