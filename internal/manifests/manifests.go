// Package manifests renders the kustomize configuration in config/ with the
// kustomize Go API, as `kustomize build` or `kubectl apply -k` would, so that
// tests, the envtest suites and `make build-installer` see the objects a
// cluster gets without a kustomize binary. The webhook binary never imports it.
package manifests

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/builtins"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/pkg/util"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// ImageName is the image the Deployment in config/manager names; Render
// replaces it, as `kustomize edit set image controller=IMG` would.
const ImageName = "controller"

// Manifests is one rendering of a kustomization.
type Manifests struct {
	// YAML is the rendering as `kustomize build` prints it.
	YAML []byte
	// Objects are the rendered objects, in the order of YAML.
	Objects []*unstructured.Unstructured
}

// Render builds the kustomization in dir. A non-empty image replaces
// ImageName, with kustomize's own image transformer: the same as adding
// `images: [{name: controller, newName: ..., newTag: ...}]` to it.
func Render(dir, image string) (*Manifests, error) {
	opts := krusty.MakeDefaultOptions()
	// kustomize's and kubectl's own order: the Namespace first, the webhook
	// configuration last, once what it calls exists.
	opts.Reorder = krusty.ReorderOptionLegacy
	resources, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	if image != "" {
		// Else kustomize sets nothing, silently, and a deploy runs the placeholder.
		if !slices.ContainsFunc(resources.Resources(), namesImage) {
			return nil, fmt.Errorf("rendering %s: setting image %q: no container has image %s", dir, image, ImageName)
		}
		newImage := types.Image{Name: ImageName}
		newImage.NewName, newImage.NewTag, newImage.Digest = util.SplitImageName(image)
		setImage := builtins.ImageTagTransformerPlugin{ImageTag: newImage}
		if err := setImage.Transform(resources); err != nil {
			return nil, fmt.Errorf("rendering %s: setting image %q: %w", dir, image, err)
		}
	}
	yaml, err := resources.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("rendering %s: %w", dir, err)
	}
	m := &Manifests{YAML: yaml}
	for _, r := range resources.Resources() {
		// Through JSON, for the int64 and float64 numbers that unstructured holds.
		content, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("rendering %s: %s: %w", dir, r.CurId(), err)
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(content); err != nil {
			return nil, fmt.Errorf("rendering %s: %s: %w", dir, r.CurId(), err)
		}
		m.Objects = append(m.Objects, obj)
	}
	return m, nil
}

// namesImage says whether a container of a resource, at any depth, runs ImageName.
func namesImage(r *resource.Resource) bool {
	var found bool
	var walk func(node any, inContainers bool)
	walk = func(node any, inContainers bool) {
		switch n := node.(type) {
		case map[string]any:
			if image, ok := n["image"].(string); ok && inContainers {
				if name, _, _ := util.SplitImageName(image); name == ImageName {
					found = true
				}
			}
			for k, v := range n {
				walk(v, k == "containers" || k == "initContainers")
			}
		case []any:
			for _, v := range n {
				walk(v, inContainers)
			}
		}
	}
	content, err := r.Map()
	if err != nil {
		return false
	}
	walk(content, false)
	return found
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
