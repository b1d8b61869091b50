package render

import (
	"fmt"
	"strings"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
)

// LabelDataplane is the node label (linux or vpp) by which vcoil's lab
// overlays place their DaemonSets.
const LabelDataplane = "vcoil.io/dataplane"

// A VPP node of the lab: the names and addresses its VPP, its kernel and
// vcoild (through the overlay lab-vpp) agree on.
const (
	// VPPRunDir is VPP's runtime directory in the node's mount namespace
	// (its /run is the node's own): vcoild reaches the API socket there.
	VPPRunDir = "/run/vpp"
	// VPPUplink is the node's fabric link, which VPP attaches with
	// af_packet as host-eth0 and which then belongs to VPP alone.
	VPPUplink = "eth0"
	// VPPUplinkGuard is the nftables table (family netdev) in the node's
	// namespace that drops everything the kernel would receive on the
	// uplink: only VPP's packet socket, which sees frames before the
	// ingress hook, gets them.
	VPPUplinkGuard = "vcoil-lab-uplink"
)

// FabricMTU is the MTU of the lab's fabric: its veths' and bridge's, the
// kernel's default.
const FabricMTU = 1500

// The host interconnect: vcoild's names and addresses for an af_packet
// one (the kernel's veth end, the end VPP attaches), which VPP's start-up
// configuration makes here and vcoild adopts.
var (
	vppHostLink   = vpp.HostInterconnectName
	vppHostPeer   = vpp.HostInterconnectVPPName
	vppHostVPPIP  = vpp.InterconnectVPPIPv4.Addr().String()
	vppHostNodeIP = vpp.InterconnectHostIPv4.Addr().String()
	// The interconnect's IPv6 ends are link-local (fe80::1 VPP's,
	// fe80::2/64 the kernel's), the ones vcoild gives it.
	vppHostVPPIP6  = vpp.InterconnectVPPIPv6.String()
	vppHostNodeIP6 = vpp.InterconnectHostIPv6
)

// vppPidfile is where a node's VPP supervisor writes VPP's PID at each
// start, "{node}" standing for the node's name, under the lab's state
// directory (VPP's own pidfile must be in its runtime directory, in the
// node's mount namespace).
const vppPidfile = "vpp/{node}/vpp.pid"

// VPPPidfile is the node's VPP's PID file under stateDir.
func VPPPidfile(stateDir string, n topology.Node) string {
	return stateDir + "/" + strings.ReplaceAll(vppPidfile, "{node}", n.Name)
}

// VPPStartupConf is the node's VPP configuration: no DPDK, no hugepages
// (4k pages), the main thread only, its sockets in
// VPPRunDir, its log in logFile, the start-up commands in cliFile. The API
// segment's prefix is the node's: the nodes share the machine's /dev/shm.
//
// No poll-sleep-usec: the af_packet inputs are in interrupt mode, so an
// idle VPP sleeps in epoll_wait until a socket has something, whereas
// poll-sleep-usec makes every main-loop turn sleep first, which cost each
// packet hop and each API message about 150 µs.
func VPPStartupConf(n topology.Node, cliFile, logFile string) string {
	return execute(`unix {
  nodaemon
  cli-listen {{.Run}}/cli.sock
  log {{.Log}}
  runtime-dir {{.Run}}
  pidfile {{.Run}}/vpp.pid
  startup-config {{.CLI}}
}
api-segment { prefix {{.Prefix}} }
socksvr { socket-name {{.Run}}/api.sock }
cpu { main-core 0 }
buffers { buffers-per-numa 16384 page-size 4k }
memory { main-heap-size 512M main-heap-page-size 4k }
statseg { size 32M page-size 4k socket-name {{.Run}}/stats.sock }
plugins { plugin dpdk_plugin.so { disable } }
`, map[string]string{"Run": VPPRunDir, "Log": logFile, "CLI": cliFile, "Prefix": topology.Prefix + "-" + n.Name})
}

// VPPStartupCLI are the commands VPP runs at each start, as a real node's
// start-up configuration would: VPP takes the fabric link and the node's
// address, attaches the host interconnect, routes its default through the
// fabric, and hands the kernel (through the interconnect) whatever comes
// for the node's address that VPP does not serve itself: the kubelet's,
// containerd's and hostNetwork pods' TCP and UDP. VPP answers ARP and ping
// for the address.
//
// A node of a dual-stack lab (n.IP6 valid) gets the same in IPv6: its IPv6
// address on the fabric link, the interconnect's link-local fe80::1 (which
// the kernel's routes name before vcoild has run), a default route through
// the fabric and the punt redirect of IPv6 to the kernel's fe80::2. VPP
// answers neighbour solicitations and ping for the address, and sends no
// router advertisements (VPP 25.10 sends none unless told to).
func VPPStartupCLI(n topology.Node) string {
	up, host := "host-"+VPPUplink, "host-"+vppHostPeer
	dual := n.IP6.IsValid()
	lines := []string{
		// TPACKET_V2, as vcoild makes pod interfaces: a V3 receive
		// ring hands packets to VPP only when a block fills or after a
		// 1 ms timeout, which every lone packet waited for. Frames hold
		// 64 KiB GSO packets (VPP's default size); 496 of them fill 32 MiB
		// per ring (the kernel rounds a ring up to a power of two pages).
		"create host-interface v2 name " + VPPUplink + " rx-per-block 496 tx-per-block 496",
		// VPP 25.10 gives an af_packet interface an L3 MTU of 9000
		// whatever its link's; the fabric's veths and bridge carry
		// 1500. VPP must know (vcoild gives pods the uplink's MTU), or
		// it forwards packets the fabric drops and bulk TCP between
		// nodes stalls. "packet" sets VPP's own MTU and leaves the
		// link's alone.
		fmt.Sprintf("set interface mtu packet %d %s", FabricMTU, up),
		fmt.Sprintf("set interface ip address %s %s/%d", up, n.IP, topology.FabricNet.Bits()),
	}
	if dual {
		lines = append(lines, fmt.Sprintf("set interface ip address %s %s/%d", up, n.IP6, topology.FabricNet6.Bits()))
	}
	lines = append(lines,
		"set interface state "+up+" up",
		// TPACKET_V2 on the interconnect: with VPP 25.10's default
		// (TPACKET_V3) its transmit ring to the node's kernel stalled for
		// minutes under the conformance specs' load (frames queued for
		// the kernel, none sent), and the node lost its network. The
		// checksum and GSO offload stays: the kernel leaves checksums to
		// it on the veth.
		"create host-interface v2 name "+vppHostPeer+" rx-per-block 496 tx-per-block 496",
		fmt.Sprintf("set interface ip address %s %s/30", host, vppHostVPPIP),
	)
	if dual {
		// A link-local address given as an interface address (it must
		// be a /128) replaces the one VPP made from the MAC.
		lines = append(lines,
			"enable ip6 interface "+host,
			fmt.Sprintf("set interface ip address %s %s/128", host, vppHostVPPIP6))
	}
	lines = append(lines,
		"set interface state "+host+" up",
		fmt.Sprintf("ip route add 0.0.0.0/0 via %s %s", topology.FabricIP, up),
		fmt.Sprintf("ip punt redirect add rx all via %s %s", vppHostNodeIP, host),
		"set punt udp all",
	)
	if dual {
		// The IPv6 ones: "ip punt redirect" is IPv4's only, and "set
		// punt" without ipv6 registers IPv4 alone.
		lines = append(lines,
			fmt.Sprintf("ip route add ::/0 via %s %s", topology.FabricIP6, up),
			fmt.Sprintf("ip6 punt redirect add rx all via %s %s", vppHostNodeIP6.Addr(), host),
			"set punt ipv6 udp all",
		)
	}
	return strings.Join(lines, "\n") + "\n"
}

// VPPNodeNetwork are the commands (each an argv, run in the node's
// namespace) that give a VPP node's kernel its side: the node's address on
// lo (VPP holds it on the fabric; the kernel keeps it for the kubelet and
// hostNetwork pods), the host interconnect's veth, the routes to the fabric
// and everything else through VPP, and the uplink closed to the kernel.
//
// A node of a dual-stack lab (n.IP6 valid) gets its IPv6 address on lo as
// a /128, the interconnect's fe80::2/64 (vcoild's; VPP's punt redirect
// needs it before vcoild runs) and the IPv6 routes to the fabric and the
// default through VPP's fe80::1, from the node's IPv6 address. IPv6 stays
// off on the uplink and on VPP's end of the interconnect: the kernel must
// neither answer neighbour solicitations there nor send its own.
func VPPNodeNetwork(n topology.Node) [][]string {
	ip := func(args ...string) []string { return append([]string{"ip"}, args...) }
	sysctl := func(kv string) []string { return []string{"sysctl", "-q", "-w", kv} }
	src := n.IP.String()
	dual := n.IP6.IsValid()
	cmds := [][]string{ip("addr", "add", src+"/32", "dev", "lo")}
	if dual {
		cmds = append(cmds, ip("-6", "addr", "add", n.IP6.String()+"/128", "dev", "lo"))
	}
	cmds = append(cmds,
		ip("link", "add", vppHostLink, "type", "veth", "peer", "name", vppHostPeer),
		sysctl("net.ipv6.conf."+vppHostPeer+".disable_ipv6=1"),
		sysctl("net.ipv6.conf."+VPPUplink+".disable_ipv6=1"),
		// The kernel must never answer ARP on the uplink for the node's
		// address: VPP does.
		sysctl("net.ipv4.conf."+VPPUplink+".arp_ignore=8"),
		// The kernel's ARP requests to VPP on the interconnect must come
		// from its address there: VPP ignores a request whose source is
		// one of its own addresses, the node's, which the kernel would
		// otherwise take from the packet that needs the neighbour.
		sysctl("net.ipv4.conf."+vppHostLink+".arp_announce=2"),
		ip("link", "set", vppHostPeer, "up"),
		ip("link", "set", VPPUplink, "up"),
		ip("addr", "add", vppHostNodeIP+"/30", "dev", vppHostLink),
	)
	if dual {
		// nodad: a tentative address is no neighbour VPP can resolve,
		// and nothing else on the veth could claim it.
		cmds = append(cmds, ip("-6", "addr", "add", vppHostNodeIP6.String(), "dev", vppHostLink, "nodad"))
	}
	cmds = append(cmds,
		ip("link", "set", vppHostLink, "up"),
		ip("route", "add", topology.FabricNet.String(), "via", vppHostVPPIP, "dev", vppHostLink, "src", src),
		ip("route", "add", "default", "via", vppHostVPPIP, "dev", vppHostLink, "src", src),
	)
	if dual {
		src6 := n.IP6.String()
		cmds = append(cmds,
			ip("-6", "route", "add", topology.FabricNet6.String(), "via", vppHostVPPIP6, "dev", vppHostLink, "src", src6),
			ip("-6", "route", "add", "default", "via", vppHostVPPIP6, "dev", vppHostLink, "src", src6),
		)
	}
	return append(cmds,
		[]string{"nft", "add table netdev " + VPPUplinkGuard + " ; add chain netdev " + VPPUplinkGuard + " ingress { type filter hook ingress device " + VPPUplink + " priority 0 ; policy drop ; }"})
}
