// Package config holds vcoil's kustomize manifests and builds them as
// `kubectl kustomize` would, for the programs and tests that apply them.
package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Build renders the kustomization in the directory dir into objects.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s %s: %w", dir, r.GetKind(), r.GetName(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out, nil
}
