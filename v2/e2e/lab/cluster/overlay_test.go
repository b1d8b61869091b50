package cluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/config"
	"github.com/vcoil/vcoil/v2/pkg/constants"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vcoil/vcoil/v2/e2e/lab/render"
)

func TestLabOverlayRunsImportedImagesWithDirectRouting(t *testing.T) {
	objs, err := config.Build("../../../config/overlays/lab")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	var dep appsv1.Deployment
	for _, o := range objs {
		switch {
		case o.GetKind() == "DaemonSet" && o.GetName() == "vcoil-daemon":
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds)
		case o.GetKind() == "Deployment" && o.GetName() == "vcoil-controller":
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &dep)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if ds.Name == "" || dep.Name == "" {
		t.Fatal("the overlay lacks vcoild's DaemonSet or vcoil-controller's Deployment")
	}
	containers := append(append([]corev1.Container{}, ds.Spec.Template.Spec.InitContainers...), ds.Spec.Template.Spec.Containers...)
	containers = append(containers, dep.Spec.Template.Spec.Containers...)
	for _, c := range containers {
		if c.Image != render.VcoilImage || c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("container %s: image %s pull policy %s, want %s never pulled", c.Name, c.Image, c.ImagePullPolicy, render.VcoilImage)
		}
	}
	if args := ds.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--direct-routing") {
		t.Errorf("vcoild args %v lack --direct-routing", args)
	}
	// containerd 1.6 reads conflists of cniVersion 1.0.0 at most: the
	// default (constants.CNIVersion), unless the overlay asks for another.
	args := strings.Join(ds.Spec.Template.Spec.InitContainers[0].Args, " ")
	if strings.Contains(args, "--cni-version=") && !strings.Contains(args, "--cni-version=1.0.0") || constants.CNIVersion != "1.0.0" {
		t.Errorf("install-cni args %q with default %s: the conflist must say 1.0.0 for containerd 1.6", args, constants.CNIVersion)
	}
}
