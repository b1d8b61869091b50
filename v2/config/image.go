package config

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Image is the name of vcoil's image in the manifests; BuildWith replaces
// it.
const Image = "ghcr.io/vcoil/vcoil"

// Params are what an installation sets in vcoil's manifests (make
// manifests; docs/install.md).
type Params struct {
	// Image is vcoil's image, a reference with a tag or a digest.
	Image string
	// APIServer, host:port, is where vcoild and vcoil-controller reach the
	// apiserver instead of the kubernetes Service's ClusterIP: needed
	// without kube-proxy, since nothing translates the ClusterIP before
	// vcoild has rendered it. Empty: the ClusterIP the kubelet injects.
	APIServer string
}

// BuildWith renders the kustomization in dir with p, as an overlay would:
// p.Image in place of vcoil's image in every container, and as
// vcoil-controller's VCOIL_IMAGE, which makes it the image of the Egress
// router pods (unless the kustomization passes --egress-image);
// p.APIServer as KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT of
// vcoild and vcoil-controller (a variable set in the container wins over
// the kubelet's).
func BuildWith(dir string, p Params) ([]*unstructured.Unstructured, error) {
	ref, err := imageRef(p.Image)
	if err != nil {
		return nil, err
	}
	controllerEnv := []envVar{{"VCOIL_IMAGE", p.Image}}
	var daemonEnv []envVar
	if p.APIServer != "" {
		host, port, err := net.SplitHostPort(p.APIServer)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 || host == "" {
			return nil, fmt.Errorf("apiserver address %q is not HOST:PORT", p.APIServer)
		}
		daemonEnv = []envVar{{"KUBERNETES_SERVICE_HOST", host}, {"KUBERNETES_SERVICE_PORT", port}}
		controllerEnv = append(controllerEnv, daemonEnv...)
	}
	patches := []map[string]any{}
	for _, t := range []struct {
		target map[string]string
		env    []envVar
	}{
		{map[string]string{"kind": "Deployment", "name": "vcoil-controller"}, controllerEnv},
		// Every DaemonSet of vcoil runs vcoild as its first container.
		{map[string]string{"kind": "DaemonSet", "labelSelector": "app.kubernetes.io/name=vcoild"}, daemonEnv},
	} {
		if len(t.env) == 0 {
			continue
		}
		var ops []map[string]any
		for _, e := range t.env {
			ops = append(ops, map[string]any{
				"op": "add", "path": "/spec/template/spec/containers/0/env/-",
				"value": map[string]string{"name": e.name, "value": e.value},
			})
		}
		patch, err := yaml.Marshal(ops)
		if err != nil {
			return nil, err
		}
		patches = append(patches, map[string]any{"target": t.target, "patch": string(patch)})
	}

	abs, err := filepath.Abs(dir)
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
		"patches":    patches,
	})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), k, 0o644); err != nil {
		return nil, err
	}
	objs, err := Build(tmp)
	if err != nil {
		return nil, fmt.Errorf("%s with image %s: %w", dir, p.Image, err)
	}
	return objs, nil
}

type envVar struct{ name, value string }

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
