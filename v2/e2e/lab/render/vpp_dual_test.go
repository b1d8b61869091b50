package render

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/adapter/socketclient"
	"go.fd.io/govpp/binapi/vlib"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// vppNode is node2 of a lab whose nodes alternate Linux and VPP.
func vppNode(t *testing.T, family string) topology.Node {
	t.Helper()
	topo, err := topology.New(2, "linux", "vpp")
	if err != nil {
		t.Fatal(err)
	}
	if topo, err = topo.WithIPFamily(family); err != nil {
		t.Fatal(err)
	}
	n := topo.NodeList()[1]
	if n.Dataplane != topology.DataplaneVPP {
		t.Fatalf("node2's dataplane is %q, want vpp", n.Dataplane)
	}
	return n
}

// A VPP node's configuration, line by line: an IPv4 lab's is what it was
// before dual stack existed, and a dual-stack lab's adds the IPv6
// counterparts beside the IPv4 lines.
func TestVPPNodeConfigurationByIPFamily(t *testing.T) {
	for _, c := range []struct {
		family  string
		cli     []string
		network []string
	}{
		{
			family: topology.IPFamilyIPv4,
			cli: []string{
				"create host-interface v2 name eth0 rx-per-block 496 tx-per-block 496",
				"set interface mtu packet 1500 host-eth0",
				"set interface ip address host-eth0 198.18.0.12/24",
				"set interface state host-eth0 up",
				"create host-interface v2 name vcoilvpp rx-per-block 496 tx-per-block 496",
				"set interface ip address host-vcoilvpp 169.254.100.1/30",
				"set interface state host-vcoilvpp up",
				"ip route add 0.0.0.0/0 via 198.18.0.1 host-eth0",
				"ip punt redirect add rx all via 169.254.100.2 host-vcoilvpp",
				"set punt udp all",
			},
			network: []string{
				"ip addr add 198.18.0.12/32 dev lo",
				"ip link add vcoilhost type veth peer name vcoilvpp",
				"sysctl -q -w net.ipv6.conf.vcoilvpp.disable_ipv6=1",
				"sysctl -q -w net.ipv6.conf.eth0.disable_ipv6=1",
				"sysctl -q -w net.ipv4.conf.eth0.arp_ignore=8",
				"sysctl -q -w net.ipv4.conf.vcoilhost.arp_announce=2",
				"ip link set vcoilvpp up",
				"ip link set eth0 up",
				"ip addr add 169.254.100.2/30 dev vcoilhost",
				"ip link set vcoilhost up",
				"ip route add 198.18.0.0/24 via 169.254.100.1 dev vcoilhost src 198.18.0.12",
				"ip route add default via 169.254.100.1 dev vcoilhost src 198.18.0.12",
				"nft add table netdev vcoil-lab-uplink ; add chain netdev vcoil-lab-uplink ingress { type filter hook ingress device eth0 priority 0 ; policy drop ; }",
			},
		},
		{
			family: topology.IPFamilyDual,
			cli: []string{
				"create host-interface v2 name eth0 rx-per-block 496 tx-per-block 496",
				"set interface mtu packet 1500 host-eth0",
				"set interface ip address host-eth0 198.18.0.12/24",
				"set interface ip address host-eth0 2001:db8:18::12/64",
				"set interface state host-eth0 up",
				"create host-interface v2 name vcoilvpp rx-per-block 496 tx-per-block 496",
				"set interface ip address host-vcoilvpp 169.254.100.1/30",
				"enable ip6 interface host-vcoilvpp",
				"set interface ip address host-vcoilvpp fe80::1/128",
				"set interface state host-vcoilvpp up",
				"ip route add 0.0.0.0/0 via 198.18.0.1 host-eth0",
				"ip punt redirect add rx all via 169.254.100.2 host-vcoilvpp",
				"set punt udp all",
				"ip route add ::/0 via 2001:db8:18::1 host-eth0",
				"ip6 punt redirect add rx all via fe80::2 host-vcoilvpp",
				"set punt ipv6 udp all",
			},
			network: []string{
				"ip addr add 198.18.0.12/32 dev lo",
				"ip -6 addr add 2001:db8:18::12/128 dev lo",
				"ip link add vcoilhost type veth peer name vcoilvpp",
				"sysctl -q -w net.ipv6.conf.vcoilvpp.disable_ipv6=1",
				"sysctl -q -w net.ipv6.conf.eth0.disable_ipv6=1",
				"sysctl -q -w net.ipv4.conf.eth0.arp_ignore=8",
				"sysctl -q -w net.ipv4.conf.vcoilhost.arp_announce=2",
				"ip link set vcoilvpp up",
				"ip link set eth0 up",
				"ip addr add 169.254.100.2/30 dev vcoilhost",
				"ip -6 addr add fe80::2/64 dev vcoilhost nodad",
				"ip link set vcoilhost up",
				"ip route add 198.18.0.0/24 via 169.254.100.1 dev vcoilhost src 198.18.0.12",
				"ip route add default via 169.254.100.1 dev vcoilhost src 198.18.0.12",
				"ip -6 route add 2001:db8:18::/64 via fe80::1 dev vcoilhost src 2001:db8:18::12",
				"ip -6 route add default via fe80::1 dev vcoilhost src 2001:db8:18::12",
				"nft add table netdev vcoil-lab-uplink ; add chain netdev vcoil-lab-uplink ingress { type filter hook ingress device eth0 priority 0 ; policy drop ; }",
			},
		},
	} {
		t.Run(c.family, func(t *testing.T) {
			n := vppNode(t, c.family)
			if got, want := VPPStartupCLI(n), strings.Join(c.cli, "\n")+"\n"; got != want {
				t.Errorf("startup CLI:\n%s\nwant:\n%s", got, want)
			}
			var got []string
			for _, cmd := range VPPNodeNetwork(n) {
				got = append(got, strings.Join(cmd, " "))
			}
			if !slices.Equal(got, c.network) {
				t.Errorf("the node's network:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.network, "\n"))
			}
		})
	}
}

// The lab's VPP node for real, in namespaces: a fabric namespace holding
// the fabric router's addresses (and the external gateway's, standing for
// the world beyond), a node namespace configured by VPPNodeNetwork, a real
// VPP (VCOIL_VPP_BIN) in it that accepts every line of VPPStartupCLI, and
// vcoil's VPP driver configured as the overlay lab-vpp configures vcoild
// (the same flags in both families). Before and after the driver adopts
// the node, the node's kernel reaches the fabric and beyond through VPP,
// the fabric reaches the node's kernel through VPP's punt redirect (TCP
// and UDP), and a pod reaches the fabric and the fabric the pod, in every
// family of the lab.
func TestRealVPPRunsTheLabNodeConfiguration(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	for _, family := range []string{topology.IPFamilyIPv4, topology.IPFamilyDual} {
		t.Run(family, func(t *testing.T) { testLabVPPNode(t, bin, family) })
	}
}

func testLabVPPNode(t *testing.T, bin, family string) {
	n := vppNode(t, family)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	fabric, node := netnstest.New(t, "labfab"), netnstest.New(t, "labvppnode")
	netnstest.Veth(t, fabric, n.Port, node, VPPUplink)
	fabric.AddAddr(n.Port, fmt.Sprintf("%s/%d", topology.FabricIP, topology.FabricNet.Bits()))
	fabric.AddAddr("lo", topology.ExternalGW.String()+"/32")
	if n.IP6.IsValid() {
		fabric.AddAddr(n.Port, fmt.Sprintf("%s/%d", topology.FabricIP6, topology.FabricNet6.Bits()))
		fabric.AddAddr("lo", topology.ExternalGW6.String()+"/128")
	}
	for _, cmd := range VPPNodeNetwork(n) {
		if _, err := node.TryExec(ctx, cmd[0], cmd[1:]...); err != nil {
			t.Fatal(err)
		}
	}

	// VPP runs the start-up commands one by one here, so that a rejected
	// line fails the test by name (in a startup-config file, VPP stops at
	// it and says so only in its own output).
	v := vpptest.Start(t, bin, node.Path())
	for _, line := range strings.Split(strings.TrimSuffix(VPPStartupCLI(n), "\n"), "\n") {
		reply := cli(t, v, line)
		want := ""
		if args, ok := strings.CutPrefix(line, "create host-interface "); ok {
			// VPP answers with the new interface's name: "host-" and
			// the word after "name".
			f := strings.Fields(args)
			if i := slices.Index(f, "name"); i >= 0 && i+1 < len(f) {
				want = "host-" + f[i+1]
			}
		}
		if strings.TrimSpace(reply) != want {
			t.Fatalf("VPP answered %q to %q, want %q", reply, line, want)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(cli(t, v, "show interface addr"), cli(t, v, "show ip fib"), cli(t, v, "show ip6 fib"),
				cli(t, v, "show ip6 punt redirect"), cli(t, v, "show ip6 neighbors"))
		}
	})

	ips := n.IPs()
	fabricIPs := []netip.Addr{topology.FabricIP, topology.ExternalGW}
	if n.IP6.IsValid() {
		fabricIPs = append(fabricIPs, topology.FabricIP6, topology.ExternalGW6)
	}
	kubelet := serveTCPEcho(node)
	udp := serveUDPEcho(t, node)
	nodeTalks := func(when string) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, func() error {
			for _, a := range fabricIPs {
				if err := node.Ping(ctx, a.String()); err != nil {
					return fmt.Errorf("%s: the node's kernel: %w", when, err)
				}
			}
			for _, a := range ips {
				if err := fabric.Ping(ctx, a.String()); err != nil {
					return fmt.Errorf("%s: the fabric to VPP: %w", when, err)
				}
				if err := tcpEcho(ctx, fabric, netip.AddrPortFrom(a, kubelet)); err != nil {
					return fmt.Errorf("%s: the fabric to the node's kernel: %w", when, err)
				}
				if err := udpEcho(ctx, fabric, netip.AddrPortFrom(a, udp)); err != nil {
					return fmt.Errorf("%s: the fabric to the node's kernel: %w", when, err)
				}
			}
			return nil
		})
	}
	nodeTalks("VPP's start-up configuration alone")

	// vcoild as the overlay lab-vpp runs it: --vpp-uplink=host-eth0, both
	// gateways, pod interfaces of the machine's kind; the interconnect is
	// the one VPP's start-up configuration attached.
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		HostInterconnect: vpp.AFPacket, Uplink: "host-" + VPPUplink,
		UplinkGatewayIPv4: topology.FabricIP, UplinkGatewayIPv6: topology.FabricIP6,
		PingInterval: 200 * time.Millisecond, ReadyWait: 30 * time.Second,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if out := cli(t, v, "show interface"); strings.Count(out, "vcoil") != 1 || strings.Contains(out, "tap") {
		t.Fatalf("the driver made an interconnect of its own beside host-vcoilvpp:\n%s", out)
	}
	block, block6 := netip.MustParsePrefix("198.19.0.0/27"), netip.MustParsePrefix("2001:db8:19::/123")
	pod := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "lab-vpp-node-pod", IfName: "eth0"},
		Namespace: "it", Name: "pod", IPv4: netip.MustParseAddr("198.19.0.2")}
	blocks := []netip.Prefix{block}
	fabric.IP("route", "add", block.String(), "via", n.IP.String())
	if n.IP6.IsValid() {
		pod.IPv6 = netip.MustParseAddr("2001:db8:19::2")
		blocks = append(blocks, block6)
		fabric.IP("-6", "route", "add", block6.String(), "via", n.IP6.String())
	}
	if err := d.Blocks().Sync(ctx, blocks); err != nil {
		t.Fatal(err)
	}
	podNS := netnstest.New(t, "labvpppod")
	pod.Netns = podNS.Path()
	if _, err := d.SetupPod(ctx, pod); err != nil {
		t.Fatalf("SetupPod: %v", err)
	}
	nodeTalks("vcoil's driver running")
	podPort := serveTCPEcho(podNS)
	poll.Eventually(t, 20*time.Second, func() error {
		for _, a := range fabricIPs {
			if err := podNS.Ping(ctx, a.String()); err != nil {
				return fmt.Errorf("the pod: %w", err)
			}
		}
		for _, a := range []netip.Addr{pod.IPv4, pod.IPv6} {
			if !a.IsValid() {
				continue
			}
			if err := tcpEcho(ctx, fabric, netip.AddrPortFrom(a, podPort)); err != nil {
				return fmt.Errorf("the fabric to the pod: %w", err)
			}
			if err := node.Ping(ctx, a.String()); err != nil {
				return fmt.Errorf("the node's kernel to the pod: %w", err)
			}
		}
		return nil
	})
}

// cli runs one VPP CLI command and returns VPP's answer.
func cli(t *testing.T, v *vpptest.VPP, cmd string) string {
	t.Helper()
	conn, err := core.Connect(socketclient.NewVppClient(v.APISocket))
	if err != nil {
		t.Fatalf("VPP CLI: %v", err)
	}
	defer conn.Disconnect()
	ch, err := conn.NewAPIChannel()
	if err != nil {
		t.Fatalf("VPP CLI: %v", err)
	}
	defer ch.Close()
	reply := &vlib.CliInbandReply{}
	if err := ch.SendRequest(&vlib.CliInband{Cmd: cmd}).ReceiveReply(reply); err != nil {
		t.Fatalf("VPP CLI %q: %v", cmd, err)
	}
	return reply.Reply
}

// serveTCPEcho echoes TCP in ns on a port of its choice, in both families.
func serveTCPEcho(ns *netnstest.NS) uint16 {
	return uint16(ns.ServeTCPEcho(":0").Port)
}

// serveUDPEcho echoes UDP datagrams in ns on a port of its choice, in both
// families.
func serveUDPEcho(t *testing.T, ns *netnstest.NS) uint16 {
	var pc net.PacketConn
	ns.Run(func() error {
		var err error
		pc, err = net.ListenPacket("udp", ":0")
		return err
	})
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:k], from)
		}
	}()
	return uint16(pc.LocalAddr().(*net.UDPAddr).Port)
}

// tcpEcho sends more than one segment's worth to an echo server from ns
// and checks what comes back.
func tcpEcho(ctx context.Context, ns *netnstest.NS, to netip.AddrPort) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := ns.Dial(ctx, "tcp", to.String())
	if err != nil {
		return fmt.Errorf("connect to %s from %s: %w", to, ns, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	msg := strings.Repeat("vcoil", 400)
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("send to %s from %s: %w", to, ns, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("read the echo of %s from %s: %w", to, ns, err)
	}
	if string(buf) != msg {
		return fmt.Errorf("%s echoed something else to %s", to, ns)
	}
	return nil
}

// udpEcho sends one datagram from ns and waits a second for its echo.
func udpEcho(ctx context.Context, ns *netnstest.NS, to netip.AddrPort) error {
	c, err := ns.Dial(ctx, "udp", to.String())
	if err != nil {
		return fmt.Errorf("UDP to %s from %s: %w", to, ns, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	msg := "vcoil " + to.String()
	if _, err := c.Write([]byte(msg)); err != nil {
		return fmt.Errorf("UDP to %s from %s: %w", to, ns, err)
	}
	buf := make([]byte, 256)
	k, err := c.Read(buf)
	if err != nil {
		return fmt.Errorf("UDP echo of %s to %s: %w", to, ns, err)
	}
	if string(buf[:k]) != msg {
		return fmt.Errorf("UDP echo of %s to %s: %q", to, ns, buf[:k])
	}
	return nil
}
