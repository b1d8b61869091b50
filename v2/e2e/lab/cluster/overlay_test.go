package cluster

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/config"
	"github.com/vcoil/vcoil/v2/pkg/constants"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vcoil/vcoil/v2/e2e/lab/render"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
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

// Without kube-proxy nothing renders the kubernetes Service's ClusterIP
// before vcoild does: vcoild and vcoil-controller must reach the apiserver
// at the lab's control plane, not through a ClusterIP.
func TestLabOverlayReachesTheAPIServerWithoutAClusterIP(t *testing.T) {
	ds, dep := labOverlay(t, Config{Overlay: "../../../config/overlays/lab"})
	want := map[string]string{
		"KUBERNETES_SERVICE_HOST": topology.ControlPlaneIP.String(),
		"KUBERNETES_SERVICE_PORT": strconv.Itoa(topology.APIServerPort),
	}
	for _, c := range []corev1.Container{ds.Spec.Template.Spec.Containers[0], dep.Spec.Template.Spec.Containers[0]} {
		got := map[string]string{}
		for _, e := range c.Env {
			got[e.Name] = e.Value
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("container %s: %s=%q, want %q (the lab's apiserver)", c.Name, k, got[k], v)
			}
		}
	}
}

func TestVcoildRendersServicesUnlessTheLabRunsKubeProxy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kubeProxy bool
		want      bool
	}{
		{"without kube-proxy vcoild keeps its default (the renderer on)", false, false},
		{"with kube-proxy vcoild runs with --service-proxy=false", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, _ := labOverlay(t, Config{Overlay: "../../../config/overlays/lab", KubeProxy: tc.kubeProxy})
			args := ds.Spec.Template.Spec.Containers[0].Args
			if got := slices.Contains(args, "--service-proxy=false"); got != tc.want {
				t.Errorf("vcoild args %v: --service-proxy=false present %v, want %v", args, got, tc.want)
			}
			if slices.ContainsFunc(args, func(a string) bool { return a == "--service-proxy=true" || a == "--service-proxy" }) {
				t.Errorf("vcoild args %v: the renderer is on by default, the lab never says so", args)
			}
		})
	}
}

// labOverlay builds the overlay as lab-up installs it.
func labOverlay(t *testing.T, c Config) (appsv1.DaemonSet, appsv1.Deployment) {
	t.Helper()
	objs, err := config.Build(c.Overlay)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.withServiceProxyArgs(objs); err != nil {
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
	return ds, dep
}
