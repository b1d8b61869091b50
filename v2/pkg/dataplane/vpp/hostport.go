package vpp

import (
	"cmp"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// HostPorts. Traffic to the node's address arrives at VPP, which holds it
// on the uplink, and never passes the node kernel's portmap rules; so the
// VPP dataplane serves a pod's hostPorts itself, as NAT44-ED static
// mappings: external = each IPv4 address of the uplink (or the mapping's
// hostIP, when it is one of them) and the host port, local = the pod's
// IPv4 address and the container port, TCP or UDP. The flags are those of
// the services renderer's cluster IPs: OUT2IN_ONLY (only traffic to the
// host port is translated, never the pod's own connections from the
// container port) and SELF_TWICE_NAT (a pod reaching its own hostPort is
// source-NATed to the NAT loopback, as for a service it backs).
//
// What else it takes, kept by the driver:
//   - NAT44-ED enabled, with NAT forwarding, so that traffic matching no
//     mapping passes untranslated through the interfaces given NAT roles;
//   - the uplink a NAT frontend (outside), where clients outside the node
//     come in; it stays one for the rest of vcoild's run once a hostPort
//     was wanted (the services renderer and SNAT keep it one anyway);
//   - the pod a frontend and a backend (outside and inside): its replies
//     find their sessions, and its own hostPort reaches it back.
//
// The mappings are part of the pod's desired state, from its ADD and, after
// a vcoild restart, from the checkpoint (Config.Allocations): a sync dumps
// VPP's static mappings, keeps vcoil's that a wired pod wants, deletes the
// other ones tagged hostPortTagPrefix and adds what is missing. Not
// served: IPv6 (NAT44-ED is IPv4 only), SCTP, a node without an uplink,
// and a hostIP that is not an uplink address (VPP would make it local).

// hostPortTagPrefix is the kind of the tag of every hostPort mapping:
// "vcoil-hp@2 <containerID> <ifname>", "vcoil-hp64@2 <ID in base64url>
// <ifname>" or "vcoil-hp#@2 <hash>", the first that fits VPP's 63 bytes
// ("@2": formatversion.VPPTag; format 1 tags lack it). The services renderer owns
// the tags starting "vcoil-svc" and leaves these alone.
const hostPortTagPrefix = "vcoil-hp"

// hostPortFlags are the flags of every hostPort mapping.
const hostPortFlags = nat_types.NAT_IS_OUT2IN_ONLY | nat_types.NAT_IS_SELF_TWICE_NAT

// hostPortTag tags the mappings of a pod's hostPorts.
func hostPortTag(key dataplane.PodKey) string {
	if t := formatversion.Tag(hostPortTagPrefix, key.ContainerID, key.IfName); len(t) <= maxTag {
		return t
	}
	if b, err := hex.DecodeString(key.ContainerID); err == nil && strings.ToLower(key.ContainerID) == key.ContainerID {
		if t := formatversion.Tag(hostPortTagPrefix+"64", base64.RawURLEncoding.EncodeToString(b), key.IfName); len(t) <= maxTag {
			return t
		}
	}
	return formatversion.Tag(hostPortTagPrefix+"#", keyHash(key))
}

// currentHostPortTag is the current spelling of a hostPort tag of this
// format or the previous one, so that a mapping an earlier vcoild made
// compares equal to the one wanted and is kept (VPP cannot re-tag a static
// mapping, and making it again would cut its sessions); false for a tag
// that is not a hostPort's.
func currentHostPortTag(tag string) (string, bool) {
	kind, v, rest, ok := formatversion.ParseTag(tag)
	if !ok || v > formatversion.VPPTag {
		return "", false
	}
	f := strings.Split(rest, " ")
	switch {
	case kind == hostPortTagPrefix && len(f) == 2:
		return hostPortTag(dataplane.PodKey{ContainerID: f[0], IfName: f[1]}), true
	case kind == hostPortTagPrefix+"64" && len(f) == 2:
		b, err := base64.RawURLEncoding.DecodeString(f[0])
		if err != nil {
			return "", false
		}
		return hostPortTag(dataplane.PodKey{ContainerID: hex.EncodeToString(b), IfName: f[1]}), true
	case kind == hostPortTagPrefix+"#" && len(f) == 1:
		return formatversion.Tag(kind, f[0]), true
	}
	return "", false
}

// hostPortMapping is one NAT44-ED static mapping of a hostPort, as VPP's
// dump returns it.
type hostPortMapping struct {
	external     netip.Addr
	externalPort uint16
	protocol     uint8
	local        netip.Addr
	localPort    uint16
	tag          string
}

func (m hostPortMapping) String() string {
	return fmt.Sprintf("%s %s:%d -> %s:%d", protocolName(m.protocol), m.external, m.externalPort, m.local, m.localPort)
}

func compareHostPortMappings(a, b hostPortMapping) int {
	return cmp.Or(a.external.Compare(b.external), cmp.Compare(a.externalPort, b.externalPort), cmp.Compare(a.protocol, b.protocol),
		a.local.Compare(b.local), cmp.Compare(a.localPort, b.localPort), cmp.Compare(a.tag, b.tag))
}

func protocolName(p uint8) string {
	switch p {
	case 6:
		return dataplane.ProtocolTCP
	case 17:
		return dataplane.ProtocolUDP
	}
	return fmt.Sprintf("protocol %d", p)
}

// hasHostPorts reports whether pod has a mapping VPP can serve: TCP or UDP
// on an IPv4 host address (or every one), for an IPv4 pod, on a node with
// an uplink. It decides the pod's NAT roles without the uplink's
// addresses, which only a connected driver knows.
func (d *driver) hasHostPorts(pod dataplane.Pod) bool {
	if d.cfg.Uplink == "" || !pod.IPv4.IsValid() {
		return false
	}
	return slices.ContainsFunc(pod.PortMappings, func(m dataplane.PortMapping) bool {
		return (m.Protocol == dataplane.ProtocolTCP || m.Protocol == dataplane.ProtocolUDP) && (!m.HostIP.IsValid() || m.HostIP.Is4())
	})
}

// hostPortRole is the NAT role pod's hostPorts need.
func (d *driver) hostPortRole(pod dataplane.Pod) NATRole {
	if d.hasHostPorts(pod) {
		return NATFrontend | NATBackend
	}
	return 0
}

// renderHostPorts returns the static mappings of pod's hostPorts, in a
// stable order, and why each mapping left out is. The caller holds d.mu.
func (d *driver) renderHostPorts(pod dataplane.Pod) ([]hostPortMapping, []string, error) {
	if len(pod.PortMappings) == 0 {
		return nil, nil, nil
	}
	var out []hostPortMapping
	var skipped []string
	var uplink []netip.Addr
	for _, m := range pod.PortMappings {
		proto, ok := hostPortProtocol(m.Protocol)
		if !ok {
			skipped = append(skipped, fmt.Sprintf("%s: NAT44-ED translates TCP and UDP only", m))
			continue
		}
		switch {
		case m.HostIP.IsValid() && m.HostIP.Is6():
			skipped = append(skipped, fmt.Sprintf("%s: IPv6 hostPorts are not served on VPP (NAT44-ED is IPv4 only)", m))
			continue
		case !pod.IPv4.IsValid():
			skipped = append(skipped, fmt.Sprintf("%s: the pod has no IPv4 address, and IPv6 hostPorts are not served on VPP", m))
			continue
		case d.cfg.Uplink == "":
			skipped = append(skipped, fmt.Sprintf("%s: the node has no VPP uplink (--vpp-uplink) whose address could serve it", m))
			continue
		}
		if uplink == nil {
			addrs, err := d.uplinkIPv4()
			if err != nil {
				return nil, nil, err
			}
			uplink = addrs
		}
		external := uplink
		if m.HostIP.IsValid() && !m.HostIP.IsUnspecified() {
			if !slices.Contains(uplink, m.HostIP) {
				skipped = append(skipped, fmt.Sprintf("%s: host IP %s is not an address of the uplink %s %v", m, m.HostIP, d.cfg.Uplink, uplink))
				continue
			}
			external = []netip.Addr{m.HostIP}
		}
		if len(external) == 0 {
			skipped = append(skipped, fmt.Sprintf("%s: the uplink %s has no IPv4 address", m, d.cfg.Uplink))
			continue
		}
		for _, e := range external {
			out = append(out, hostPortMapping{external: e, externalPort: m.HostPort, protocol: proto,
				local: pod.IPv4, localPort: m.ContainerPort, tag: hostPortTag(pod.PodKey)})
		}
	}
	slices.SortFunc(out, compareHostPortMappings)
	return slices.CompactFunc(out, func(a, b hostPortMapping) bool { return a == b }), skipped, nil
}

// hostPortProtocol is the IP protocol number of a hostPort's protocol, when
// NAT44-ED translates it (TCP, UDP).
func hostPortProtocol(p string) (uint8, bool) {
	switch p {
	case dataplane.ProtocolTCP:
		return 6, true
	case dataplane.ProtocolUDP:
		return 17, true
	}
	return 0, false
}

// uplinkIPv4 returns the uplink's IPv4 addresses, read from VPP once per
// sync (the node set-up puts the configured ones there first). The caller
// holds d.mu.
func (d *driver) uplinkIPv4() ([]netip.Addr, error) {
	if d.node.uplinkIPv4 != nil {
		return d.node.uplinkIPv4, nil
	}
	addrs := []netip.Addr{}
	err := vppapi.Dump(d.ch, &ip.IPAddressDump{SwIfIndex: index(d.node.uplink), IsIPv6: false},
		func() *ip.IPAddressDetails { return &ip.IPAddressDetails{} },
		func(m *ip.IPAddressDetails) {
			if a := fromVPPPrefix(ip_types.Prefix(m.Prefix)).Addr(); a.Is4() && !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
		})
	if err != nil {
		return nil, fmt.Errorf("list the IPv4 addresses of the uplink %s: %w", d.cfg.Uplink, err)
	}
	d.node.uplinkIPv4 = addrs
	return addrs, nil
}

// enableHostPorts makes what every hostPort needs besides its mapping:
// NAT44-ED and NAT forwarding on, the uplink a NAT frontend. The caller
// holds d.mu.
func (d *driver) enableHostPorts() error {
	if err := d.ensureNAT(); err != nil {
		return err
	}
	if !d.node.natForwarding {
		if err := vppapi.Call(d.ch, &nat44_ed.Nat44ForwardingEnableDisable{Enable: true}, &nat44_ed.Nat44ForwardingEnableDisableReply{}); err != nil {
			return fmt.Errorf("enable NAT forwarding for hostPorts: %w", err)
		}
		d.node.natForwarding = true
	}
	d.hostPortsOn = true
	if old := d.nodeRoles[Uplink]; old&NATFrontend == 0 {
		if err := d.applyRole(d.node.uplink, NATFrontend, 0); err != nil {
			return fmt.Errorf("make the uplink a NAT frontend for hostPorts: %w", err)
		}
		d.nodeRoles[Uplink] = old | NATFrontend
	}
	return nil
}

// setHostPorts makes VPP hold exactly the mappings of st's pod with
// mappings, and gives the pod the NAT roles they need. st must be wired.
// On an error st.hostPorts still says what VPP holds. The caller holds
// d.mu.
func (d *driver) setHostPorts(st *podState, mappings []dataplane.PortMapping) error {
	st.pod.PortMappings = mappings
	want, skipped, err := d.renderHostPorts(st.pod)
	if err != nil {
		return err
	}
	for _, s := range skipped {
		d.log.Info("hostPort not served", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName, "pod", st.pod.Namespace+"/"+st.pod.Name, "reason", s)
	}
	if len(want) > 0 {
		if err := d.enableHostPorts(); err != nil {
			return err
		}
	}
	if role := d.podRoleWith(st); role != st.role {
		if err := d.applyRole(st.swIfIndex, role&^st.role, st.role&^role); err != nil {
			return fmt.Errorf("NAT role %s for hostPorts: %w", role, err)
		}
		st.role = role
	}
	var keep []hostPortMapping
	var errs []error
	for _, m := range st.hostPorts {
		if slices.Contains(want, m) {
			keep = append(keep, m)
			continue
		}
		if err := d.delHostPort(m); err != nil {
			errs = append(errs, err)
			keep = append(keep, m)
		}
	}
	st.hostPorts = keep
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, m := range want {
		if slices.Contains(st.hostPorts, m) {
			continue
		}
		if err := d.addHostPort(m); err != nil {
			return err
		}
		st.hostPorts = append(st.hostPorts, m)
	}
	return nil
}

// checkHostPorts reports whether st's pod has the hostPorts mappings asks
// for and VPP holds their static mappings (as this connection made them).
// The caller holds d.mu.
func (d *driver) checkHostPorts(st *podState, mappings []dataplane.PortMapping) error {
	if !slices.Equal(st.pod.PortMappings, mappings) {
		return fmt.Errorf("hostPorts %v; want %v", st.pod.PortMappings, mappings)
	}
	want, _, err := d.renderHostPorts(st.pod)
	if err != nil {
		return err
	}
	for _, m := range want {
		if !slices.Contains(st.hostPorts, m) {
			return fmt.Errorf("VPP lacks the static mapping of hostPort %s", m)
		}
	}
	return nil
}

// podRoleWith is the role st's pod should have now: the services
// renderer's (podRole) with its hostPorts', or, before the renderer has
// spoken, what the pod had besides its hostPorts' role. The caller holds
// d.mu.
func (d *driver) podRoleWith(st *podState) NATRole {
	if d.podRolesKnown {
		return d.podRole(st.pod)
	}
	return st.role&^(NATFrontend|NATBackend) | d.hostPortRole(st.pod) | d.cnatFrontendRole()
}

// removeHostPorts deletes the mappings VPP holds for st. The caller holds
// d.mu.
func (d *driver) removeHostPorts(st *podState) error {
	var keep []hostPortMapping
	var errs []error
	for _, m := range st.hostPorts {
		if err := d.delHostPort(m); err != nil {
			errs = append(errs, err)
			keep = append(keep, m)
		}
	}
	st.hostPorts = keep
	return errors.Join(errs...)
}

func (m hostPortMapping) request(isAdd bool) *nat44_ed.Nat44AddDelStaticMappingV2 {
	req := &nat44_ed.Nat44AddDelStaticMappingV2{
		IsAdd: isAdd, Flags: hostPortFlags,
		LocalIPAddress: ip_types.IP4Address(m.local.As4()), LocalPort: m.localPort,
		ExternalIPAddress: ip_types.IP4Address(m.external.As4()), ExternalPort: m.externalPort,
		Protocol: m.protocol, ExternalSwIfIndex: interface_types.InterfaceIndex(^uint32(0)),
	}
	if isAdd {
		req.Tag = m.tag
	}
	return req
}

func (d *driver) addHostPort(m hostPortMapping) error {
	err := vppapi.Call(d.ch, m.request(true), &nat44_ed.Nat44AddDelStaticMappingV2Reply{})
	if vppapi.IsRetval(err, api.VALUE_EXIST) {
		return fmt.Errorf("hostPort %s: VPP maps %s:%d/%s already (another pod's hostPort, or a Service's NodePort): %w",
			m, m.external, m.externalPort, protocolName(m.protocol), err)
	}
	if err != nil {
		return fmt.Errorf("add the static mapping of hostPort %s: %w", m, err)
	}
	return nil
}

// delHostPort deletes m; one VPP does not hold is no error.
func (d *driver) delHostPort(m hostPortMapping) error {
	err := vppapi.IgnoreRetval(vppapi.Call(d.ch, m.request(false), &nat44_ed.Nat44AddDelStaticMappingV2Reply{}), api.NO_SUCH_ENTRY)
	if err != nil {
		return fmt.Errorf("delete the static mapping of hostPort %s: %w", m, err)
	}
	return nil
}

// dumpHostPorts returns VPP's static mappings tagged as hostPorts.
//
// A mapping of a format 1 tag is returned with its current tag (it is kept
// as it is in VPP); one of a newer format fails the dump (formatversion.NewerError).
func dumpHostPorts(ch channel) ([]hostPortMapping, error) {
	var out []hostPortMapping
	var newer []error
	err := vppapi.Dump(ch, &nat44_ed.Nat44StaticMappingDump{},
		func() *nat44_ed.Nat44StaticMappingDetails { return &nat44_ed.Nat44StaticMappingDetails{} },
		func(m *nat44_ed.Nat44StaticMappingDetails) {
			if !strings.HasPrefix(m.Tag, hostPortTagPrefix) {
				return
			}
			mapping := hostPortMapping{
				external: netip.AddrFrom4(m.ExternalIPAddress), externalPort: m.ExternalPort, protocol: m.Protocol,
				local: netip.AddrFrom4(m.LocalIPAddress), localPort: m.LocalPort, tag: m.Tag,
			}
			if err := formatversion.CheckTag("VPP static mapping "+mapping.String(), m.Tag); err != nil {
				newer = append(newer, err)
				return
			}
			if t, ok := currentHostPortTag(m.Tag); ok {
				mapping.tag = t
			}
			out = append(out, mapping)
		})
	if err != nil {
		return nil, fmt.Errorf("list VPP's static mappings: %w", err)
	}
	if len(newer) > 0 {
		return nil, errors.Join(newer...)
	}
	slices.SortFunc(out, compareHostPortMappings)
	return out, nil
}

// syncHostPorts makes VPP's hostPort mappings those of the wired pods,
// after a (re)connection: those VPP holds and a pod wants are kept, the
// other ones tagged as hostPorts deleted, the missing ones added, with the
// pods' roles. It looks at VPP only on the first sync since vcoild started
// (an earlier vcoild's may be left) and when a pod wants hostPorts: a VPP
// that restarted has none. A mapping that cannot be added (another
// holds its address and port) is logged and left for the pod's next ADD;
// it does not fail the sync. The caller holds d.mu.
func (d *driver) syncHostPorts() error {
	pods := sortedPods(d.pods)
	wanted := slices.ContainsFunc(pods, func(st *podState) bool { return len(st.pod.PortMappings) > 0 })
	for _, st := range pods {
		st.hostPorts = nil
	}
	if wanted || d.hostPortsOn {
		// The uplink's frontend role, replayed with the node's roles,
		// needs forwarding whether a pod wants a hostPort now or not.
		if err := d.enableHostPorts(); err != nil {
			return err
		}
	}
	if !d.initial && !wanted {
		return nil
	}
	want := map[hostPortMapping]*podState{}
	for _, st := range pods {
		if !st.wired {
			continue
		}
		ms, _, err := d.renderHostPorts(st.pod)
		if err != nil {
			return err
		}
		for _, m := range ms {
			want[m] = st
		}
	}
	have, err := dumpHostPorts(d.ch)
	if err != nil {
		return err
	}
	for _, m := range have {
		if st := want[m]; st != nil {
			st.hostPorts = append(st.hostPorts, m)
			continue
		}
		d.log.Info("deleting a hostPort mapping no pod wants", "mapping", m.String(), "tag", m.tag)
		if err := d.delHostPort(m); err != nil {
			return err
		}
	}
	for _, st := range pods {
		if !st.wired {
			continue
		}
		if role := d.podRoleWith(st); role&^st.role != 0 {
			if err := d.applyRole(st.swIfIndex, role&^st.role, 0); err != nil {
				return fmt.Errorf("NAT role %s of pod %s for its hostPorts: %w", role, describe(st.pod.PodKey), err)
			}
			st.role |= role
		}
		ms, _, _ := d.renderHostPorts(st.pod)
		for _, m := range ms {
			if slices.Contains(st.hostPorts, m) {
				continue
			}
			if err := d.addHostPort(m); err != nil {
				d.log.Error(err, "cannot make a hostPort again during the sync", "containerID", st.pod.ContainerID, "ifname", st.pod.IfName)
				continue
			}
			st.hostPorts = append(st.hostPorts, m)
		}
	}
	return nil
}
