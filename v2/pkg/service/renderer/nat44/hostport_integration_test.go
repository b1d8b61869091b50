package nat44_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// TestRealVPPHostPorts checks hostPorts with real traffic on a real VPP
// (VCOIL_VPP_BIN), as a VPP node of a cluster runs them: the uplink holds
// the node's address 198.18.0.10, the services renderer keeps the NAT
// loopback in the twice-NAT pool (and nothing else), pod a serves TCP and
// UDP on 8080 with hostPorts 30999/tcp and 30998/udp. An outside client
// (the "ext" namespace on the uplink's network) reaches pod a through the
// node's address and is seen with its own address; pod b on the same node
// too; pod a reaches its own hostPort (hairpin, seen from the NAT
// loopback). Then again after VPP is killed and started, and after the
// driver restarts with the pods from its checkpoint; pod a's DEL leaves the
// port unserved and the node's address still answering.
func TestRealVPPHostPorts(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	uplink := netip.MustParsePrefix("198.18.0.10/24")
	gateway := netip.MustParseAddr("198.18.0.254")
	loopback := netip.MustParseAddr("10.100.0.7")
	node := netnstest.New(t, "hpnode")
	ext := netnstest.New(t, "hpext")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", netip.PrefixFrom(gateway, 24).String())
	ext.IP("route", "add", "10.100.0.0/24", "via", uplink.Addr().String())
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup hw-addr 02:fe:00:00:00:01")

	cfg := vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{uplink}, UplinkGatewayIPv4: gateway,
		PingInterval: 200 * time.Millisecond, RequestTimeout: 3 * time.Second, ReadyWait: 30 * time.Second,
	}
	d, err := vpp.New(cfg, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if inc := <-d.Resynced(); inc != 1 {
		t.Fatalf("first incarnation %d", inc)
	}
	if err := d.Blocks().Sync(ctx, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29")}); err != nil {
		t.Fatal(err)
	}
	nsA, nsB := netnstest.New(t, "hppod-a"), netnstest.New(t, "hppod-b")
	a := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "hp-it-a", IfName: "eth0"}, Netns: nsA.Path(), IPv4: netip.MustParseAddr("10.100.0.2"),
		PortMappings: []dataplane.PortMapping{
			{HostPort: 30999, ContainerPort: 8080, Protocol: dataplane.ProtocolTCP},
			{HostIP: uplink.Addr(), HostPort: 30998, ContainerPort: 8080, Protocol: dataplane.ProtocolUDP},
		}}
	b := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "hp-it-b", IfName: "eth0"}, Netns: nsB.Path(), IPv4: netip.MustParseAddr("10.100.0.3")}
	for _, p := range []dataplane.Pod{a, b} {
		if _, err := d.SetupPod(ctx, p); err != nil {
			t.Fatalf("SetupPod %s: %v", p.ContainerID, err)
		}
	}
	serveNamed(t, nsA, "a")

	state := &service.State{Node: service.Node{Name: "node", NATLoopback: []netip.Addr{loopback}}, Services: map[service.ID]*service.Service{}}
	render := func(d vpp.Dataplane) {
		r, err := nat44.New(d, nat44.Config{}, testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Resync(ctx, state); err != nil {
			t.Fatalf("the services renderer's Resync: %v", err)
		}
	}
	render(d)

	tcpPort := netip.AddrPortFrom(uplink.Addr(), 30999)
	udpPort := netip.AddrPortFrom(uplink.Addr(), 30998)
	check := func(t *testing.T, when string) {
		t.Helper()
		for _, c := range []struct {
			what     string
			from     *netnstest.NS
			network  string
			target   netip.AddrPort
			wantSeen netip.Addr
		}{
			{"an outside client reaches pod a through the node's address and hostPort", ext, "tcp", tcpPort, gateway},
			{"an outside client over UDP too", ext, "udp", udpPort, gateway},
			{"pod b on the same node reaches pod a's hostPort", nsB, "tcp", tcpPort, b.IPv4},
			{"pod b over UDP too", nsB, "udp", udpPort, b.IPv4},
			{"pod a reaches its own hostPort, from the NAT loopback", nsA, "tcp", tcpPort, loopback},
		} {
			poll.Eventually(t, 20*time.Second, func() error {
				name, seen, err := ask(ctx, c.from, c.network, c.target, netip.Addr{})
				if err != nil {
					return fmt.Errorf("%s: %s: %w", when, c.what, err)
				}
				if name != "a" || seen != c.wantSeen {
					return fmt.Errorf("%s: %s: %q saw %s, want \"a\" seeing %s", when, c.what, name, seen, c.wantSeen)
				}
				return nil
			})
		}
	}
	check(t, "first start")

	vpptest.RestartAndAwait(ctx, t, v, d.Resynced(), 2)
	render(d)
	check(t, "after VPP's restart")

	// vcoild restarts: the hostPorts come from its checkpoint.
	d.Close()
	cfg.Allocations = allocations{a, b}
	if d, err = vpp.New(cfg, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init after vcoild's restart: %v", err)
	}
	<-d.Resynced()
	render(d)
	check(t, "after vcoild's restart")

	// Pod a's DEL: the hostPort is no longer served, the node's address
	// (which the mapping shared) still answers.
	if err := d.TeardownPod(ctx, dataplane.Pod{PodKey: a.PodKey}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ask(ctx, ext, "tcp", tcpPort, netip.Addr{}); err == nil {
		t.Error("the hostPort still answers after the pod's DEL")
	}
	if err := ext.Ping(ctx, uplink.Addr().String()); err != nil {
		t.Errorf("the node's address after the DEL: %v", err)
	}
}

// Without the service proxy (no renderer, NAT44-ED off until the first
// hostPort): an outside client reaches pod a's hostPort, and traffic no
// mapping matches (the outside client to pod b directly) still passes the
// uplink, which the hostPort made a NAT frontend, thanks to NAT forwarding.
func TestRealVPPHostPortsWithoutTheServiceProxy(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	uplink := netip.MustParsePrefix("198.18.0.10/24")
	gateway := netip.MustParseAddr("198.18.0.254")
	node := netnstest.New(t, "hpnode2")
	ext := netnstest.New(t, "hpext2")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", netip.PrefixFrom(gateway, 24).String())
	ext.IP("route", "add", "10.100.0.0/24", "via", uplink.Addr().String())
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup hw-addr 02:fe:00:00:00:01")
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{uplink}, UplinkGatewayIPv4: gateway,
		PingInterval: 200 * time.Millisecond, RequestTimeout: 3 * time.Second, ReadyWait: 30 * time.Second,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := d.Blocks().Sync(ctx, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29")}); err != nil {
		t.Fatal(err)
	}
	nsA, nsB := netnstest.New(t, "hppod2-a"), netnstest.New(t, "hppod2-b")
	a := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "hp-it2-a", IfName: "eth0"}, Netns: nsA.Path(), IPv4: netip.MustParseAddr("10.100.0.2"),
		PortMappings: []dataplane.PortMapping{{HostPort: 30999, ContainerPort: 8080, Protocol: dataplane.ProtocolTCP}}}
	b := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "hp-it2-b", IfName: "eth0"}, Netns: nsB.Path(), IPv4: netip.MustParseAddr("10.100.0.3")}
	for _, p := range []dataplane.Pod{a, b} {
		if _, err := d.SetupPod(ctx, p); err != nil {
			t.Fatalf("SetupPod %s: %v", p.ContainerID, err)
		}
	}
	serveNamed(t, nsA, "a")
	serveNamed(t, nsB, "b")
	for _, c := range []struct {
		what   string
		target netip.AddrPort
		name   string
	}{
		{"the outside client reaches pod a's hostPort", netip.AddrPortFrom(uplink.Addr(), 30999), "a"},
		{"the outside client reaches pod b directly", netip.AddrPortFrom(b.IPv4, 8080), "b"},
	} {
		poll.Eventually(t, 20*time.Second, func() error {
			name, seen, err := ask(ctx, ext, "tcp", c.target, netip.Addr{})
			if err != nil {
				return fmt.Errorf("%s: %w", c.what, err)
			}
			if name != c.name || seen != gateway {
				return fmt.Errorf("%s: %q saw %s, want %q seeing %s", c.what, name, seen, c.name, gateway)
			}
			return nil
		})
	}
}
