package vpp

import (
	"context"
	"crypto/sha256"
	"net"
	"net/netip"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// kernel is what the driver needs from Linux in the node's and the pods'
// namespaces. The netlink implementation is in netlink.go; the mock tests
// record these calls beside the VPP messages.
type kernel interface {
	// CreateHostVeth makes the af_packet host interconnect's veth pair in
	// the node namespace (HostInterconnectName, HostInterconnectVPPName)
	// unless it exists.
	CreateHostVeth(ctx context.Context, mtu int) error
	// LinkMTU is the MTU of the node namespace's link name (found: false
	// when there is none).
	LinkMTU(ctx context.Context, name string) (mtu int, found bool, err error)
	// SetUpHost gives HostInterconnectName its addresses, sets it up and
	// makes the node namespace forward.
	SetUpHost(ctx context.Context) error
	// SyncBlockRoutes makes the node's routes marked BlockRouteProtocol
	// exactly blocks, via VPP's end of the host interconnect, and returns
	// the prefixes it removed.
	SyncBlockRoutes(ctx context.Context, blocks []netip.Prefix) (removed []netip.Prefix, err error)
	// SyncServiceNetwork makes the node's side of the service network
	// exactly net (whose CIDRs are IPv4): routes marked
	// ServiceRouteProtocol to the CIDRs via VPP's end of the host
	// interconnect with net.Source as source, net.Source and, with
	// net.Sinks, RejectSinkIPv4 as /32 addresses of HostInterconnectName,
	// and, with net.Sinks, the nftables table ServiceTable (which also
	// refuses the node's own connections to net.Refused).
	SyncServiceNetwork(ctx context.Context, net ServiceNetwork) error
	// SyncHostPorts makes the nftables table HostPortTable DNAT the node's
	// own connections to exactly dnats (none: no table).
	SyncHostPorts(ctx context.Context, dnats []HostPortDNAT) error

	// CreatePodVeth makes an af_packet pod's veth pair: node end `node`
	// (alias from the key, up, no IPv6 of its own) and pod end pod.IfName in
	// pod.Netns with MAC mac and ARP off. An existing node end is kept.
	CreatePodVeth(ctx context.Context, pod dataplane.Pod, node string, mac net.HardwareAddr, mtu int) error
	// PodVeths lists the node ends of af_packet pod veths by name, with the
	// key of their alias.
	PodVeths(ctx context.Context) (map[string]dataplane.PodKey, error)
	// DeleteNodeLink deletes a link of the node namespace; a missing one is
	// no error.
	DeleteNodeLink(ctx context.Context, name string) error
	// MoveToPod moves the node namespace's link `from` into pod.Netns and
	// names it pod.IfName.
	MoveToPod(ctx context.Context, from string, pod dataplane.Pod) error
	// ConfigurePod gives pod.IfName in pod.Netns the pod's addresses, sets
	// it up and adds "default dev <ifname>" for each family; with
	// pod.NoChecksumOffload it turns the interface's transmit checksum
	// offload off first (CheckPod then checks that too).
	ConfigurePod(ctx context.Context, pod dataplane.Pod) error
	// CheckPod reports what differs from ConfigurePod's result, and whether
	// the interface is the type asked (tun for TAP, veth for af_packet).
	CheckPod(ctx context.Context, pod dataplane.Pod, typ InterfaceType, mtu int) error
}

// podMAC is the MAC of an af_packet pod's interface, and of VPP's end of
// it: a locally administered unicast address derived from the key. The pod
// end has ARP off, so the kernel sends every frame to its own MAC; VPP's
// interface holds the same MAC and so takes them, and the pod's routes stay
// "default dev eth0" as on a tun.
func podMAC(key dataplane.PodKey) net.HardwareAddr {
	sum := sha256.Sum256([]byte("mac/" + key.ContainerID + "/" + key.IfName))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&0xfe | 0x02
	return mac
}
