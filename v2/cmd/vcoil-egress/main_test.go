package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
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
// pod runs it, on a network namespace of its own: it becomes ready, a
// client pod's address is routed into the Egress's VXLAN tunnel while the
// pod lives, and the client's connections to the Egress's destination
// leave from the router's address. A node namespace routes between the
// router, the client (whose tunnel goes to the router's address, standing
// in for the routers' Service) and an external host.
func TestTheRouterServesTheClientPodsOfItsEgress(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := gobuild.Program(t, "github.com/vcoil/vcoil/v2/cmd/vcoil-egress")
	ctx := t.Context()

	node := netnstest.New(t, "node")
	node.Sysctl("net.ipv4.ip_forward", "1")
	hosts := map[string]*netnstest.NS{}
	for _, h := range []struct{ label, nodeLink, nodeIP, ip string }{
		{"router", "r0", "10.100.0.1/24", "10.100.0.2/24"},
		{"client", "c0", "10.100.1.1/24", "10.100.1.5/24"},
		{"external", "x0", "203.0.113.1/24", "203.0.113.10/24"},
	} {
		n := netnstest.New(t, h.label)
		netnstest.Veth(t, node, h.nodeLink, n, "eth0")
		node.AddAddr(h.nodeLink, h.nodeIP)
		n.AddAddr("eth0", h.ip)
		n.IP("route", "add", "default", "via", strings.Split(h.nodeIP, "/")[0])
		hosts[h.label] = n
	}
	router, clientNS, external := hosts["router"], hosts["client"], hosts["external"]
	// The external host answers with the address it sees.
	l := external.Listen("tcp4", "203.0.113.10:7000")
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, c.RemoteAddr().String())
			_ = c.Close()
		}
	}()
	seenFrom := func() (string, error) {
		c, err := clientNS.Dial(ctx, "tcp4", "203.0.113.10:7000")
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			return "", err
		}
		host, _, err := net.SplitHostPort(string(b))
		return host, err
	}
	// Before the client uses the Egress, the external host sees it.
	if got, err := seenFrom(); err != nil || got != "10.100.1.5" {
		t.Fatalf("without the Egress the external host saw %q (%v), want the client's 10.100.1.5", got, err)
	}

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
	if err := metric("vcoil_egress_router_unknown_client_drops_total 0"); err != nil {
		t.Error(err)
	}

	// The client's address goes into the Egress's VXLAN device.
	vni := egress.VNI(types.NamespacedName{Namespace: ns.Name, Name: "nat"})
	dev := regexp.MustCompile(` dev (\S+)`)
	poll.Eventually(t, 10*time.Second, func() error {
		route := strings.TrimSpace(router.IP("-4", "route", "show", "table", "all", "10.100.1.5/32"))
		m := dev.FindStringSubmatch(route)
		if m == nil {
			return fmt.Errorf("no route to the client 10.100.1.5 in the router's netns: %q", route)
		}
		if link := router.IP("-d", "-o", "link", "show", "dev", m[1]); !strings.Contains(link, fmt.Sprintf("vxlan id %d ", vni)) {
			return fmt.Errorf("the route to the client goes to %s, not the VXLAN device of VNI %d: %s", m[1], vni, link)
		}
		return nil
	})

	// The client's connections now go through the tunnel and leave from
	// the router's address.
	egressKey := types.NamespacedName{Namespace: ns.Name, Name: "nat"}
	err := egress.ApplyClient(ctx, clientNS.Path(), egress.ClientConfig{
		PodIPs: []netip.Addr{netip.MustParseAddr("10.100.1.5")},
		Egresses: []egress.ClientEgress{{
			Egress: egressKey, Kind: egress.KindVXLAN,
			ServiceIPs:   []netip.Addr{netip.MustParseAddr("10.100.0.2")},
			Destinations: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")},
		}},
		Excluded: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/16")},
	})
	if err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		got, err := seenFrom()
		if err != nil {
			return err
		}
		if got != "10.100.0.2" {
			return fmt.Errorf("through the Egress the external host saw %s, want the router's 10.100.0.2", got)
		}
		return nil
	})

	// The client deleted: its route goes.
	if err := env.Client.Delete(ctx, client); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if route := strings.TrimSpace(router.IP("-4", "route", "show", "table", "all", "10.100.1.5/32")); route != "" {
			return fmt.Errorf("route to the deleted client left: %q", route)
		}
		return metric("vcoil_egress_router_peers 0")
	})
	// Its tunnel, still in its namespace, gets nothing through: the
	// router drops and counts its packets.
	dialCtx, cancel := context.WithTimeout(ctx, time.Second)
	if c, err := clientNS.Dial(dialCtx, "tcp4", "203.0.113.10:7000"); err == nil {
		_ = c.Close()
		t.Error("the deleted client still connects to the external host through its tunnel")
	}
	cancel()
	drops := regexp.MustCompile(`(?m)^vcoil_egress_router_unknown_client_drops_total ([0-9.e+]+)$`)
	poll.Eventually(t, 10*time.Second, func() error {
		_, body := testenv.HTTPGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics))
		if m := drops.FindStringSubmatch(body); m == nil || m[1] == "0" {
			return fmt.Errorf("vcoil_egress_router_unknown_client_drops_total did not move: %v", m)
		}
		return nil
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
