package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// vcoild with --dataplane=vpp against a real VPP (VCOIL_VPP_BIN) running in
// the node's namespace: pods added through the real CNI path talk (ping
// and TCP) through VPP, VPP is killed and started again, and the same pods
// with the same addresses talk again; DEL leaves nothing in the pods.
func TestVPPDataplanePodsTalkThroughVPPAndSurviveItsRestart(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	typ := vpptest.PodInterface()
	defaultPool(t)
	f := newFabric(t)

	// vcoild is ready only once VPP runs in the node's namespace: VPP
	// starts there, with the veth its uplink attaches to, before vcoild.
	v := vpptest.Prepare(t, bin, "create host-interface name vppup")
	n := newNodeWith(t, f, 40, nodeOptions{
		args: []string{"--dataplane=vpp", "--vpp-api-socket", v.APISocket, "--vpp-pod-interface", typ, "--vpp-uplink", "host-vppup"},
		beforeStart: func(n *node) {
			n.ns.IP("link", "add", "vppup", "type", "veth", "peer", "name", "vppup-peer")
			n.ns.IP("link", "set", "vppup", "up")
			n.ns.IP("link", "set", "vppup-peer", "up")
			if err := v.Launch(n.ns.Path()); err != nil {
				t.Fatal(err)
			}
		},
	})
	if err := n.status(); err != nil {
		t.Fatalf("STATUS: %v", err)
	}

	a, b := newPod(t, "vpp-a"), newPod(t, "vpp-b")
	n.mustAdd(a)
	n.mustAdd(b)
	for _, p := range []*pod{a, b} {
		if err := n.check(p); err != nil {
			t.Fatalf("CHECK %s: %v", p.name, err)
		}
		if r := p.ns.IP("route", "show"); !strings.Contains(r, "default dev eth0") {
			t.Fatalf("%s's routes lack default dev eth0:\n%s", p.name, r)
		}
	}
	serve(t, a.ns, ":8080")
	serve(t, b.ns, ":8080")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reach := func(when string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			for _, c := range []struct {
				from *netnstest.NS
				to   string
				port bool
			}{
				{a.ns, b.ipv4().String(), true}, {b.ns, a.ipv4().String(), true},
				{a.ns, b.ipv6().String(), true}, {n.ns, a.ipv4().String(), true},
			} {
				if err := c.from.Ping(ctx, c.to); err != nil {
					return fmt.Errorf("%s: %w", when, err)
				}
				if err := talk(c.from, hostPortString(c.to, 8080)); err != nil {
					return fmt.Errorf("%s: %w", when, err)
				}
			}
			return nil
		})
	}
	reach("before VPP restarts")
	before := []string{a.ipv4().String(), b.ipv4().String(), a.ipv6().String(), b.ipv6().String()}

	restart := time.Now()
	v.Restart()
	reach("after VPP restarted")
	t.Logf("pods reachable again %s after VPP was killed", time.Since(restart))
	poll.Eventually(t, time.Minute, func() error {
		if code, body := testenv.HTTPGet(n.health + "/readyz"); code != http.StatusOK {
			return fmt.Errorf("vcoild not ready after VPP's restart: %d %s", code, body)
		}
		return nil
	})
	after := []string{a.ipv4().String(), b.ipv4().String(), a.ipv6().String(), b.ipv6().String()}
	if strings.Join(before, ",") != strings.Join(after, ",") {
		t.Fatalf("addresses changed: %v -> %v", before, after)
	}
	for _, p := range []*pod{a, b} {
		if err := n.check(p); err != nil {
			t.Fatalf("CHECK %s after the restart: %v", p.name, err)
		}
	}

	for _, p := range []*pod{a, b} {
		if err := n.del(p); err != nil {
			t.Fatalf("DEL %s: %v", p.name, err)
		}
		if err := n.del(p); err != nil {
			t.Fatalf("second DEL %s: %v", p.name, err)
		}
		if out := p.ns.IP("link", "show"); strings.Contains(out, "eth0") {
			t.Fatalf("eth0 left in %s after DEL:\n%s", p.name, out)
		}
	}
}

func hostPortString(addr string, port int) string {
	if strings.Contains(addr, ":") {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

// The vpp overlay is the default installation with vcoild on the VPP
// dataplane.
func TestVPPOverlayRunsVcoildOnTheVPPDataplane(t *testing.T) {
	m, err := testenv.Render("overlays/vpp")
	if err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{}
	if err := testenv.Find(m, "DaemonSet", "vcoil-daemon", ds); err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--dataplane=vpp") || slices.Contains(args, "--dataplane=linux") || !slices.Contains(args, "--vpp-api-socket=/run/vpp/api.sock") {
		t.Fatalf("vcoild's args in the vpp overlay: %v", args)
	}
}

// --dataplane=vpp builds the VPP dataplane from the flags without touching
// VPP, and names the flag of a bad value.
func TestVPPFlagsBuildTheVPPDataplane(t *testing.T) {
	f := flags{dataplane: "vpp", stateDir: t.TempDir(), vpp: vppFlags{apiSocket: "/nonexistent/api.sock", podInterface: "af_packet"}}
	dp, local, err := newDataplane(f)
	if err != nil {
		t.Fatal(err)
	}
	if dp.Name() != "vpp" || local == nil {
		t.Fatalf("dataplane %q, block routes %v", dp.Name(), local)
	}
	for _, tc := range []struct {
		name string
		set  func(*flags)
		want string
	}{
		{"an unknown pod interface type", func(f *flags) { f.vpp.podInterface = "vhost" }, `PodInterface "vhost"`},
		{"an uplink address that is no prefix", func(f *flags) {
			f.vpp.uplink, f.vpp.uplinkAddresses = "host-eth1", []string{"198.18.0.1"}
		}, "--vpp-uplink-address"},
		{"an IPv6 gateway that is no address", func(f *flags) { f.vpp.uplink, f.vpp.uplinkGatewayIPv6 = "host-eth1", "fe80::1/64" }, "--vpp-uplink-gateway-ipv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := f
			tc.set(&bad)
			if _, _, err := newDataplane(bad); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("newDataplane = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
