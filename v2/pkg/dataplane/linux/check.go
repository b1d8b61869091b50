package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
)

// CheckPod compares the kernel with what SetupPod would make of pod, its
// source validation elements included, and returns an error listing every
// difference, or nil.
func (d *linuxDataplane) CheckPod(ctx context.Context, pod dataplane.Pod) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := validatePod(pod); err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	w, closeAll, err := d.open(pod)
	if err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	defer closeAll()
	if err := errors.Join(w.check(), d.checkSources(ctx, w.host, pod)); err != nil {
		return fmt.Errorf("check pod %s: %w", describe(pod.PodKey), err)
	}
	return nil
}

// check returns the differences between the kernel and the wiring of
// w.pod, joined; nil when there are none.
func (w *wiring) check() error {
	host, err := w.node.FindLink(w.host)
	if err != nil {
		return err
	}
	if host == nil {
		return fmt.Errorf("node-side veth %s is missing", w.host)
	}
	if err := checkOwner(host, w.pod.PodKey); err != nil {
		return err
	}
	var errs []error
	differs := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	// Node side.
	if host.Type() != "veth" {
		differs("link %s is a %s, want a veth", w.host, host.Type())
	}
	if mtu := host.Attrs().MTU; mtu != w.mtu {
		differs("MTU of %s is %d, want %d", w.host, mtu, w.mtu)
	}
	if host.Attrs().Flags&net.FlagUp == 0 {
		differs("%s is down", w.host)
	}
	hostAddrs, err := dump(func() ([]netlink.Addr, error) { return w.node.NL.AddrList(host, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", w.host, err)
	}
	for _, want := range gatewayAddrs(w.pod) {
		i := slices.IndexFunc(hostAddrs, func(a netlink.Addr) bool { return a.IPNet.String() == want.IPNet.String() })
		switch {
		case i < 0:
			differs("gateway address %s is missing on %s", want.IPNet, w.host)
		case want.IP.To4() != nil && hostAddrs[i].Scope != want.Scope:
			differs("gateway address %s on %s has scope %s, want %s", want.IPNet, w.host, netlink.Scope(hostAddrs[i].Scope), netlink.Scope(want.Scope))
		}
	}
	nodeRoutes, err := w.node.routes(netlink.FAMILY_ALL,
		&netlink.Route{Table: w.d.cfg.PodTable, LinkIndex: host.Attrs().Index}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	if err != nil {
		return err
	}
	compareRoutes(fmt.Sprintf("table %d via %s", w.d.cfg.PodTable, w.host), nodeRoutes, w.nodeRoutes(host.Attrs().Index), differs)

	// Pod side.
	podLink, err := w.podNS.FindLink(w.pod.IfName)
	if err != nil {
		return err
	}
	if podLink == nil {
		differs("interface %s is missing in %s", w.pod.IfName, w.pod.Netns)
		return errors.Join(errs...)
	}
	pa := podLink.Attrs()
	if podLink.Type() != "veth" || pa.ParentIndex != host.Attrs().Index || host.Attrs().ParentIndex != pa.Index {
		differs("%s in %s is not the peer of %s", w.pod.IfName, w.pod.Netns, w.host)
	}
	if pa.MTU != w.mtu {
		differs("MTU of %s in %s is %d, want %d", w.pod.IfName, w.pod.Netns, pa.MTU, w.mtu)
	}
	if pa.Flags&net.FlagUp == 0 {
		differs("%s in %s is down", w.pod.IfName, w.pod.Netns)
	}
	podAddrList, err := dump(func() ([]netlink.Addr, error) { return w.podNS.NL.AddrList(podLink, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("list addresses of %s in %s: %w", w.pod.IfName, w.pod.Netns, err)
	}
	var got, want []string
	for _, a := range podAddrList {
		// The kernel gives every IPv6 link a link-local address; the pod's
		// addresses are the others.
		if !a.IP.IsLinkLocalUnicast() {
			got = append(got, a.IPNet.String())
		}
	}
	for _, a := range kernelns.HostAddrs(w.pod.IPv4, w.pod.IPv6) {
		want = append(want, a.IPNet.String())
	}
	compareSets(fmt.Sprintf("address on %s in %s", w.pod.IfName, w.pod.Netns), got, want, differs)
	podRouteList, err := w.podNS.routes(netlink.FAMILY_ALL,
		&netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: pa.Index}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	if err != nil {
		return err
	}
	podRouteList = slices.DeleteFunc(podRouteList, func(r netlink.Route) bool { return r.Protocol == unix.RTPROT_KERNEL })
	compareRoutes(fmt.Sprintf("in %s", w.pod.Netns), podRouteList, podRoutes(w.pod, pa.Index), differs)

	return errors.Join(errs...)
}

func compareRoutes(where string, got, want []netlink.Route, differs func(string, ...any)) {
	var g, wnt []string
	for _, r := range got {
		g = append(g, routeKey(r))
	}
	for _, r := range want {
		wnt = append(wnt, routeKey(r))
	}
	compareSets("route "+where, g, wnt, differs)
}

// compareSets reports what want has and got lacks, and the reverse.
func compareSets(what string, got, want []string, differs func(string, ...any)) {
	for _, w := range want {
		if !slices.Contains(got, w) {
			differs("%s %s is missing", what, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			differs("%s %s is unexpected", what, g)
		}
	}
}

// routeKey is what makes two routes the same for CheckPod: destination,
// gateway, scope and protocol (boot and unset are the same, as the kernel
// stores unset as boot).
func routeKey(r netlink.Route) string {
	var b strings.Builder
	b.WriteString(routeString(r))
	if r.Scope == netlink.SCOPE_LINK {
		b.WriteString(" scope link")
	}
	if r.Protocol != 0 && r.Protocol != unix.RTPROT_BOOT {
		fmt.Fprintf(&b, " proto %d", r.Protocol)
	}
	return b.String()
}
