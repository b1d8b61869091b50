// Package dataplane is the contract between vcoild and a node's forwarding
// plane: the Linux kernel (v2/pkg/dataplane/linux) or VPP
// (v2/pkg/dataplane/vpp). vcoild decides addresses; a dataplane only wires
// them. Renderers for services and policies get their own contracts.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrNotReady is wrapped by a dataplane's errors when it cannot act now (VPP
// is unreachable or resyncing) and changed nothing: the caller may try again
// later, and vcoild answers CNI code 11 (try again later).
var ErrNotReady = errors.New("dataplane not ready")

// PodKey identifies one pod interface, as CNI does: a container (the
// sandbox) and the name of the interface inside it.
type PodKey struct {
	ContainerID string
	IfName      string
}

// Pod is a pod interface and the addresses vcoild gave it.
type Pod struct {
	PodKey
	// Netns is the path of the pod's network namespace. It may be empty or
	// name a namespace that is gone when a pod is torn down or listed.
	Netns string
	// Namespace and Name are the Kubernetes pod's, for names, tags and logs;
	// they may be empty.
	Namespace string
	Name      string
	// IPv4 and IPv6 are the pod's addresses; a family the pod lacks is the
	// zero netip.Addr.
	IPv4 netip.Addr
	IPv6 netip.Addr
	// MTU of the pod's interface from the network configuration; 0 means the
	// dataplane's own (configured, or detected from the node's uplink).
	MTU int
	// PortMappings are the pod's hostPorts, from the runtime's
	// runtimeConfig.portMappings. A dataplane that leaves hostPorts to the
	// portmap plugin chained after vcoil (Linux) ignores them; VPP serves
	// them itself.
	PortMappings []PortMapping
	// SourcePrefixes are the sources the pod may send from besides IPv4 and
	// IPv6 (the pod's allowed-source-prefixes annotation, already admitted).
	// Source validation drops a packet from the pod's interface whose source
	// is neither one of the pod's addresses nor inside one of these.
	SourcePrefixes []netip.Prefix
	// NoChecksumOffload: the pod tunnels or forwards packets (the pod's
	// checksum-offload annotation "off", or an Egress router or client),
	// and its own interface must complete every checksum it sends instead
	// of leaving it to offload. A dataplane that completes only the outer
	// checksum of what a pod leaves to offload (VPP) turns the pod's
	// transmit checksum offload off; the Linux dataplane, whose veths hand
	// the partial checksums on to the kernel that completes them, ignores
	// it.
	NoChecksumOffload bool
}

// Protocols of a PortMapping, as the CNI portMappings capability spells
// them (lower case).
const (
	ProtocolTCP  = "tcp"
	ProtocolUDP  = "udp"
	ProtocolSCTP = "sctp"
)

// PortMapping is one hostPort: connections to HostIP (every address of the
// node of the pod address's family when HostIP is unspecified or zero) and
// HostPort with Protocol go to the pod's address and ContainerPort.
type PortMapping struct {
	HostIP        netip.Addr
	HostPort      uint16
	ContainerPort uint16
	// Protocol is ProtocolTCP, ProtocolUDP or ProtocolSCTP.
	Protocol string
}

func (m PortMapping) String() string {
	host := "*"
	if m.HostIP.IsValid() {
		host = m.HostIP.String()
	}
	return fmt.Sprintf("%s %s:%d -> %d", m.Protocol, host, m.HostPort, m.ContainerPort)
}

// Interfaces describes what SetupPod created, for the CNI result.
type Interfaces struct {
	// HostIfName and HostMAC are the node-side end (a veth's peer, or the
	// dataplane's name for its side of a TAP); HostMAC may be empty.
	HostIfName string
	HostMAC    string
	// PodMAC is the MAC of the pod's interface; empty for an L3 tun.
	PodMAC string
	// MTU of the pod's interface.
	MTU int
}

// Dataplane wires pods into the node's forwarding plane.
//
// Every method is idempotent: SetupPod of a pod that is wired as asked
// returns its interfaces; SetupPod of a pod wired differently (other
// addresses) replaces the wiring; TeardownPod of something absent, or of a pod
// whose namespace is gone, succeeds. A failed SetupPod leaves nothing behind.
// Every object a dataplane creates carries the container ID and interface
// name (a tag, an alias), so that ListPods can tell vcoild what exists after
// a restart.
type Dataplane interface {
	// Name is "linux" or "vpp", for logs and the gRPC Status.
	Name() string
	// Init prepares the node once, before any pod is wired (policy routing
	// rules, the host interconnect). It is idempotent.
	Init(ctx context.Context) error
	// SetupPod creates the pod's interface in its namespace with the pod's
	// addresses and routes, and the node side that reaches it.
	SetupPod(ctx context.Context, pod Pod) (Interfaces, error)
	// CheckPod reports, as an error naming what is wrong, whether the pod is
	// wired as SetupPod would wire it.
	CheckPod(ctx context.Context, pod Pod) error
	// TeardownPod removes everything SetupPod created for pod.PodKey. The
	// addresses and the namespace may be unknown (zero, empty or gone).
	TeardownPod(ctx context.Context, pod Pod) error
	// ListPods returns the pods the dataplane holds, with their keys and
	// addresses (Netns, Namespace and Name may be empty).
	ListPods(ctx context.Context) ([]Pod, error)
	// Healthy returns an error when the dataplane cannot wire pods now (VPP
	// unreachable, the node's table missing); readiness reflects it.
	Healthy(ctx context.Context) error
}

// Validate checks a key as the CNI specification defines its parts, so that
// names, tags and aliases built from it stay parseable and the interface name
// is acceptable to the kernel: container IDs of letters, digits, '_', '.'
// and '-'; interface names of 1 to 15 characters without '/', ':' or white
// space, and not "." or "..".
func (k PodKey) Validate() error {
	if k.ContainerID == "" {
		return fmt.Errorf("container ID is empty")
	}
	for _, r := range k.ContainerID {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return fmt.Errorf("container ID %q: character %q is not a letter, digit, '_', '.' or '-'", k.ContainerID, r)
		}
	}
	if k.IfName == "" || len(k.IfName) > 15 || k.IfName == "." || k.IfName == ".." {
		return fmt.Errorf("interface name %q: want 1 to 15 characters, not . or ..", k.IfName)
	}
	if strings.ContainsAny(k.IfName, "/: \t\n\r\v\f") {
		return fmt.Errorf("interface name %q: '/', ':' and white space are not allowed", k.IfName)
	}
	return nil
}

// String is "containerID/ifname".
func (k PodKey) String() string { return k.ContainerID + "/" + k.IfName }

// Validate rejects what no dataplane could wire, naming the field: a bad
// key, an empty netns path, no address, an address of the wrong family or
// one that cannot be a pod's, a source prefix that is not masked or starts
// at an address that cannot be a pod's. Dataplanes add their own limits (names that
// must fit, the MTUs they support).
func (p Pod) Validate() error {
	if err := p.PodKey.Validate(); err != nil {
		return err
	}
	if p.Netns == "" {
		return errors.New("netns path is empty")
	}
	if !p.IPv4.IsValid() && !p.IPv6.IsValid() {
		return errors.New("pod has neither an IPv4 nor an IPv6 address")
	}
	if p.IPv4.IsValid() && !p.IPv4.Is4() {
		return fmt.Errorf("IPv4 address %s is not IPv4", p.IPv4)
	}
	if p.IPv6.IsValid() && (!p.IPv6.Is6() || p.IPv6.Is4In6()) {
		return fmt.Errorf("IPv6 address %s is not IPv6", p.IPv6)
	}
	for _, a := range []netip.Addr{p.IPv4, p.IPv6} {
		if a.IsValid() && !podAddr(a) {
			return fmt.Errorf("address %s cannot be a pod's: want a unicast address outside link-local, loopback and multicast", a)
		}
	}
	for _, sp := range p.SourcePrefixes {
		if err := ValidateSourcePrefix(sp); err != nil {
			return err
		}
	}
	return nil
}

// ValidateSourcePrefix refuses a prefix that no pod may send from: not a
// prefix, bits set past its length, IPv4-mapped, or not starting at an
// address that could be a pod's (0.0.0.0/0, loopback, link-local,
// multicast). vcoild checks an annotation's prefixes with it before it
// allocates, so that what admission lets through and what a dataplane
// wires are the same.
func ValidateSourcePrefix(sp netip.Prefix) error {
	switch {
	case !sp.IsValid():
		return fmt.Errorf("source prefix %v is not a prefix", sp)
	case sp != sp.Masked():
		return fmt.Errorf("source prefix %s has bits set past its length: want %s", sp, sp.Masked())
	case sp.Addr().Is4In6():
		return fmt.Errorf("source prefix %s is an IPv4-mapped IPv6 prefix: write it as IPv4", sp)
	case !podAddr(sp.Addr()):
		return fmt.Errorf("source prefix %s cannot be a pod's: want unicast addresses outside link-local, loopback and multicast", sp)
	}
	return nil
}

// podAddr is true for an address that can be a pod's (or start a prefix of
// its sources): unicast, outside link-local, loopback and multicast,
// neither unspecified nor IPv4's broadcast, without a zone.
func podAddr(a netip.Addr) bool {
	return !(a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.Zone() != "" ||
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}))
}
