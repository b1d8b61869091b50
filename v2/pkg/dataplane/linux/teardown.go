package linux

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// TeardownPod deletes the node-side veth named after pod.PodKey. The kernel
// deletes with it the pod end, the addresses and the routes through it, so
// neither the pod's namespace nor its addresses are needed: it works when
// the namespace is gone, and succeeds when there is nothing to delete. The
// veth's source validation elements, keyed by its name, go too. A
// veth whose alias records another key is left alone, with an error.
func (d *linuxDataplane) TeardownPod(ctx context.Context, pod dataplane.Pod) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validateKey(pod.PodKey); err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	node, err := d.openNode()
	if err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	defer node.Close()

	name := HostIfName(pod.PodKey)
	host, err := node.FindLink(name)
	if err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	if host == nil {
		// The veth may be gone with its namespace, its elements not.
		if err := d.forgetSources(ctx, name); err != nil {
			return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
		}
		return nil
	}
	if err := checkOwner(host, pod.PodKey); err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	if err := ignoreGone(node.NL.LinkDel(host)); err != nil {
		return fmt.Errorf("tear down pod %s: delete veth %s: %w", describe(pod.PodKey), name, err)
	}
	if err := d.forgetSources(ctx, name); err != nil {
		return fmt.Errorf("tear down pod %s: %w", describe(pod.PodKey), err)
	}
	d.log.Info("pod torn down", "containerID", pod.ContainerID, "ifname", pod.IfName, "hostIf", name)
	return nil
}

// ListPods returns a pod for every node-side veth with a vcoil alias, with
// the addresses of its /32 and /128 routes in the pod table, sorted by key.
// Netns, Namespace and Name are not recorded in the kernel and stay empty.
func (d *linuxDataplane) ListPods(ctx context.Context) ([]dataplane.Pod, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	node, err := d.openNode()
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	defer node.Close()
	return d.listPods(node)
}

// listPods is ListPods in the open node namespace.
func (d *linuxDataplane) listPods(node *namespace) ([]dataplane.Pod, error) {
	links, err := dump(node.NL.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list pods: list links in %s: %w", node.Path, err)
	}
	// A newer vcoild's veth would look like no pod's: the daemon's
	// recovery would not account for its address.
	for _, l := range links {
		if err := newerAlias(l.Attrs().Name, l.Attrs().Alias); err != nil {
			return nil, fmt.Errorf("list pods in %s: %w", node.Path, err)
		}
	}
	byIndex := map[int]*dataplane.Pod{}
	for _, l := range links {
		key, ok := parseHostAlias(l.Attrs().Alias)
		if !ok || l.Type() != "veth" {
			continue
		}
		if l.Attrs().Name != HostIfName(key) {
			d.log.Info("ignoring a link with a vcoil alias but another name", "link", l.Attrs().Name, "alias", l.Attrs().Alias)
			continue
		}
		byIndex[l.Attrs().Index] = &dataplane.Pod{PodKey: key}
	}
	routes, err := node.routes(netlink.FAMILY_ALL,
		&netlink.Route{Table: d.cfg.PodTable, Protocol: constants.PodRouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return nil, fmt.Errorf("list pods: list routes of table %d in %s: %w", d.cfg.PodTable, node.Path, err)
	}
	for _, r := range routes {
		pod := byIndex[r.LinkIndex]
		if pod == nil || r.Dst == nil {
			continue
		}
		addr, ok := netip.AddrFromSlice(r.Dst.IP)
		if !ok {
			continue
		}
		addr = addr.Unmap()
		ones, bits := r.Dst.Mask.Size()
		switch {
		case addr.Is4() && ones == 32 && bits == 32 && !pod.IPv4.IsValid():
			pod.IPv4 = addr
		case addr.Is6() && ones == 128 && !pod.IPv6.IsValid():
			pod.IPv6 = addr
		}
	}
	pods := make([]dataplane.Pod, 0, len(byIndex))
	for _, p := range byIndex {
		pods = append(pods, *p)
	}
	slices.SortFunc(pods, func(a, b dataplane.Pod) int {
		return cmp.Or(cmp.Compare(a.ContainerID, b.ContainerID), cmp.Compare(a.IfName, b.IfName))
	})
	return pods, nil
}
