package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vcoil/vcoil/v2/config"
	"github.com/vcoil/vcoil/v2/internal/testenv"
)

// containers returns the containers and init containers of a workload's pod
// template (name: image), and whether the object is a workload.
func containers(t *testing.T, o *unstructured.Unstructured) (map[string]string, bool) {
	t.Helper()
	out := map[string]string{}
	found := false
	for _, field := range []string{"containers", "initContainers"} {
		// NoCopy: kustomize's objects hold plain ints, which a deep copy
		// refuses.
		v, ok, err := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", field)
		if err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		found = found || ok
		list, _ := v.([]any)
		for _, c := range list {
			c := c.(map[string]any)
			out[field+"/"+c["name"].(string)], _ = c["image"].(string)
		}
	}
	return out, found
}

func TestTheImageParameterReachesEveryVcoilContainer(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		overlay, image string
		workloads      []string // kind/name, at least these
	}{
		{"default", "registry.example/vcoil:v1", []string{"Deployment/vcoil-controller", "DaemonSet/vcoil-daemon"}},
		{"overlays/vpp", "registry.example:5000/team/vcoil:v1.2.3-rc.1", []string{"Deployment/vcoil-controller", "DaemonSet/vcoil-daemon"}},
		{"default", "registry.example:5000/vcoil@sha256:" + strings.Repeat("ab", 32), []string{"Deployment/vcoil-controller", "DaemonSet/vcoil-daemon"}},
	} {
		t.Run(tc.overlay+" "+tc.image, func(t *testing.T) {
			objs, err := config.BuildWith(filepath.Join(root, "v2", "config", tc.overlay), config.Params{Image: tc.image})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for _, o := range objs {
				cs, ok := containers(t, o)
				if !ok {
					continue
				}
				seen[o.GetKind()+"/"+o.GetName()] = len(cs)
				for c, img := range cs {
					if img != tc.image {
						t.Errorf("%s %s: %s runs %q, want %q", o.GetKind(), o.GetName(), c, img, tc.image)
					}
				}
			}
			for _, w := range tc.workloads {
				if seen[w] == 0 {
					t.Errorf("no containers in %s (workloads rendered: %v)", w, seen)
				}
			}
			// The DaemonSet has install-cni and vcoild.
			if seen["DaemonSet/vcoil-daemon"] != 2 {
				t.Errorf("DaemonSet vcoil-daemon has %d containers, want install-cni and vcoild", seen["DaemonSet/vcoil-daemon"])
			}

			dep := &appsv1.Deployment{}
			if err := testenv.Find(objs, "Deployment", "vcoil-controller", dep); err != nil {
				t.Fatal(err)
			}
			env := envOf(dep.Spec.Template.Spec.Containers[0])
			if env["VCOIL_IMAGE"] != tc.image {
				t.Errorf("vcoil-controller's VCOIL_IMAGE (the Egress routers' image) = %q, want %q", env["VCOIL_IMAGE"], tc.image)
			}
			if env["KUBERNETES_SERVICE_HOST"] != "" {
				t.Errorf("vcoil-controller has KUBERNETES_SERVICE_HOST %q without an apiserver parameter", env["KUBERNETES_SERVICE_HOST"])
			}

			y, err := config.YAML(objs)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(y), config.Image) {
				t.Errorf("the rendered manifests still name %s", config.Image)
			}
			if n := strings.Count(string(y), "\n---\n") + 1; n != len(objs) {
				t.Errorf("%d YAML documents for %d objects", n, len(objs))
			}
		})
	}
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

// Without kube-proxy vcoild and vcoil-controller reach the apiserver at
// the address given, on every DaemonSet of vcoild (two in lab-vpp).
func TestTheAPIServerParameterReachesVcoildAndVcoilController(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		overlay, apiServer, host, port string
		daemonSets                     []string
	}{
		{"default", "198.18.0.2:6443", "198.18.0.2", "6443", []string{"vcoil-daemon"}},
		{"overlays/vpp", "api.cluster.example:443", "api.cluster.example", "443", []string{"vcoil-daemon"}},
		{"overlays/lab-vpp", "[2001:db8::2]:6443", "2001:db8::2", "6443", []string{"vcoil-daemon", "vcoil-daemon-vpp"}},
	} {
		t.Run(tc.overlay, func(t *testing.T) {
			objs, err := config.BuildWith(filepath.Join(root, "v2", "config", tc.overlay),
				config.Params{Image: "registry.example/vcoil:v1", APIServer: tc.apiServer})
			if err != nil {
				t.Fatal(err)
			}
			var cs []corev1.Container
			for _, name := range tc.daemonSets {
				ds := &appsv1.DaemonSet{}
				if err := testenv.Find(objs, "DaemonSet", name, ds); err != nil {
					t.Fatal(err)
				}
				cs = append(cs, ds.Spec.Template.Spec.Containers[0])
			}
			dep := &appsv1.Deployment{}
			if err := testenv.Find(objs, "Deployment", "vcoil-controller", dep); err != nil {
				t.Fatal(err)
			}
			cs = append(cs, dep.Spec.Template.Spec.Containers[0])
			for _, c := range cs {
				// The last value of a repeated variable wins: the lab's
				// overlay sets its own first.
				var host, port string
				for _, e := range c.Env {
					switch e.Name {
					case "KUBERNETES_SERVICE_HOST":
						host = e.Value
					case "KUBERNETES_SERVICE_PORT":
						port = e.Value
					}
				}
				if host != tc.host || port != tc.port {
					t.Errorf("container %s reaches the apiserver at %s port %s, want %s port %s", c.Name, host, port, tc.host, tc.port)
				}
			}
		})
	}
}

func TestBadParametersAreRefused(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []config.Params{
		{Image: "registry.example:5000/vcoil"}, {Image: ""}, {Image: "vcoil:"}, {Image: ":v1"},
		{Image: "vcoil:v1", APIServer: "198.18.0.2"}, {Image: "vcoil:v1", APIServer: "198.18.0.2:http"},
		{Image: "vcoil:v1", APIServer: ":6443"},
	} {
		if _, err := config.BuildWith(filepath.Join(root, "v2", "config", "default"), p); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}
