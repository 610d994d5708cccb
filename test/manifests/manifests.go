// Package manifests renders the kustomize configuration in config/ with the
// kustomize binary the Makefile pins (`make kustomize`), as `kustomize build`
// prints it for `make deploy`, so that tests and the envtest suites see the
// objects a cluster gets. The webhook binary never imports it.
package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ImageName is the image the Deployment in config/manager names, without
// its tag (the newest release); Render replaces it, as `kustomize edit set
// image ghcr.io/flyteorg/flyte-mpi-webhook=IMG` would.
const ImageName = "ghcr.io/flyteorg/flyte-mpi-webhook"

// ImageTag is the tag config/manager pins: the newest release of
// CHANGELOG.md (TestRenderSetsTheImage holds the three equal).
const ImageTag = "v0.1.0"

// KustomizeEnv names the environment variable that holds the kustomize
// binary's path; the Makefile sets it. When it is empty, Render runs
// bin/kustomize of the repository that holds the working directory.
const KustomizeEnv = "KUSTOMIZE"

// Manifests is one rendering of a kustomization.
type Manifests struct {
	// YAML is the rendering as `kustomize build` prints it.
	YAML []byte
	// Objects are the rendered objects, in the order of YAML.
	Objects []*unstructured.Unstructured
}

// Render builds the kustomization in dir with `kustomize build`. A non-empty
// image replaces ImageName as `kustomize edit set image ImageName=IMAGE`
// does, in an overlay in a temporary directory, so that no file under dir
// is edited.
func Render(dir, image string) (*Manifests, error) {
	kustomize, err := kustomizeBinary()
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	target := abs
	if image != "" {
		overlay, err := writeOverlay(abs, nil)
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %w", dir, err)
		}
		defer os.RemoveAll(overlay)
		if _, err := run(overlay, kustomize, "edit", "set", "image", ImageName+"="+image); err != nil {
			return nil, fmt.Errorf("rendering %s: setting image %q: %w", dir, image, err)
		}
		target = overlay
	}
	out, err := run("", kustomize, "build", target)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	m, err := Parse(out)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	// Else kustomize sets nothing, silently, and a deploy runs the placeholder.
	if name := imageName(image); image != "" && !slices.ContainsFunc(m.Objects, func(obj *unstructured.Unstructured) bool {
		return slices.Contains(containerImageNames(obj.Object, false), name)
	}) {
		return nil, fmt.Errorf("rendering %s: setting image %q: no container has image %s", dir, image, ImageName)
	}
	return m, nil
}

// RenderWith renders, as Render does, an overlay of the kustomization in
// dir that adds components (directories of kind Component, such as
// config/client-auth), in a temporary directory: what a user's overlay that
// lists them renders.
func RenderWith(dir string, components ...string) (*Manifests, error) {
	overlay, err := writeOverlay(dir, components)
	if err != nil {
		return nil, fmt.Errorf("rendering %s with %s: %w", dir, components, err)
	}
	defer os.RemoveAll(overlay)
	return Render(overlay, "")
}

// writeOverlay writes, to a new temporary directory, a kustomization whose
// resource is base, with components, and returns the directory.
func writeOverlay(base string, components []string) (string, error) {
	overlay, err := os.MkdirTemp("", "manifests-")
	if err != nil {
		return "", err
	}
	// Relative: kustomize refuses an absolute path to a kustomization.
	var rel []string
	for _, path := range append([]string{base}, components...) {
		abs, err := filepath.Abs(path)
		if err == nil {
			path, err = filepath.Rel(overlay, abs)
		}
		if err != nil {
			return "", errors.Join(err, os.RemoveAll(overlay))
		}
		rel = append(rel, path)
	}
	kustomization := "resources:\n- " + rel[0] + "\n"
	if len(components) > 0 {
		kustomization += "components:\n- " + strings.Join(rel[1:], "\n- ") + "\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		return "", errors.Join(err, os.RemoveAll(overlay))
	}
	return overlay, nil
}

// Parse reads a stream of YAML documents, such as `kustomize build` or
// `helm template` prints, into Manifests. Empty documents are skipped.
func Parse(stream []byte) (*Manifests, error) {
	m := &Manifests{YAML: stream}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		// Through JSON, for the int64 and float64 numbers that unstructured holds.
		content, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%w:\n%s", err, doc)
		}
		if len(bytes.TrimSpace(content)) == 0 || string(bytes.TrimSpace(content)) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(content); err != nil {
			return nil, fmt.Errorf("%w:\n%s", err, doc)
		}
		m.Objects = append(m.Objects, obj)
	}
	return m, nil
}

// kustomizeBinary returns $KUSTOMIZE, or bin/kustomize of the repository
// that holds the working directory: the nearest directory above it with a
// go.mod and a bin/kustomize.
func kustomizeBinary() (string, error) {
	if path := os.Getenv(KustomizeEnv); path != "" {
		return path, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			path := filepath.Join(dir, "bin", "kustomize")
			if _, err := os.Stat(path); err != nil {
				return "", fmt.Errorf("no kustomize binary: run `make kustomize` to build %s, or set %s: %w", path, KustomizeEnv, err)
			}
			return path, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no kustomize binary: %s is not set and no go.mod is above the working directory", KustomizeEnv)
		}
		dir = parent
	}
}

// run runs a command in dir and returns its standard output; an error carries its standard error.
func run(dir, name string, args ...string) ([]byte, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// imageName is an image reference without its tag or digest, as kustomize matches images.
func imageName(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// containerImageNames lists the image names of the containers in an object, at any depth.
func containerImageNames(node any, inContainers bool) []string {
	var names []string
	switch n := node.(type) {
	case map[string]any:
		if image, ok := n["image"].(string); ok && inContainers {
			names = append(names, imageName(image))
		}
		for k, v := range n {
			names = append(names, containerImageNames(v, k == "containers" || k == "initContainers")...)
		}
	case []any:
		for _, v := range n {
			names = append(names, containerImageNames(v, inContainers)...)
		}
	}
	return names
}

// Find returns the one rendered object of kind; none, or more than one, is an error.
func (m *Manifests) Find(kind string) (*unstructured.Unstructured, error) {
	var found []*unstructured.Unstructured
	for _, obj := range m.Objects {
		if obj.GetKind() == kind {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		names := make([]string, len(found))
		for i, obj := range found {
			names[i] = obj.GetNamespace() + "/" + obj.GetName()
		}
		return nil, fmt.Errorf("want one %s, rendered %d: [%s]", kind, len(found), strings.Join(names, " "))
	}
	return found[0], nil
}

// FindNamed returns the rendered object of kind with name (as rendered, prefix included).
func (m *Manifests) FindNamed(kind, name string) (*unstructured.Unstructured, error) {
	for _, obj := range m.Objects {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj, nil
		}
	}
	return nil, fmt.Errorf("no %s named %s rendered", kind, name)
}

// Decode finds the one rendered object of kind and converts it into its Go
// type; a field the type does not know, a typo in the YAML, is an error.
func (m *Manifests) Decode(kind string, into any) error {
	obj, err := m.Find(kind)
	if err != nil {
		return err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(obj.Object, into, true); err != nil {
		return fmt.Errorf("%s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// ExpandedArgs returns the args of a rendered container as the kubelet passes
// them: each $(NAME) of a variable of the container's env is replaced by its
// value, given inline or by a configMapKeyRef to a rendered ConfigMap of
// namespace; $$ stands for $. A $(NAME) of no such variable, which the
// kubelet would pass as written, is an error: no install means that.
func (m *Manifests) ExpandedArgs(container corev1.Container, namespace string) ([]string, error) {
	values := map[string]string{}
	for _, env := range container.Env {
		switch {
		case env.ValueFrom == nil:
			values[env.Name] = env.Value
		case env.ValueFrom.ConfigMapKeyRef != nil:
			ref := env.ValueFrom.ConfigMapKeyRef
			cm, err := m.FindNamed("ConfigMap", ref.Name)
			if err != nil || cm.GetNamespace() != namespace {
				return nil, fmt.Errorf("container %s: env %s: no ConfigMap %s/%s rendered", container.Name, env.Name, namespace, ref.Name)
			}
			value, found, err := unstructured.NestedString(cm.Object, "data", ref.Key)
			if err != nil || !found {
				return nil, fmt.Errorf("container %s: env %s: ConfigMap %s has no data key %q", container.Name, env.Name, ref.Name, ref.Key)
			}
			values[env.Name] = value
		}
	}
	args := make([]string, len(container.Args))
	for i, arg := range container.Args {
		var b strings.Builder
		for len(arg) > 0 {
			switch {
			case strings.HasPrefix(arg, "$$"):
				b.WriteByte('$')
				arg = arg[2:]
			case strings.HasPrefix(arg, "$("):
				end := strings.IndexByte(arg, ')')
				value, ok := values[arg[2:max(end, 2)]]
				if end < 0 || !ok {
					return nil, fmt.Errorf("container %s: argument %q: no variable of the container's env in %q", container.Name, container.Args[i], arg)
				}
				b.WriteString(value)
				arg = arg[end+1:]
			default:
				b.WriteByte(arg[0])
				arg = arg[1:]
			}
		}
		args[i] = b.String()
	}
	return args, nil
}
