package vpp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	cnins "github.com/containernetworking/plugins/pkg/ns"
	"github.com/safchain/ethtool"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/internal/ipnet"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
)

// netlinkKernel works on the node's namespace (nodeNetns, or vcoild's own)
// and the pods' through netlink handles bound to them; only sysctls enter
// a namespace.
type netlinkKernel struct {
	nodeNetns string
}

func openNamespace(path string) (*kernelns.Namespace, error) {
	n, err := kernelns.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open %w", err)
	}
	return n, nil
}

func (k *netlinkKernel) openNode() (*kernelns.Namespace, error) {
	return openNamespace(k.nodeNetns)
}

func (k *netlinkKernel) CreateHostVeth(_ context.Context, mtu int) error {
	node, err := k.openNode()
	if err != nil {
		return err
	}
	defer node.Close()
	host, err := node.FindLink(HostInterconnectName)
	if err != nil {
		return err
	}
	if host != nil && host.Type() == "veth" {
		return nil
	}
	if host != nil {
		return fmt.Errorf("%s in %s is a %s, want the veth of an af_packet host interconnect", HostInterconnectName, node.Path, host.Type())
	}
	la := netlink.NewLinkAttrs()
	la.Name = HostInterconnectName
	la.MTU = mtu
	if err := node.NL.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: HostInterconnectVPPName, PeerMTU: uint32(mtu)}); err != nil {
		return fmt.Errorf("create veth %s/%s in %s: %w", HostInterconnectName, HostInterconnectVPPName, node.Path, err)
	}
	peer, err := node.NL.LinkByName(HostInterconnectVPPName)
	if err == nil {
		err = node.NL.LinkSetUp(peer)
	}
	if err != nil {
		return fmt.Errorf("set %s up in %s: %w", HostInterconnectVPPName, node.Path, err)
	}
	return node.SetSysctls(kernelns.Sysctl{Key: "net/ipv6/conf/" + HostInterconnectVPPName + "/disable_ipv6", Value: "1"})
}

func (k *netlinkKernel) LinkMTU(_ context.Context, name string) (int, bool, error) {
	node, err := k.openNode()
	if err != nil {
		return 0, false, err
	}
	defer node.Close()
	l, err := node.FindLink(name)
	if err != nil || l == nil {
		return 0, false, err
	}
	return l.Attrs().MTU, true, nil
}

// openHost opens the node's namespace and finds the node's end of the host
// interconnect, which must exist. The caller closes the namespace.
func (k *netlinkKernel) openHost() (*kernelns.Namespace, netlink.Link, error) {
	node, err := k.openNode()
	if err != nil {
		return nil, nil, err
	}
	host, err := node.FindLink(HostInterconnectName)
	if err == nil && host == nil {
		err = fmt.Errorf("host interconnect %s is missing in %s", HostInterconnectName, node.Path)
	}
	if err != nil {
		node.Close()
		return nil, nil, err
	}
	return node, host, nil
}

func (k *netlinkKernel) SetUpHost(context.Context) error {
	node, host, err := k.openHost()
	if err != nil {
		return err
	}
	defer node.Close()
	if err := node.SetSysctls(
		kernelns.Sysctl{Key: "net/ipv4/ip_forward", Value: "1"},
		kernelns.Sysctl{Key: "net/ipv6/conf/all/forwarding", Value: "1"},
		kernelns.Sysctl{Key: "net/ipv6/conf/" + HostInterconnectName + "/accept_ra", Value: "0"},
		// ARP requests to VPP from the interconnect's own address: the
		// kernel would otherwise take the source of the packet that needs
		// the neighbour, which may be the node's address, and VPP ignores
		// requests from an address it holds itself (a node whose uplink
		// address VPP holds lost VPP as its neighbour that way).
		kernelns.Sysctl{Key: "net/ipv4/conf/" + HostInterconnectName + "/arp_announce", Value: "2"},
	); err != nil {
		return err
	}
	addrs, err := node.NL.AddrList(host, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %s in %s: %w", HostInterconnectName, node.Path, err)
	}
	for _, a := range []*netlink.Addr{
		{IPNet: kernelns.IPNet(InterconnectHostIPv4)},
		{IPNet: kernelns.IPNet(InterconnectHostIPv6), Flags: unix.IFA_F_NODAD},
	} {
		if slices.ContainsFunc(addrs, func(b netlink.Addr) bool { return b.IPNet.String() == a.IPNet.String() }) {
			continue
		}
		if err := node.NL.AddrAdd(host, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add %s to %s in %s: %w", a.IPNet, HostInterconnectName, node.Path, err)
		}
	}
	if err := node.NL.LinkSetUp(host); err != nil {
		return fmt.Errorf("set %s up in %s: %w", HostInterconnectName, node.Path, err)
	}
	return nil
}

func (k *netlinkKernel) SyncBlockRoutes(_ context.Context, blocks []netip.Prefix) ([]netip.Prefix, error) {
	node, err := k.openNode()
	if err != nil {
		return nil, err
	}
	defer node.Close()
	host, err := node.FindLink(HostInterconnectName)
	if err != nil {
		return nil, err
	}
	existing, err := node.NL.RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: BlockRouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list block routes in %s: %w", node.Path, err)
	}
	var removed []netip.Prefix
	for _, r := range existing {
		p, ok := ipnet.Prefix(r.Dst)
		if ok && slices.Contains(blocks, p) && host != nil && r.LinkIndex == host.Attrs().Index {
			continue
		}
		if err := node.NL.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return removed, fmt.Errorf("delete route %v in %s: %w", r.Dst, node.Path, err)
		}
		if ok && !slices.Contains(blocks, p) {
			removed = append(removed, p)
		}
	}
	if host == nil {
		if len(blocks) > 0 {
			return removed, fmt.Errorf("route the node's blocks: host interconnect %s is missing in %s", HostInterconnectName, node.Path)
		}
		return removed, nil
	}
	for _, b := range blocks {
		r := netlink.Route{LinkIndex: host.Attrs().Index, Dst: kernelns.IPNet(b), Table: unix.RT_TABLE_MAIN, Protocol: BlockRouteProtocol}
		if b.Addr().Is4() {
			r.Gw = InterconnectVPPIPv4.Addr().AsSlice()
		} else {
			r.Gw = InterconnectVPPIPv6.AsSlice()
		}
		if err := node.NL.RouteReplace(&r); err != nil {
			return removed, fmt.Errorf("add route %s via %s in %s: %w", b, HostInterconnectName, node.Path, err)
		}
	}
	return removed, nil
}

func (k *netlinkKernel) CreatePodVeth(_ context.Context, pod dataplane.Pod, nodeEnd string, mac net.HardwareAddr, mtu int) error {
	node, err := k.openNode()
	if err != nil {
		return err
	}
	defer node.Close()
	existing, err := node.FindLink(nodeEnd)
	if err != nil {
		return err
	}
	if existing != nil {
		if key, ok := parseVethAlias(existing.Attrs().Alias); ok && key == pod.PodKey {
			return nil
		}
		return fmt.Errorf("link %s in %s has alias %q, not vcoil's for %s: leaving it alone", nodeEnd, node.Path, existing.Attrs().Alias, describe(pod.PodKey))
	}
	podNS, err := openNamespace(pod.Netns)
	if err != nil {
		return err
	}
	defer podNS.Close()
	if other, err := podNS.FindLink(pod.IfName); err != nil {
		return err
	} else if other != nil {
		return fmt.Errorf("pod network namespace %s already has an interface %s (type %s) that vcoil did not create", pod.Netns, pod.IfName, other.Type())
	}
	la := netlink.NewLinkAttrs()
	la.Name = nodeEnd
	la.MTU = mtu
	veth := &netlink.Veth{
		LinkAttrs: la, PeerName: pod.IfName, PeerMTU: uint32(mtu), PeerTxQLen: -1,
		PeerHardwareAddr: mac, PeerNamespace: netlink.NsFd(int(podNS.NS.Fd())),
	}
	if err := node.NL.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s with pod end %s in %s: %w", nodeEnd, pod.IfName, pod.Netns, err)
	}
	fail := func(err error) error {
		if l, lerr := node.NL.LinkByName(nodeEnd); lerr == nil {
			_ = node.NL.LinkDel(l)
		}
		return err
	}
	host, err := node.NL.LinkByName(nodeEnd)
	if err != nil {
		return fail(fmt.Errorf("look up new veth %s: %w", nodeEnd, err))
	}
	if err := node.NL.LinkSetAlias(host, vethAlias(pod.PodKey)); err != nil {
		return fail(fmt.Errorf("set alias of veth %s: %w", nodeEnd, err))
	}
	// The node end is a wire into VPP: it needs no addresses of its own.
	if err := node.SetSysctls(kernelns.Sysctl{Key: "net/ipv6/conf/" + nodeEnd + "/disable_ipv6", Value: "1"}); err != nil {
		return fail(err)
	}
	if err := node.NL.LinkSetUp(host); err != nil {
		return fail(fmt.Errorf("set %s up: %w", nodeEnd, err))
	}
	podLink, err := podNS.NL.LinkByName(pod.IfName)
	if err == nil {
		err = podNS.NL.LinkSetARPOff(podLink)
	}
	if err != nil {
		return fail(fmt.Errorf("turn ARP off on %s in %s: %w", pod.IfName, pod.Netns, err))
	}
	return nil
}

func (k *netlinkKernel) PodVeths(context.Context) (map[string]dataplane.PodKey, error) {
	node, err := k.openNode()
	if err != nil {
		return nil, err
	}
	defer node.Close()
	links, err := node.NL.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links in %s: %w", node.Path, err)
	}
	out := map[string]dataplane.PodKey{}
	for _, l := range links {
		if key, ok := parseVethAlias(l.Attrs().Alias); ok && l.Type() == "veth" && l.Attrs().Name == linkName(vethPrefix, key) {
			out[l.Attrs().Name] = key
		}
	}
	return out, nil
}

func (k *netlinkKernel) DeleteNodeLink(_ context.Context, name string) error {
	node, err := k.openNode()
	if err != nil {
		return err
	}
	defer node.Close()
	l, err := node.FindLink(name)
	if err != nil || l == nil {
		return err
	}
	if err := node.NL.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s in %s: %w", name, node.Path, err)
	}
	return nil
}

func (k *netlinkKernel) MoveToPod(_ context.Context, from string, pod dataplane.Pod) error {
	node, err := k.openNode()
	if err != nil {
		return err
	}
	defer node.Close()
	podNS, err := openNamespace(pod.Netns)
	if err != nil {
		return err
	}
	defer podNS.Close()
	l, err := node.NL.LinkByName(from)
	if err != nil {
		return fmt.Errorf("look up %s in %s: %w", from, node.Path, err)
	}
	if err := node.NL.LinkSetNsFd(l, int(podNS.NS.Fd())); err != nil {
		return fmt.Errorf("move %s from %s to %s: %w", from, node.Path, pod.Netns, err)
	}
	l, err = podNS.NL.LinkByName(from)
	if err != nil {
		return fmt.Errorf("look up %s in %s: %w", from, pod.Netns, err)
	}
	if err := podNS.NL.LinkSetName(l, pod.IfName); err != nil {
		return fmt.Errorf("rename %s to %s in %s: %w", from, pod.IfName, pod.Netns, err)
	}
	return nil
}

func (k *netlinkKernel) ConfigurePod(_ context.Context, pod dataplane.Pod) error {
	podNS, err := openNamespace(pod.Netns)
	if err != nil {
		return err
	}
	defer podNS.Close()
	l, err := podNS.NL.LinkByName(pod.IfName)
	if err != nil {
		return fmt.Errorf("look up %s in %s: %w", pod.IfName, pod.Netns, err)
	}
	if pod.IPv6.IsValid() {
		// VPP may send router advertisements; the pod's routes are ours.
		if err := podNS.SetSysctls(kernelns.Sysctl{Key: "net/ipv6/conf/" + pod.IfName + "/accept_ra", Value: "0"}); err != nil {
			return err
		}
	}
	for _, a := range kernelns.HostAddrs(pod.IPv4, pod.IPv6) {
		if err := podNS.NL.AddrReplace(l, a); err != nil {
			return fmt.Errorf("add address %s to %s in %s: %w", a.IPNet, pod.IfName, pod.Netns, err)
		}
	}
	if pod.NoChecksumOffload {
		if err := setTxChecksumOffload(podNS, pod.IfName, false); err != nil {
			return err
		}
	}
	if err := podNS.NL.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up in %s: %w", pod.IfName, pod.Netns, err)
	}
	for _, r := range podRoutes(pod, l.Attrs().Index) {
		if err := podNS.NL.RouteReplace(&r); err != nil {
			return fmt.Errorf("add route default dev %s in %s: %w", pod.IfName, pod.Netns, err)
		}
	}
	return nil
}

func (k *netlinkKernel) CheckPod(_ context.Context, pod dataplane.Pod, typ InterfaceType, mtu int) error {
	podNS, err := openNamespace(pod.Netns)
	if err != nil {
		return err
	}
	defer podNS.Close()
	l, err := podNS.FindLink(pod.IfName)
	if err != nil {
		return err
	}
	if l == nil {
		return fmt.Errorf("interface %s is missing in %s", pod.IfName, pod.Netns)
	}
	var errs []error
	want := "tuntap"
	if typ == AFPacket {
		want = "veth"
	}
	if l.Type() != want {
		errs = append(errs, fmt.Errorf("%s in %s is a %s, want a %s", pod.IfName, pod.Netns, l.Type(), want))
	}
	if l.Attrs().MTU != mtu {
		errs = append(errs, fmt.Errorf("MTU of %s in %s is %d, want %d", pod.IfName, pod.Netns, l.Attrs().MTU, mtu))
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		errs = append(errs, fmt.Errorf("%s in %s is down", pod.IfName, pod.Netns))
	}
	if pod.NoChecksumOffload {
		on, err := txChecksumOffload(podNS, pod.IfName)
		if err != nil {
			return err
		}
		if on {
			errs = append(errs, fmt.Errorf("%s in %s leaves checksums to offload (%s on), want it to compute them", pod.IfName, pod.Netns, txChecksumFeature))
		}
	}
	addrs, err := podNS.NL.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("list addresses of %s in %s: %w", pod.IfName, pod.Netns, err)
	}
	for _, a := range kernelns.HostAddrs(pod.IPv4, pod.IPv6) {
		if !slices.ContainsFunc(addrs, func(b netlink.Addr) bool { return b.IPNet.String() == a.IPNet.String() }) {
			errs = append(errs, fmt.Errorf("address %s is missing on %s in %s", a.IPNet, pod.IfName, pod.Netns))
		}
	}
	routes, err := podNS.NL.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{LinkIndex: l.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list routes in %s: %w", pod.Netns, err)
	}
	for _, want := range podRoutes(pod, l.Attrs().Index) {
		if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
			return r.Family == want.Family && (r.Dst == nil || isDefault(r.Dst)) && r.Gw == nil
		}) {
			errs = append(errs, fmt.Errorf("route default dev %s (family %d) is missing in %s", pod.IfName, want.Family, pod.Netns))
		}
	}
	return errors.Join(errs...)
}

// podRoutes are "default dev <ifname>" for each of the pod's families:
// VPP is the other end of the link, whatever the destination.
func podRoutes(pod dataplane.Pod, index int) []netlink.Route {
	var r []netlink.Route
	if pod.IPv4.IsValid() {
		r = append(r, netlink.Route{LinkIndex: index, Family: netlink.FAMILY_V4, Scope: netlink.SCOPE_LINK,
			Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}})
	}
	if pod.IPv6.IsValid() {
		r = append(r, netlink.Route{LinkIndex: index, Family: netlink.FAMILY_V6,
			Dst: &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}})
	}
	return r
}

func isDefault(dst *net.IPNet) bool {
	ones, _ := dst.Mask.Size()
	return ones == 0
}

// txChecksumFeature is the transmit checksum offload (NETIF_F_HW_CSUM) of
// a pod's interface (veth or tun) by its ethtool name. Off, the pod's
// kernel completes every checksum before a packet leaves the pod, the
// inner ones of what it tunnels included, and TSO goes off with it (the
// kernel segments instead).
const txChecksumFeature = "tx-checksum-ip-generic"

// setTxChecksumOffload turns the transmit checksum offload of link name in
// ns on or off, unless it already is.
func setTxChecksumOffload(ns *kernelns.Namespace, name string, on bool) error {
	err := withEthtool(ns, func(e *ethtool.Ethtool) error {
		fs, err := e.Features(name)
		if err != nil {
			return err
		}
		if v, ok := fs[txChecksumFeature]; ok && v == on {
			return nil
		}
		return e.Change(name, map[string]bool{txChecksumFeature: on})
	})
	if err != nil {
		return fmt.Errorf("set %s of %s in %s to %t: %w", txChecksumFeature, name, ns.Path, on, err)
	}
	return nil
}

// txChecksumOffload reads whether link name in ns leaves transmit
// checksums to offload.
func txChecksumOffload(ns *kernelns.Namespace, name string) (bool, error) {
	var on bool
	err := withEthtool(ns, func(e *ethtool.Ethtool) error {
		fs, err := e.Features(name)
		on = fs[txChecksumFeature]
		return err
	})
	if err != nil {
		return false, fmt.Errorf("read %s of %s in %s: %w", txChecksumFeature, name, ns.Path, err)
	}
	return on, nil
}

// withEthtool runs f with an ethtool handle in ns. Ethtool's ioctls act in
// the namespace their socket was made in, hence the socket is made inside
// ns.
func withEthtool(ns *kernelns.Namespace, f func(*ethtool.Ethtool) error) error {
	return ns.NS.Do(func(cnins.NetNS) error {
		e, err := ethtool.NewEthtool()
		if err != nil {
			return err
		}
		defer e.Close()
		return f(e)
	})
}
