package vpp_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// The driver against a real VPP (VCOIL_VPP_BIN) whose uplink has an IPv4
// and an IPv6 address and gateway, as on a dual-stack node, with two
// dual-stack pods: over IPv6 they reach each other both ways, the gateway
// and a host beyond it, the host beyond reaches them, and all of it again
// after a VPP restart. (The node's kernel has no IPv6 address of its own
// here; the lab's VPP nodes, which have one, are tested in
// e2e/lab/render.)
func TestRealVPPPodsTalkOverIPv6ThroughTheUplink(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	uplink, uplink6 := netip.MustParsePrefix("198.18.0.11/24"), netip.MustParsePrefix("2001:db8:18::11/64")
	gateway, gateway6 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("2001:db8:18::1")
	// beyond is a host behind the gateway: the external network.
	beyond, beyond6 := netip.MustParseAddr("203.0.113.10"), netip.MustParseAddr("2001:db8:113::10")
	block, block6 := netip.MustParsePrefix("10.100.0.0/29"), netip.MustParsePrefix("2001:db8:19::/125")

	node, ext := netnstest.New(t, "v6node"), netnstest.New(t, "v6ext")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", netip.PrefixFrom(gateway, 24).String())
	ext.AddAddr("eth0", netip.PrefixFrom(gateway6, 64).String())
	ext.AddAddr("lo", netip.PrefixFrom(beyond, 32).String())
	ext.AddAddr("lo", netip.PrefixFrom(beyond6, 128).String())
	ext.IP("route", "add", block.String(), "via", uplink.Addr().String())
	ext.IP("-6", "route", "add", block6.String(), "via", uplink6.Addr().String())
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup")

	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{uplink, uplink6},
		UplinkGatewayIPv4: gateway, UplinkGatewayIPv6: gateway6,
		PingInterval: 200 * time.Millisecond, ReadyWait: 30 * time.Second,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := d.Blocks().Sync(ctx, []netip.Prefix{block, block6}); err != nil {
		t.Fatal(err)
	}
	a, b := netnstest.New(t, "v6pod-a"), netnstest.New(t, "v6pod-b")
	pods := []dataplane.Pod{
		{PodKey: dataplane.PodKey{ContainerID: "vpp-v6-a", IfName: "eth0"}, Netns: a.Path(),
			IPv4: netip.MustParseAddr("10.100.0.2"), IPv6: netip.MustParseAddr("2001:db8:19::2")},
		{PodKey: dataplane.PodKey{ContainerID: "vpp-v6-b", IfName: "eth0"}, Netns: b.Path(),
			IPv4: netip.MustParseAddr("10.100.0.3"), IPv6: netip.MustParseAddr("2001:db8:19::3")},
	}
	for _, p := range pods {
		if _, err := d.SetupPod(ctx, p); err != nil {
			t.Fatalf("SetupPod %s: %v", p.ContainerID, err)
		}
	}
	for _, ns := range []*netnstest.NS{a, b, ext} {
		ns.ServeTCPEcho(":8080")
	}
	a6, b6 := pods[0].IPv6.String(), pods[1].IPv6.String()
	talk := func(when string) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, func() error {
			for _, c := range []struct {
				what string
				from *netnstest.NS
				to   string
			}{
				{"pod a to pod b", a, b6},
				{"pod b to pod a", b, a6},
				{"pod a to the gateway", a, gateway6.String()},
				{"pod b to the host beyond the gateway", b, beyond6.String()},
				{"the host beyond to pod a", ext, a6},
				{"pod a to the host beyond over IPv4 too", a, beyond.String()},
			} {
				if err := c.from.Ping(ctx, c.to); err != nil {
					return fmt.Errorf("%s: %s: ping: %w", when, c.what, err)
				}
				if err := echo(ctx, c.from, net.JoinHostPort(c.to, "8080")); err != nil {
					return fmt.Errorf("%s: %s: %w", when, c.what, err)
				}
			}
			return nil
		})
	}
	talk("before the restart")
	v.Restart()
	poll.Eventually(t, time.Minute, func() error { return d.Healthy(ctx) })
	talk("after the restart")
}
