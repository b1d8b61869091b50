package vpp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"
	"go.fd.io/govpp/binapi/vpe"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// The node state (package nodestate) reads what VPP holds on its own
// channel, with dumps only, and changes nothing. Its messages are apart
// from messages(): a VPP that lacks one of them (a plugin not loaded) fails
// the state's dump, not the dataplane.

// stateMessages are the dumps of the node state with their details.
func stateMessages() []api.Message {
	return []api.Message{
		&vpe.ShowVersion{}, &vpe.ShowVersionReply{},
		&interfaces.SwInterfaceDump{}, &interfaces.SwInterfaceDetails{},
		&ip.IPAddressDump{}, &ip.IPAddressDetails{},
		&nat44_ed.Nat44InterfaceDump{}, &nat44_ed.Nat44InterfaceDetails{},
		&acl.ACLInterfaceListDump{}, &acl.ACLInterfaceListDetails{},
		&acl.ACLDump{}, &acl.ACLDetails{},
		&nat44_ed.Nat44StaticMappingDump{}, &nat44_ed.Nat44StaticMappingDetails{},
		&nat44_ed.Nat44LbStaticMappingDump{}, &nat44_ed.Nat44LbStaticMappingDetails{},
	}
}

// ownedTag is the start of every tag vcoil puts on ACLs and NAT44 static
// mappings (the policies' "vcoil-pol", the services' "vcoil-svc", the
// hostPorts' "vcoil-hp"): the node state shows those and leaves the
// others' out.
const ownedTag = "vcoil"

// recordResync keeps what the node state says of the syncs after a
// (re)connection. The caller holds d.mu.
func (d *driver) recordResync(start, end time.Time, err error) {
	d.lastResync.Attempted = end
	if err != nil {
		d.lastResync.Error = err.Error()
		d.lastResync.Errors++
		return
	}
	d.lastResync.Last, d.lastResync.Duration, d.lastResync.Error = end, nodestate.Seconds(end.Sub(start).Seconds()), ""
}

// PodInterfaces returns, for the node state, the VPP interface of every
// pod the driver has wired on the current connection: a TAP, or an
// af_packet interface with the node-side veth it is bound to. It does not
// wait for VPP: while VPP is not synced no pod is wired, and none is
// listed.
func (d *driver) PodInterfaces(ctx context.Context) (map[dataplane.PodKey]nodestate.Interface, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[dataplane.PodKey]nodestate.Interface{}
	for key, st := range d.pods {
		if !st.wired {
			continue
		}
		iface := nodestate.Interface{Kind: string(TAP), Name: st.vppName, Index: st.swIfIndex}
		if host, ok := strings.CutPrefix(st.vppName, "host-"); ok {
			iface.Kind, iface.HostName = string(AFPacket), host
		}
		out[key] = iface
	}
	return out, nil
}

// StateSource fills the node state's VPP section: the connection, the
// incarnation and its last resync, and, read from VPP, its version, its
// interfaces with their addresses, NAT44 roles and ACL lists, and the ACLs
// and NAT44 static mappings vcoil owns.
func (d *driver) StateSource() nodestate.Source { return nodestate.SourceFunc(d.fillState) }

func (d *driver) fillState(ctx context.Context, st *nodestate.State) error {
	d.mu.Lock()
	s := &nodestate.VPP{Incarnation: uint64(d.incarnation), Resync: d.lastResync}
	st.VPP = s
	open, why, fatal := d.open, d.why, d.fatal
	d.mu.Unlock()
	if open == nil {
		if fatal != nil {
			why = fatal
		}
		return fmt.Errorf("not connected to VPP at %s: %v", d.cfg.APISocket, why)
	}
	ch, err := open(channelSlack)
	if err != nil {
		return err
	}
	defer ch.Close()
	s.Connected = true
	if err := vppapi.CheckMessages(ch, "the node state", "the nat44_ed and acl plugins", stateMessages()); err != nil {
		return err
	}
	// Each dump is bounded by the channel's reply timeout; ctx ends the
	// collection between dumps.
	var errs []error
	steps := []struct {
		what string
		f    func(api.Channel, *nodestate.VPP) error
	}{
		{"version", dumpVersion},
		{"interfaces", dumpInterfaces},
		{"ACLs", dumpACLs},
		{"NAT44 static mappings", dumpNATMappings},
	}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", step.what, err))
			break
		}
		if err := step.f(ch, s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", step.what, err))
		}
	}
	return errors.Join(errs...)
}

func dumpVersion(ch api.Channel, s *nodestate.VPP) error {
	reply := &vpe.ShowVersionReply{}
	if err := vppapi.Call(ch, &vpe.ShowVersion{}, reply); err != nil {
		return err
	}
	s.Version = reply.Version
	return nil
}

// dumpInterfaces lists every interface with its addresses, its NAT44 role
// and its ACL lists. A VPP whose NAT plugin is not enabled yet has no
// roles.
func dumpInterfaces(ch api.Channel, s *nodestate.VPP) error {
	var ifs []nodestate.VPPInterface
	err := vppapi.Dump(ch, &interfaces.SwInterfaceDump{SwIfIndex: index(^uint32(0))},
		func() *interfaces.SwInterfaceDetails { return &interfaces.SwInterfaceDetails{} },
		func(m *interfaces.SwInterfaceDetails) {
			ifs = append(ifs, nodestate.VPPInterface{
				Index: uint32(m.SwIfIndex), Name: m.InterfaceName, Tag: m.Tag,
				Up: m.Flags&interface_types.IF_STATUS_API_FLAG_ADMIN_UP != 0,
			})
		})
	if err != nil {
		return err
	}
	slices.SortFunc(ifs, func(a, b nodestate.VPPInterface) int { return cmp.Compare(a.Index, b.Index) })
	byIndex := map[uint32]*nodestate.VPPInterface{}
	for i := range ifs {
		byIndex[ifs[i].Index] = &ifs[i]
	}
	for i := range ifs {
		for _, v6 := range []bool{false, true} {
			err := vppapi.Dump(ch, &ip.IPAddressDump{SwIfIndex: index(ifs[i].Index), IsIPv6: v6},
				func() *ip.IPAddressDetails { return &ip.IPAddressDetails{} },
				func(m *ip.IPAddressDetails) {
					ifs[i].Addresses = append(ifs[i].Addresses, fromVPPPrefix(ip_types.Prefix(m.Prefix)))
				})
			if err != nil {
				return fmt.Errorf("addresses of %s: %w", ifs[i].Name, err)
			}
		}
	}
	err = vppapi.Dump(ch, &nat44_ed.Nat44InterfaceDump{},
		func() *nat44_ed.Nat44InterfaceDetails { return &nat44_ed.Nat44InterfaceDetails{} },
		func(m *nat44_ed.Nat44InterfaceDetails) {
			if i := byIndex[uint32(m.SwIfIndex)]; i != nil {
				i.NAT = natRole(m.Flags)
			}
		})
	if err != nil {
		return err
	}
	err = vppapi.Dump(ch, &acl.ACLInterfaceListDump{SwIfIndex: index(^uint32(0))},
		func() *acl.ACLInterfaceListDetails { return &acl.ACLInterfaceListDetails{} },
		func(m *acl.ACLInterfaceListDetails) {
			i := byIndex[uint32(m.SwIfIndex)]
			if i == nil {
				return
			}
			n := min(int(m.NInput), len(m.Acls))
			if n > 0 {
				i.InputACLs = slices.Clone(m.Acls[:n])
			}
			if len(m.Acls) > n {
				i.OutputACLs = slices.Clone(m.Acls[n:])
			}
		})
	if err != nil {
		return err
	}
	s.Interfaces = ifs
	return nil
}

func natRole(f nat_types.NatConfigFlags) string {
	var r []string
	if f&nat_types.NAT_IS_INSIDE != 0 {
		r = append(r, "in")
	}
	if f&nat_types.NAT_IS_OUTSIDE != 0 {
		r = append(r, "out")
	}
	return strings.Join(r, " ")
}

// dumpACLs lists the ACLs whose tag is vcoil's, by index.
func dumpACLs(ch api.Channel, s *nodestate.VPP) error {
	var out []nodestate.VPPACL
	err := vppapi.Dump(ch, &acl.ACLDump{ACLIndex: ^uint32(0)},
		func() *acl.ACLDetails { return &acl.ACLDetails{} },
		func(m *acl.ACLDetails) {
			if !strings.HasPrefix(m.Tag, ownedTag) {
				return
			}
			a := nodestate.VPPACL{Index: m.ACLIndex, Tag: m.Tag, Rules: []string{}}
			for _, r := range m.R {
				a.Rules = append(a.Rules, ACLRuleText(r))
			}
			out = append(out, a)
		})
	if err != nil {
		return err
	}
	slices.SortFunc(out, func(a, b nodestate.VPPACL) int { return cmp.Compare(a.Index, b.Index) })
	s.ACLs = out
	return nil
}

// ACLRuleText writes an ACL rule as the node state shows it:
// "permit tcp 10.1.0.0/16 > 10.1.0.5/32:80", with the action (deny,
// permit, permit+reflect), the protocol (any for 0), the source and
// destination with their port ranges when they are not every port, and
// the TCP flags (value/mask) when the rule tests them.
func ACLRuleText(r acl_types.ACLRule) string {
	action := map[acl_types.ACLAction]string{
		acl_types.ACL_ACTION_API_DENY: "deny", acl_types.ACL_ACTION_API_PERMIT: "permit",
		acl_types.ACL_ACTION_API_PERMIT_REFLECT: "permit+reflect",
	}[r.IsPermit]
	if action == "" {
		action = fmt.Sprintf("action-%d", r.IsPermit)
	}
	var proto string
	ports := false
	switch r.Proto {
	case 0:
		proto = "any"
	case ip_types.IP_API_PROTO_TCP:
		proto, ports = "tcp", true
	case ip_types.IP_API_PROTO_UDP:
		proto, ports = "udp", true
	case ip_types.IP_API_PROTO_SCTP:
		proto, ports = "sctp", true
	case ip_types.IP_API_PROTO_ICMP:
		proto = "icmp"
	case ip_types.IP_API_PROTO_ICMP6:
		proto = "icmp6"
	default:
		proto = fmt.Sprintf("proto-%d", r.Proto)
	}
	portRange := func(first, last uint16) string {
		switch {
		case !ports || (first == 0 && last == 65535):
			return ""
		case first == last:
			return fmt.Sprintf(":%d", first)
		}
		return fmt.Sprintf(":%d-%d", first, last)
	}
	t := fmt.Sprintf("%s %s %s%s > %s%s", action, proto,
		fromVPPPrefix(r.SrcPrefix), portRange(r.SrcportOrIcmptypeFirst, r.SrcportOrIcmptypeLast),
		fromVPPPrefix(r.DstPrefix), portRange(r.DstportOrIcmpcodeFirst, r.DstportOrIcmpcodeLast))
	if !ports && r.Proto != 0 && (r.SrcportOrIcmptypeFirst != 0 || r.SrcportOrIcmptypeLast != 65535 || r.DstportOrIcmpcodeFirst != 0 || r.DstportOrIcmpcodeLast != 65535) {
		t += fmt.Sprintf(" type %d-%d code %d-%d", r.SrcportOrIcmptypeFirst, r.SrcportOrIcmptypeLast, r.DstportOrIcmpcodeFirst, r.DstportOrIcmpcodeLast)
	}
	if r.TCPFlagsMask != 0 {
		t += fmt.Sprintf(" flags %#02x/%#02x", r.TCPFlagsValue, r.TCPFlagsMask)
	}
	return t
}

// dumpNATMappings lists the static mappings (plain, then load-balancing)
// whose tag is vcoil's, sorted by external address, protocol and port.
func dumpNATMappings(ch api.Channel, s *nodestate.VPP) error {
	var out []nodestate.VPPNATMapping
	err := vppapi.Dump(ch, &nat44_ed.Nat44StaticMappingDump{},
		func() *nat44_ed.Nat44StaticMappingDetails { return &nat44_ed.Nat44StaticMappingDetails{} },
		func(m *nat44_ed.Nat44StaticMappingDetails) {
			if !strings.HasPrefix(m.Tag, ownedTag) {
				return
			}
			out = append(out, nodestate.VPPNATMapping{
				External: netip.AddrPortFrom(netip.AddrFrom4(m.ExternalIPAddress), m.ExternalPort),
				Protocol: stateProtocol(m.Protocol), Tag: m.Tag, Flags: natFlags(m.Flags),
				Locals: []nodestate.VPPNATLocal{{Address: netip.AddrPortFrom(netip.AddrFrom4(m.LocalIPAddress), m.LocalPort)}},
			})
		})
	if err != nil {
		return err
	}
	err = vppapi.Dump(ch, &nat44_ed.Nat44LbStaticMappingDump{},
		func() *nat44_ed.Nat44LbStaticMappingDetails { return &nat44_ed.Nat44LbStaticMappingDetails{} },
		func(m *nat44_ed.Nat44LbStaticMappingDetails) {
			if !strings.HasPrefix(m.Tag, ownedTag) {
				return
			}
			mp := nodestate.VPPNATMapping{
				External: netip.AddrPortFrom(netip.AddrFrom4(m.ExternalAddr), m.ExternalPort),
				Protocol: stateProtocol(m.Protocol), Tag: m.Tag, Flags: natFlags(m.Flags),
				Affinity: nodestate.Seconds(m.Affinity),
			}
			for _, l := range m.Locals {
				mp.Locals = append(mp.Locals, nodestate.VPPNATLocal{Address: netip.AddrPortFrom(netip.AddrFrom4(l.Addr), l.Port), Probability: l.Probability})
			}
			// VPP lists locals in its pool's order, which reuses slots.
			slices.SortFunc(mp.Locals, func(a, b nodestate.VPPNATLocal) int { return a.Address.Compare(b.Address) })
			out = append(out, mp)
		})
	if err != nil {
		return err
	}
	slices.SortFunc(out, func(a, b nodestate.VPPNATMapping) int {
		return cmp.Or(a.External.Addr().Compare(b.External.Addr()), cmp.Compare(a.Protocol, b.Protocol), cmp.Compare(a.External.Port(), b.External.Port()))
	})
	s.NATMappings = out
	return nil
}

func stateProtocol(p uint8) string {
	switch p {
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 132:
		return "SCTP"
	case 1:
		return "ICMP"
	}
	return fmt.Sprintf("%d", p)
}

// natFlags names a mapping's flags as VPP's CLI does.
func natFlags(f nat_types.NatConfigFlags) []string {
	var out []string
	for _, n := range []struct {
		flag nat_types.NatConfigFlags
		name string
	}{
		{nat_types.NAT_IS_TWICE_NAT, "twice-nat"},
		{nat_types.NAT_IS_SELF_TWICE_NAT, "self-twice-nat"},
		{nat_types.NAT_IS_OUT2IN_ONLY, "out2in-only"},
		{nat_types.NAT_IS_ADDR_ONLY, "addr-only"},
	} {
		if f&n.flag != 0 {
			out = append(out, n.name)
		}
	}
	return out
}
