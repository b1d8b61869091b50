package testenv

import (
	"context"
	"fmt"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/config"
)

// Render builds the kustomization at dir (relative to v2/config) as
// `kubectl kustomize` would.
func Render(dir string) ([]*unstructured.Unstructured, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	return config.Build(filepath.Join(root, "v2", "config", dir))
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

// ApplyRBAC creates the ServiceAccounts, roles and bindings of the rendered
// kustomization at dir, so that programs can run with exactly the
// permissions their manifests give them. Objects that exist are left alone.
func ApplyRBAC(ctx context.Context, c client.Client, dir string) error {
	objs, err := Render(dir)
	if err != nil {
		return err
	}
	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount":
			if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
			}
		}
	}
	return nil
}
