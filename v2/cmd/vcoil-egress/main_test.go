package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/egress"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

// TestTheRouterServesTheClientPodsOfItsEgress runs vcoil-egress as a router
// pod runs it, on a network namespace of its own: it becomes ready, and a
// client pod's address is routed into the Egress's VXLAN tunnel while the
// pod lives.
func TestTheRouterServesTheClientPodsOfItsEgress(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := gobuild.Program(t, "github.com/vcoil/vcoil/v2/cmd/vcoil-egress")
	ctx := t.Context()

	// The router pod's netns: eth0 towards its node, which routes.
	node, router := netnstest.New(t, "node"), netnstest.New(t, "router")
	netnstest.Veth(t, node, "r0", router, "eth0")
	node.AddAddr("r0", "10.100.0.1/24")
	router.AddAddr("eth0", "10.100.0.2/24")
	router.IP("route", "add", "default", "via", "10.100.0.1")

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "egress-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	eg := &vcoilv2.Egress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "nat"},
		Spec:       vcoilv2.EgressSpec{Destinations: []string{"203.0.113.0/24"}},
	}
	if err := env.Client.Create(ctx, eg); err != nil {
		t.Fatal(err)
	}
	client := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "client", Annotations: map[string]string{vcoilv2.AnnotationEgressPrefix + ns.Name: "nat"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/c"}}},
	}
	if err := env.Client.Create(ctx, client); err != nil {
		t.Fatal(err)
	}
	client.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.100.1.5", PodIPs: []corev1.PodIP{{IP: "10.100.1.5"}}}
	if err := env.Client.Status().Update(ctx, client); err != nil {
		t.Fatal(err)
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	health, metrics := testenv.FreePort(t), testenv.FreePort(t)
	log := &testenv.LogBuffer{}
	cmd := exec.Command(bin,
		"--kubeconfig", kubeconfig,
		"--egress-namespace", ns.Name, "--egress-name", "nat",
		"--pod-ip", "10.100.0.2",
		"--netns", router.Path(),
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", health),
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metrics),
	)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("log of vcoil-egress:\n%s", log.String())
		}
	})

	poll.Eventually(t, 30*time.Second, func() error {
		if code, body := testenv.HTTPGet(fmt.Sprintf("http://127.0.0.1:%d/readyz", health)); code != 200 {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		return nil
	})
	metric := func(want string) error {
		_, body := testenv.HTTPGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics))
		if !strings.Contains(body, "\n"+want+"\n") {
			return fmt.Errorf("metrics without %q", want)
		}
		return nil
	}
	poll.Eventually(t, 10*time.Second, func() error { return metric("vcoil_egress_router_peers 1") })

	// The client's address goes into the Egress's VXLAN device.
	vni := egress.VNI(types.NamespacedName{Namespace: ns.Name, Name: "nat"})
	dev := regexp.MustCompile(` dev (\S+)`)
	poll.Eventually(t, 10*time.Second, func() error {
		route := strings.TrimSpace(router.IP("-4", "route", "show", "10.100.1.5/32"))
		m := dev.FindStringSubmatch(route)
		if m == nil {
			return fmt.Errorf("no route to the client 10.100.1.5 in the router's netns: %q", route)
		}
		if link := router.IP("-d", "-o", "link", "show", "dev", m[1]); !strings.Contains(link, fmt.Sprintf("vxlan id %d ", vni)) {
			return fmt.Errorf("the route to the client goes to %s, not the VXLAN device of VNI %d: %s", m[1], vni, link)
		}
		return nil
	})

	// The client deleted: its route goes.
	if err := env.Client.Delete(ctx, client); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if route := strings.TrimSpace(router.IP("-4", "route", "show", "10.100.1.5/32")); route != "" {
			return fmt.Errorf("route to the deleted client left: %q", route)
		}
		return metric("vcoil_egress_router_peers 0")
	})

	// SIGTERM stops it cleanly.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("vcoil-egress exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Error("vcoil-egress did not stop within 30 s of SIGTERM")
	}

}
