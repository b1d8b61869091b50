package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
)

// wiring is one pod interface being set up or checked: the pod, both
// namespaces and the values derived from the configuration.
type wiring struct {
	d     *linuxDataplane
	pod   dataplane.Pod
	node  *namespace
	podNS *namespace
	host  string // name of the node-side veth
	mtu   int
	log   logr.Logger
}

// SetupPod wires pod, or leaves it as it is when CheckPod would accept it.
// Wiring that differs (other addresses, another MTU) is replaced: the veth
// is deleted and created again. On any error the veth is deleted, and with
// it everything SetupPod added, since all of it hangs off the veth. The
// veth's source validation elements (the pod's addresses and
// SourcePrefixes) are written before it returns; until then the veth
// drops whatever the pod sends.
func (d *linuxDataplane) SetupPod(ctx context.Context, pod dataplane.Pod) (dataplane.Interfaces, error) {
	if err := ctx.Err(); err != nil {
		return dataplane.Interfaces{}, err
	}
	if err := validatePod(pod); err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
	}
	w, closeAll, err := d.open(pod)
	if err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
	}
	defer closeAll()

	ifs, err := w.setup()
	if err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), err)
	}
	if err := d.allowSources(ctx, w.host, pod); err != nil {
		errs := []error{err}
		if undoErr := w.node.deleteLink(w.host); undoErr != nil {
			errs = append(errs, fmt.Errorf("remove veth %s: %w", w.host, undoErr))
		} else if undoErr := d.forgetSources(ctx, w.host); undoErr != nil {
			errs = append(errs, undoErr)
		}
		return dataplane.Interfaces{}, fmt.Errorf("set up pod %s: %w", describe(pod.PodKey), errors.Join(errs...))
	}
	return ifs, nil
}

// open opens both namespaces of pod and computes the MTU.
func (d *linuxDataplane) open(pod dataplane.Pod) (*wiring, func(), error) {
	node, err := d.openNode()
	if err != nil {
		return nil, nil, err
	}
	podNS, err := openNamespace(pod.Netns)
	if err != nil {
		node.Close()
		return nil, nil, fmt.Errorf("open pod %w", err)
	}
	closeAll := func() {
		podNS.Close()
		node.Close()
	}
	if err := notSameNamespace(node, podNS); err != nil {
		closeAll()
		return nil, nil, err
	}
	mtu, _, err := d.mtu(node)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	if pod.MTU > 0 {
		// The network configuration's mtu wins over the node's.
		mtu = pod.MTU
	}
	w := &wiring{
		d: d, pod: pod, node: node, podNS: podNS, host: HostIfName(pod.PodKey), mtu: mtu,
		log: d.log.WithValues("containerID", pod.ContainerID, "ifname", pod.IfName, "hostIf", HostIfName(pod.PodKey)),
	}
	return w, closeAll, nil
}

func (w *wiring) setup() (dataplane.Interfaces, error) {
	host, err := w.node.FindLink(w.host)
	if err != nil {
		return dataplane.Interfaces{}, err
	}
	if host != nil {
		if err := checkOwner(host, w.pod.PodKey); err != nil {
			return dataplane.Interfaces{}, err
		}
		diff := w.check()
		if diff == nil {
			return w.interfaces()
		}
		w.log.Info("rewiring pod", "reason", diff.Error())
		if err := ignoreGone(w.node.NL.LinkDel(host)); err != nil {
			return dataplane.Interfaces{}, fmt.Errorf("delete node-side veth %s to rewire: %w", w.host, err)
		}
	}
	// Deleting our veth deleted its pod end too, so an interface with the
	// pod's name now belongs to someone else: leave it alone.
	other, err := w.podNS.FindLink(w.pod.IfName)
	if err != nil {
		return dataplane.Interfaces{}, err
	}
	if other != nil {
		return dataplane.Interfaces{}, fmt.Errorf("pod network namespace %s already has an interface %s (type %s) that vcoil did not create", w.pod.Netns, w.pod.IfName, other.Type())
	}

	ifs, err := w.create()
	if err != nil {
		if undoErr := w.node.deleteLink(w.host); undoErr != nil {
			w.log.Error(undoErr, "removing the half-made veth failed")
			return dataplane.Interfaces{}, errors.Join(err, fmt.Errorf("remove half-made veth %s: %w", w.host, undoErr))
		}
		return dataplane.Interfaces{}, err
	}
	w.log.Info("pod wired", "ipv4", w.pod.IPv4, "ipv6", w.pod.IPv6, "mtu", w.mtu, "netns", w.pod.Netns)
	return ifs, nil
}

// create builds the wiring from nothing, in an order in which every step
// finds what it needs: links before addresses, addresses and link up before
// routes. It stops at the first error; the caller deletes the veth.
func (w *wiring) create() (dataplane.Interfaces, error) {
	la := netlink.NewLinkAttrs()
	la.Name = w.host
	la.MTU = w.mtu
	la.Alias = hostAlias(w.pod.PodKey)
	veth := &netlink.Veth{
		LinkAttrs:     la,
		PeerName:      w.pod.IfName,
		PeerMTU:       uint32(w.mtu),
		PeerTxQLen:    -1,
		PeerNamespace: netlink.NsFd(int(w.podNS.NS.Fd())),
	}
	if err := w.node.NL.LinkAdd(veth); err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("create veth %s with pod end %s in %s: %w", w.host, w.pod.IfName, w.pod.Netns, err)
	}
	host, err := w.node.NL.LinkByName(w.host)
	if err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("look up new veth %s: %w", w.host, err)
	}
	if host.Attrs().Alias != la.Alias {
		// Kernels that ignore IFLA_IFALIAS on creation (this one does) take
		// it afterwards; see checkOwner for a crash in between.
		if err := w.node.NL.LinkSetAlias(host, la.Alias); err != nil {
			return dataplane.Interfaces{}, fmt.Errorf("set alias of veth %s: %w", w.host, err)
		}
	}
	podLink, err := w.podNS.NL.LinkByName(w.pod.IfName)
	if err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("look up new interface %s in %s: %w", w.pod.IfName, w.pod.Netns, err)
	}

	// Node side: sysctls first, since they decide whether IPv6 addresses
	// are accepted and how the veth treats what the pod sends.
	if err := w.node.SetSysctls(hostSysctls(w.host, w.pod)...); err != nil {
		return dataplane.Interfaces{}, err
	}
	for _, a := range gatewayAddrs(w.pod) {
		if err := w.node.NL.AddrAdd(host, a); err != nil {
			return dataplane.Interfaces{}, fmt.Errorf("add gateway address %s to %s: %w", a.IPNet, w.host, err)
		}
	}
	if err := w.node.NL.LinkSetUp(host); err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set %s up: %w", w.host, err)
	}

	// Pod side.
	for _, a := range kernelns.HostAddrs(w.pod.IPv4, w.pod.IPv6) {
		if err := w.podNS.NL.AddrAdd(podLink, a); err != nil {
			return dataplane.Interfaces{}, fmt.Errorf("add address %s to %s in %s: %w", a.IPNet, w.pod.IfName, w.pod.Netns, err)
		}
	}
	if err := w.podNS.NL.LinkSetUp(podLink); err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("set %s up in %s: %w", w.pod.IfName, w.pod.Netns, err)
	}
	for _, r := range podRoutes(w.pod, podLink.Attrs().Index) {
		if err := w.podNS.NL.RouteAdd(&r); err != nil {
			return dataplane.Interfaces{}, fmt.Errorf("add route %s in %s: %w", routeString(r), w.pod.Netns, err)
		}
	}

	// Node routes last: the pod becomes reachable when it is ready. Replace,
	// so that a route to the same address left by another veth moves here.
	for _, r := range w.nodeRoutes(host.Attrs().Index) {
		if err := w.node.NL.RouteReplace(&r); err != nil {
			return dataplane.Interfaces{}, fmt.Errorf("add route %s table %d: %w", routeString(r), w.d.cfg.PodTable, err)
		}
	}
	return w.interfaces()
}

// interfaces reads back what the CNI result reports.
func (w *wiring) interfaces() (dataplane.Interfaces, error) {
	host, err := w.node.NL.LinkByName(w.host)
	if err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("look up veth %s: %w", w.host, err)
	}
	podLink, err := w.podNS.NL.LinkByName(w.pod.IfName)
	if err != nil {
		return dataplane.Interfaces{}, fmt.Errorf("look up %s in %s: %w", w.pod.IfName, w.pod.Netns, err)
	}
	return dataplane.Interfaces{
		HostIfName: w.host,
		HostMAC:    host.Attrs().HardwareAddr.String(),
		PodMAC:     podLink.Attrs().HardwareAddr.String(),
		MTU:        podLink.Attrs().MTU,
	}, nil
}

// hostSysctls are the node-side veth's own settings. Forwarding is on for
// the node already (Init); it is set per veth too so that a node whose
// defaults differ still routes for its pods. accept_ra=0 keeps a pod from
// installing routes on the node with router advertisements.
func hostSysctls(host string, pod dataplane.Pod) []kernelns.Sysctl {
	var s []kernelns.Sysctl
	if pod.IPv4.IsValid() {
		s = append(s, kernelns.Sysctl{Key: "net/ipv4/conf/" + host + "/forwarding", Value: "1"})
	}
	if pod.IPv6.IsValid() {
		s = append(s,
			kernelns.Sysctl{Key: "net/ipv6/conf/" + host + "/forwarding", Value: "1"},
			kernelns.Sysctl{Key: "net/ipv6/conf/" + host + "/accept_ra", Value: "0"},
		)
	}
	return s
}

// gatewayAddrs are the addresses that make the node-side veth answer for
// the pod's gateway. 169.254.1.1 has scope host: the kernel then never
// picks it as the source of the node's own packets to pods (it picks the
// node's address), yet it answers ARP and pings for it. fe80::1 skips
// duplicate address detection, since every node-side veth holds it.
func gatewayAddrs(pod dataplane.Pod) []*netlink.Addr {
	var a []*netlink.Addr
	if pod.IPv4.IsValid() {
		a = append(a, &netlink.Addr{IPNet: kernelns.IPNet(netip.PrefixFrom(gatewayIPv4, 32)), Scope: unix.RT_SCOPE_HOST})
	}
	if pod.IPv6.IsValid() {
		a = append(a, &netlink.Addr{IPNet: kernelns.IPNet(netip.PrefixFrom(gatewayIPv6, 64)), Flags: unix.IFA_F_NODAD})
	}
	return a
}

// podRoutes are the pod's routes: the gateway on-link, and default via it.
func podRoutes(pod dataplane.Pod, index int) []netlink.Route {
	var r []netlink.Route
	if pod.IPv4.IsValid() {
		r = append(r,
			netlink.Route{LinkIndex: index, Family: netlink.FAMILY_V4, Dst: kernelns.IPNet(netip.PrefixFrom(gatewayIPv4, 32)), Scope: netlink.SCOPE_LINK},
			netlink.Route{LinkIndex: index, Family: netlink.FAMILY_V4, Gw: gatewayIPv4.AsSlice()},
		)
	}
	if pod.IPv6.IsValid() {
		r = append(r, netlink.Route{LinkIndex: index, Family: netlink.FAMILY_V6, Gw: gatewayIPv6.AsSlice()})
	}
	return r
}

// nodeRoutes are the host routes to the pod's addresses in the pod table.
func (w *wiring) nodeRoutes(hostIndex int) []netlink.Route {
	var r []netlink.Route
	if w.pod.IPv4.IsValid() {
		r = append(r, netlink.Route{
			LinkIndex: hostIndex, Family: netlink.FAMILY_V4, Dst: kernelns.IPNet(netip.PrefixFrom(w.pod.IPv4, 32)),
			Scope: netlink.SCOPE_LINK, Table: w.d.cfg.PodTable, Protocol: constants.PodRouteProtocol,
		})
	}
	if w.pod.IPv6.IsValid() {
		r = append(r, netlink.Route{
			LinkIndex: hostIndex, Family: netlink.FAMILY_V6, Dst: kernelns.IPNet(netip.PrefixFrom(w.pod.IPv6, 128)),
			Table: w.d.cfg.PodTable, Protocol: constants.PodRouteProtocol,
		})
	}
	return r
}

// notSameNamespace refuses a pod namespace that is the node's: wiring it
// would put the pod's interface and addresses on the node itself.
func notSameNamespace(node, pod *namespace) error {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(node.NS.Fd()), &a); err != nil {
		return fmt.Errorf("stat node network namespace %s: %w", node.Path, err)
	}
	if err := unix.Fstat(int(pod.NS.Fd()), &b); err != nil {
		return fmt.Errorf("stat pod network namespace %s: %w", pod.Path, err)
	}
	if a.Dev == b.Dev && a.Ino == b.Ino {
		return fmt.Errorf("pod network namespace %s is the node's", pod.Path)
	}
	return nil
}

// checkOwner refuses to touch a link with a pod's hashed name that records
// another key: a hash collision, or a link someone else made. A link without
// an alias counts as the pod's: it is what a vcoild that died between
// creating the veth and labelling it leaves behind.
func checkOwner(link netlink.Link, key dataplane.PodKey) error {
	alias := link.Attrs().Alias
	if alias == "" {
		return nil
	}
	if got, ok := parseHostAlias(alias); !ok || got != key {
		return fmt.Errorf("link %s has alias %q, not vcoil's for %s: leaving it alone", link.Attrs().Name, alias, describe(key))
	}
	return nil
}

// validatePod rejects what SetupPod could not wire, naming the field.
func validatePod(pod dataplane.Pod) error {
	if err := validateKey(pod.PodKey); err != nil {
		return err
	}
	return pod.Validate()
}

func describe(key dataplane.PodKey) string {
	return key.ContainerID + "/" + key.IfName
}

// routeString formats a route as `ip route` would, for errors.
func routeString(r netlink.Route) string {
	s := "default"
	if !isDefault(r.Dst) {
		s = r.Dst.String()
	}
	if r.Gw != nil {
		s += " via " + r.Gw.String()
	}
	return s
}
