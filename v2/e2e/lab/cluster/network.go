package cluster

import (
	"fmt"
	"net/netip"

	"github.com/vcoil/vcoil/v2/e2e/lab/render"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// buildNetwork makes the lab's namespaces and links. The fabric namespace
// holds a bridge joining the control plane and the nodes on 198.18.0.0/24
// and routes between it and the external network 203.0.113.0/24, where the
// external host lives. Every link is a veth pair made inside the fabric
// namespace with its other end moved into a lab namespace: nothing is ever
// created in the machine's root namespace. The fabric hashes multipath
// routes (the LoadBalancer addresses that several nodes announce) on the
// ports too, so that the connections of one client spread over the nodes.
// A dual-stack lab adds the IPv6 networks 2001:db8:18::/64 and
// 2001:db8:113::/64 on the same links; the addresses skip duplicate address
// detection (nodad), which would hold every address back for a second or
// two, and nothing else on these links could claim them.
func (c Config) buildNetwork() error {
	topo := c.Topology
	for _, ns := range topo.Netns() {
		if err := runAll([]string{"ip", "netns", "add", ns}, ip(ns, "link", "set", "lo", "up"), kernelDefaults(ns)); err != nil {
			return err
		}
	}
	if err := c.recordNamespaces(); err != nil {
		return err
	}
	fabric := topology.FabricNetns
	bits := topology.FabricNet.Bits()
	cmds := [][]string{
		ip(fabric, "link", "add", "br0", "type", "bridge"),
		ip(fabric, "addr", "add", fmt.Sprintf("%s/%d", topology.FabricIP, bits), "dev", "br0"),
		ip(fabric, "link", "set", "br0", "up"),
		inNetns(fabric, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"),
		inNetns(fabric, "sysctl", "-q", "-w", "net.ipv4.fib_multipath_hash_policy=1"),
		// No ICMP redirects: the fabric routes a node's traffic to another
		// node's pods back onto the bridge it came from, and VPP (25.10)
		// drops the NAT44 session of a packet a redirect is about, which
		// cuts connections from a pod to another node's NodePort.
		inNetns(fabric, "sysctl", "-q", "-w", "net.ipv4.conf.all.send_redirects=0"),
		inNetns(fabric, "sysctl", "-q", "-w", "net.ipv4.conf.default.send_redirects=0"),
		inNetns(fabric, "sysctl", "-q", "-w", "net.ipv4.conf.br0.send_redirects=0"),
		// -e: a kernel without IPv6 has no such key.
		inNetns(fabric, "sysctl", "-q", "-e", "-w", "net.ipv6.fib_multipath_hash_policy=1"),
	}
	dual := topo.Dual()
	bits6 := topology.FabricNet6.Bits()
	if dual {
		cmds = append(cmds,
			ip(fabric, "addr", "add", fmt.Sprintf("%s/%d", topology.FabricIP6, bits6), "dev", "br0", "nodad"),
			inNetns(fabric, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"),
		)
	}
	// link puts ns's eth0 on the bridge; attach gives it address addr,
	// routed via the fabric.
	link := func(ns, port string) {
		cmds = append(cmds,
			ip(fabric, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns),
			ip(fabric, "link", "set", port, "master", "br0", "up"))
	}
	attach := func(ns, port string, addr, addr6 netip.Addr) {
		link(ns, port)
		cmds = append(cmds,
			ip(ns, "addr", "add", fmt.Sprintf("%s/%d", addr, bits), "dev", "eth0"),
			ip(ns, "link", "set", "eth0", "up"),
			ip(ns, "route", "add", "default", "via", topology.FabricIP.String()),
		)
		if addr6.IsValid() {
			cmds = append(cmds,
				ip(ns, "addr", "add", fmt.Sprintf("%s/%d", addr6, bits6), "dev", "eth0", "nodad"),
				ip(ns, "-6", "route", "add", "default", "via", topology.FabricIP6.String()),
			)
		}
	}
	cp6 := netip.Addr{}
	if dual {
		cp6 = topology.ControlPlaneIP6
	}
	attach(topology.ControlPlaneNetns, "p-cp", topology.ControlPlaneIP, cp6)
	for _, n := range topo.NodeList() {
		if n.Dataplane == topology.DataplaneVPP {
			// VPP will hold the node's address on eth0; the kernel
			// reaches the fabric through VPP (startVPPs).
			link(n.Netns, n.Port)
			for _, cmd := range render.VPPNodeNetwork(n) {
				cmds = append(cmds, inNetns(n.Netns, cmd...))
			}
		} else {
			attach(n.Netns, n.Port, n.IP, n.IP6)
		}
		cmds = append(cmds, inNetns(n.Netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"))
		if dual {
			cmds = append(cmds, inNetns(n.Netns, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"))
		}
	}
	ext, extBits := topology.ExternalNetns, topology.ExternalNet.Bits()
	cmds = append(cmds,
		ip(fabric, "link", "add", "ext0", "type", "veth", "peer", "name", "eth0", "netns", ext),
		ip(fabric, "addr", "add", fmt.Sprintf("%s/%d", topology.ExternalGW, extBits), "dev", "ext0"),
		ip(fabric, "link", "set", "ext0", "up"),
		ip(ext, "addr", "add", fmt.Sprintf("%s/%d", topology.ExternalIP, extBits), "dev", "eth0"),
		ip(ext, "link", "set", "eth0", "up"),
		ip(ext, "route", "add", "default", "via", topology.ExternalGW.String()),
	)
	if dual {
		ext6Bits := topology.ExternalNet6.Bits()
		cmds = append(cmds,
			ip(fabric, "addr", "add", fmt.Sprintf("%s/%d", topology.ExternalGW6, ext6Bits), "dev", "ext0", "nodad"),
			ip(ext, "addr", "add", fmt.Sprintf("%s/%d", topology.ExternalIP6, ext6Bits), "dev", "eth0", "nodad"),
			ip(ext, "-6", "route", "add", "default", "via", topology.ExternalGW6.String()),
		)
	}
	return runAll(cmds...)
}

// kernelDefaults sets in a new lab namespace the kernel's own values of the
// settings it would otherwise copy from the machine's root namespace (all
// of IPv4's, and IPv6's too where net.core.devconf_inherit_init_net is 1):
// on a Docker host or a Kubernetes node the control plane and the external
// host would forward, and every namespace filter by reverse path. Whatever
// routes turns forwarding on below. -e: a kernel without IPv6 has no such
// keys.
func kernelDefaults(ns string) []string {
	return inNetns(ns, "sysctl", "-q", "-e", "-w",
		"net.ipv4.ip_forward=0",
		"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0", "net.ipv4.conf.lo.rp_filter=0",
		"net.ipv6.conf.all.disable_ipv6=0", "net.ipv6.conf.default.disable_ipv6=0",
		"net.ipv6.conf.all.forwarding=0", "net.ipv6.conf.default.forwarding=0")
}
