package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Image is the name of vcoil's image in the manifests; BuildWithImage
// replaces it.
const Image = "ghcr.io/vcoil/vcoil"

// BuildWithImage renders the kustomization in dir with image (a reference
// with a tag or a digest) in place of vcoil's image in every container, as
// an overlay with an images entry would. vcoil-controller also gets
// VCOIL_IMAGE=image, which makes it the image of the Egress router pods it
// creates (unless the kustomization passes --egress-image).
func BuildWithImage(dir, image string) ([]*unstructured.Unstructured, error) {
	ref, err := imageRef(image)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	patch, err := yaml.Marshal([]map[string]any{{
		"op": "add", "path": "/spec/template/spec/containers/0/env/-",
		"value": map[string]string{"name": "VCOIL_IMAGE", "value": image},
	}})
	if err != nil {
		return nil, err
	}
	// kustomize reads an overlay from a directory: a temporary one, whose
	// only resource is dir, named relative to it (kustomize refuses
	// absolute roots).
	tmp, err := os.MkdirTemp("", "vcoil-manifests-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	rel, err := filepath.Rel(tmp, abs)
	if err != nil {
		return nil, err
	}
	k, err := yaml.Marshal(map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []string{rel},
		"images":     []map[string]string{ref},
		"patches": []map[string]any{{
			"target": map[string]string{"kind": "Deployment", "name": "vcoil-controller"},
			"patch":  string(patch),
		}},
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), k, 0o644); err != nil {
		return nil, err
	}
	objs, err := Build(tmp)
	if err != nil {
		return nil, fmt.Errorf("%s with image %s: %w", dir, image, err)
	}
	return objs, nil
}

// imageRef splits a reference into kustomize's images entry for Image.
func imageRef(image string) (map[string]string, error) {
	ref := map[string]string{"name": Image}
	name := image
	if n, digest, ok := strings.Cut(image, "@"); ok {
		name = n
		ref["digest"] = digest
	} else if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		name = image[:i]
		ref["newTag"] = image[i+1:]
	} else {
		return nil, fmt.Errorf("image %q has neither a tag nor a digest", image)
	}
	if name == "" || ref["newTag"] == "" && ref["digest"] == "" {
		return nil, fmt.Errorf("image %q is not of the form NAME:TAG or NAME@DIGEST", image)
	}
	ref["newName"] = name
	return ref, nil
}

// YAML writes objects as one multi-document YAML stream, in the order
// kustomize gave them (CRDs and namespaces first), for kubectl apply -f.
func YAML(objs []*unstructured.Unstructured) ([]byte, error) {
	var b strings.Builder
	for i, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return []byte(b.String()), nil
}
