package manifests_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/flyteorg/flyte-mpi-webhook/test/manifests"
)

// configDir is config/ of the repository, seen from this package.
var configDir = filepath.Join("..", "..", "config")

// render renders the kustomization in dir, failing the test on an error.
func render(t *testing.T, dir, image string) *manifests.Manifests {
	t.Helper()
	m, err := manifests.Render(dir, image)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// decode decodes the one rendered object of kind, failing the test on an error.
func decode[T any](t *testing.T, m *manifests.Manifests, kind string) *T {
	t.Helper()
	var obj T
	if err := m.Decode(kind, &obj); err != nil {
		t.Fatal(err)
	}
	return &obj
}

func TestRenderSetsTheImage(t *testing.T) {
	const digest = "sha256:4d5c6a6f2bd2f0f4a2e1f0c66a4d0e8c6b1e0b8f2a9a5e1c3f7d9b0a1c2e3f4a"
	tests := []struct {
		image string
		want  string
	}{
		{image: "", want: manifests.ImageName + ":" + manifests.ImageTag},
		{image: "flyte-mpi-webhook:v0.1.0", want: "flyte-mpi-webhook:v0.1.0"},
		// As `kustomize edit set image NAME=my-org/flyte-mpi-webhook`: the tag stays.
		{image: "my-org/flyte-mpi-webhook", want: "my-org/flyte-mpi-webhook:" + newestRelease(t)},
		{image: "localhost:5000/my-org/flyte-mpi-webhook:v0.1.0", want: "localhost:5000/my-org/flyte-mpi-webhook:v0.1.0"},
		{image: "my-org/flyte-mpi-webhook@" + digest, want: "my-org/flyte-mpi-webhook@" + digest},
	}
	if newest := newestRelease(t); manifests.ImageTag != newest {
		t.Errorf("manifests.ImageTag %s, CHANGELOG.md's newest release %s: want the same", manifests.ImageTag, newest)
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			m := render(t, filepath.Join(configDir, "default"), tt.image)
			deployment := decode[appsv1.Deployment](t, m, "Deployment")
			var got []string
			for _, c := range deployment.Spec.Template.Spec.Containers {
				got = append(got, c.Image)
			}
			if diff := cmp.Diff([]string{tt.want}, got); diff != "" {
				t.Errorf("images (-want +got):\n%s", diff)
			}
			if !strings.Contains(string(m.YAML), "image: "+tt.want+"\n") {
				t.Errorf("the YAML does not say image: %s:\n%s", tt.want, m.YAML)
			}
		})
	}
}

// The file `make build-installer` writes holds the objects the other tests check.
func TestYAMLHoldsTheObjects(t *testing.T) {
	m := render(t, filepath.Join(configDir, "default"), "my-org/flyte-mpi-webhook:v0.1.0")
	var got []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(m.YAML)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		content, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(content); err != nil {
			t.Fatalf("%v:\n%s", err, doc)
		}
		got = append(got, obj)
	}
	if len(got) == 0 {
		t.Fatal("the YAML holds no object")
	}
	if diff := cmp.Diff(m.Objects, got); diff != "" {
		t.Errorf("the YAML's objects (-want +got):\n%s", diff)
	}
}

func TestFindAndDecodeSayWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("kustomization.yaml", "resources: [objects.yaml]\n")
	write("objects.yaml", `apiVersion: apps/v1
kind: Deployment
metadata: {name: typo}
spec:
  replica: 2
---
apiVersion: v1
kind: ConfigMap
metadata: {name: one}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: two}
`)
	m := render(t, dir, "")

	tests := []struct {
		kind string
		want string
	}{
		{kind: "Deployment", want: `unknown field "spec.replica"`},
		{kind: "ConfigMap", want: "want one ConfigMap, rendered 2: [/one /two]"},
		{kind: "Service", want: "want one Service, rendered 0: []"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			var into appsv1.Deployment
			err := m.Decode(tt.kind, &into)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Decode(%s): got error %v, want one that says %q", tt.kind, err, tt.want)
			}
		})
	}
}

func TestRenderRefusesAnImageItCannotSet(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(`resources: [deployment.yaml]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "deployment.yaml"), []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: other}
spec:
  template:
    metadata:
      # Not a container: left alone.
      annotations: {image: controller}
    spec:
      containers: [{name: other, image: "controller-manager:latest"}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := manifests.Render(dir, ""); err != nil {
		t.Fatalf("without an image: %v", err)
	}
	_, err := manifests.Render(dir, "my-org/flyte-mpi-webhook:v0.1.0")
	if want := "no container has image " + manifests.ImageName; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got error %v, want one that says %q", err, want)
	}
}

func TestRenderNamesTheDirectoryThatFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	_, err := manifests.Render(dir, "")
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("Render(%s): got error %v, want one that names the directory", dir, err)
	}
}

func TestRenderSaysHowToGetKustomize(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	t.Setenv(manifests.KustomizeEnv, "")
	_, err := manifests.Render(filepath.Join(dir, "config", "default"), "")
	if want := "run `make kustomize`"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("without bin/kustomize: got error %v, want one that says %q", err, want)
	}
}
