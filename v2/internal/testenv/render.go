package testenv

import (
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render builds the kustomization at dir (relative to v2/config) as
// `kubectl kustomize` would.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "v2", "config", dir)
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", path, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}

// Find returns the rendered object of kind and name, decoded into out.
func Find(objs []*unstructured.Unstructured, kind, name string, out any) error {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return runtimeConverter.FromUnstructuredWithValidation(o.Object, out, true)
		}
	}
	return fmt.Errorf("no %s named %s in the rendered manifests", kind, name)
}

var runtimeConverter = runtime.DefaultUnstructuredConverter
