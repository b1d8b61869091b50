package routes

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// BlockNextHops maps each subnet of the blocks to the first InternalIP of
// the subnet's family of the block's node: the next hop of a route to the
// block on a network where the nodes share a link (vcoild's direct routes;
// the lab's fabric router plays the network's router with it). Subnets of
// unknown nodes, or of a family their node has no InternalIP of, are left
// out.
func BlockNextHops(blocks []vcoilv2.AddressBlock, nodes []corev1.Node) map[netip.Prefix]netip.Addr {
	type hops struct{ v4, v6 netip.Addr }
	via := map[string]hops{}
	for _, n := range nodes {
		var h hops
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				if ip.Is4() && !h.v4.IsValid() {
					h.v4 = ip
				} else if ip.Is6() && !h.v6.IsValid() {
					h.v6 = ip
				}
			}
		}
		via[n.Name] = h
	}
	out := map[netip.Prefix]netip.Addr{}
	for _, b := range blocks {
		node := b.Labels[vcoilv2.LabelNode]
		for _, s := range []string{ptr.Deref(b.IPv4, ""), ptr.Deref(b.IPv6, "")} {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				continue
			}
			hop := via[node].v6
			if p.Addr().Is4() {
				hop = via[node].v4
			}
			if hop.IsValid() {
				out[p] = hop
			}
		}
	}
	return out
}
