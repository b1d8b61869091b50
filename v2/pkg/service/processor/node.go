package processor

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// NodeInfoOf is the part of node Build depends on.
func NodeInfoOf(node *corev1.Node) NodeInfo {
	return NodeInfo{Name: node.Name, Zone: node.Labels[corev1.LabelTopologyZone]}
}

// NodeModel is this node as the renderers see it. NodePortAddresses are,
// without nodePortCIDRs, the node's first InternalIP of each family (what
// kube-proxy's nftables mode calls the primary addresses); with them, the
// addresses of localAddrs (the node's interface addresses) inside any of
// them. HostAddresses are the node's InternalIP and ExternalIP addresses.
// NATLoopback comes from vcoild's annotation on the Node. On a bad
// annotation it returns the model without NAT loopback and an error, so that
// the caller can report it and still serve the node's services.
func NodeModel(node *corev1.Node, nodePortCIDRs []netip.Prefix, localAddrs []netip.Addr) (service.Node, error) {
	n := service.Node{Name: node.Name, Zone: node.Labels[corev1.LabelTopologyZone]}
	for _, na := range node.Status.Addresses {
		if na.Type != corev1.NodeInternalIP && na.Type != corev1.NodeExternalIP {
			continue
		}
		if a, err := parseAddr(na.Address); err == nil {
			n.HostAddresses = append(n.HostAddresses, a)
		}
	}
	n.HostAddresses = sortedUniqueAddrs(n.HostAddresses)
	if len(nodePortCIDRs) == 0 {
		var have4, have6 bool
		for _, na := range node.Status.Addresses {
			if na.Type != corev1.NodeInternalIP {
				continue
			}
			a, err := parseAddr(na.Address)
			if err != nil {
				continue
			}
			if a.Is4() && !have4 {
				have4 = true
				n.NodePortAddresses = append(n.NodePortAddresses, a)
			} else if a.Is6() && !have6 {
				have6 = true
				n.NodePortAddresses = append(n.NodePortAddresses, a)
			}
		}
	} else {
		for _, a := range localAddrs {
			a = a.Unmap().WithZone("")
			if slices.ContainsFunc(nodePortCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
				n.NodePortAddresses = append(n.NodePortAddresses, a)
			}
		}
	}
	n.NodePortAddresses = sortedUniqueAddrs(n.NodePortAddresses)

	var errs []error
	if v := strings.TrimSpace(node.Annotations[vcoilv2.AnnotationNATLoopback]); v != "" {
		for _, s := range strings.Split(v, ",") {
			a, err := parseAddr(s)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			n.NATLoopback = append(n.NATLoopback, a)
		}
	}
	n.NATLoopback = sortedUniqueAddrs(n.NATLoopback)
	if len(errs) > 0 {
		n.NATLoopback = nil
		return n, fmt.Errorf("node %s: annotation %s: %w", node.Name, vcoilv2.AnnotationNATLoopback, errors.Join(errs...))
	}
	return n, nil
}
