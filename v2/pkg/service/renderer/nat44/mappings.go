package nat44

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

func ip4(a netip.Addr) ip_types.IP4Address { return ip_types.IP4Address(a.As4()) }

func fromIP4(a ip_types.IP4Address) netip.Addr { return netip.AddrFrom4(a) }

// noInterface is the external_sw_if_index of a mapping whose external
// address is given (not taken from an interface).
const noInterface = interface_types.InterfaceIndex(^uint32(0))

// dumpMappings reads the static mappings VPP holds: vcoil's (by tag) keyed
// by frontend, with their tags in the current format, and the keys of the
// others, which the renderer leaves alone. A tag of a newer format fails
// the dump (formatversion.NewerError) before the renderer changes anything.
func dumpMappings(ch api.Channel) (ours map[mappingKey]*mapping, foreign map[mappingKey]string, err error) {
	ours, foreign = map[mappingKey]*mapping{}, map[mappingKey]string{}
	var newer []error
	err = vppapi.Dump(ch, &nat44_ed.Nat44LbStaticMappingDump{}, func() *nat44_ed.Nat44LbStaticMappingDetails {
		return &nat44_ed.Nat44LbStaticMappingDetails{}
	}, func(d *nat44_ed.Nat44LbStaticMappingDetails) {
		k := mappingKey{fromIP4(d.ExternalAddr), d.Protocol, d.ExternalPort}
		if !isOurTag(d.Tag) {
			foreign[k] = d.Tag
			return
		}
		if err := formatversion.CheckTag("VPP load-balancing static mapping "+k.String(), d.Tag); err != nil {
			newer = append(newer, err)
			return
		}
		m := &mapping{Kind: kindLB, Flags: d.Flags, Tag: currentTag(d.Tag), Affinity: tagAffinity(d.Tag)}
		for _, l := range d.Locals {
			m.Locals = append(m.Locals, local{Addr: fromIP4(l.Addr), Port: l.Port, Probability: l.Probability})
		}
		// VPP lists locals in the order of its pool, which reuses the
		// slots of removed ones.
		slices.SortFunc(m.Locals, compareLocals)
		ours[k] = m
	})
	if err != nil {
		return nil, nil, err
	}
	err = vppapi.Dump(ch, &nat44_ed.Nat44StaticMappingDump{}, func() *nat44_ed.Nat44StaticMappingDetails {
		return &nat44_ed.Nat44StaticMappingDetails{}
	}, func(d *nat44_ed.Nat44StaticMappingDetails) {
		k := mappingKey{fromIP4(d.ExternalIPAddress), d.Protocol, d.ExternalPort}
		if !isOurTag(d.Tag) {
			foreign[k] = d.Tag
			return
		}
		if err := formatversion.CheckTag("VPP static mapping "+k.String(), d.Tag); err != nil {
			newer = append(newer, err)
			return
		}
		l := local{Addr: fromIP4(d.LocalIPAddress), Port: d.LocalPort}
		m := &mapping{Kind: kindStatic, Flags: d.Flags, Tag: currentTag(d.Tag), Locals: []local{l}}
		switch l.Addr {
		case vpp.RejectSinkIPv4:
			m.Kind = kindReject
		case vpp.DropSinkIPv4:
			m.Kind = kindDrop
		}
		ours[k] = m
	})
	if err != nil {
		return nil, nil, err
	}
	if len(newer) > 0 {
		return nil, nil, errors.Join(newer...)
	}
	return ours, foreign, nil
}

// op is one request of a sync with what it is about, for errors (the text
// is made only when one is needed).
type op struct {
	req, reply api.Message
	// del: VPP answering NO_SUCH_ENTRY means it is already done.
	del bool
	key mappingKey
	m   *mapping
	// backend: the request adds or deletes this local of m.
	backend *local
}

// what says what the request does, naming the mapping and its service.
func (o *op) what() string {
	verb := "add"
	if o.del {
		verb = "delete"
	}
	if o.backend != nil {
		return fmt.Sprintf("%s backend %s of LB mapping %s of %s", verb, o.backend.key(), o.key, o.m.name())
	}
	return fmt.Sprintf("%s %s mapping %s of %s", verb, o.m.Kind, o.key, o.m.name())
}

func addMapping(k mappingKey, m *mapping) op {
	if m.Kind == kindLB {
		req := &nat44_ed.Nat44AddDelLbStaticMapping{
			IsAdd: true, Flags: m.Flags, ExternalAddr: ip4(k.Addr), ExternalPort: k.Port, Protocol: k.Proto,
			Affinity: m.Affinity, Tag: m.Tag, LocalNum: uint32(len(m.Locals)),
			Locals: make([]nat44_ed.Nat44LbAddrPort, len(m.Locals)),
		}
		for i, l := range m.Locals {
			req.Locals[i] = nat44_ed.Nat44LbAddrPort{Addr: ip4(l.Addr), Port: l.Port, Probability: l.Probability}
		}
		return op{req: req, reply: &nat44_ed.Nat44AddDelLbStaticMappingReply{}, key: k, m: m}
	}
	l := m.Locals[0]
	return op{req: &nat44_ed.Nat44AddDelStaticMappingV2{
		IsAdd: true, Flags: m.Flags, LocalIPAddress: ip4(l.Addr), LocalPort: l.Port,
		ExternalIPAddress: ip4(k.Addr), ExternalPort: k.Port, Protocol: k.Proto,
		ExternalSwIfIndex: noInterface, Tag: m.Tag,
	}, reply: &nat44_ed.Nat44AddDelStaticMappingV2Reply{}, key: k, m: m}
}

// delMapping deletes m with the flags it was added with: VPP checks them
// (and removes an inside-to-outside key unless OUT2IN_ONLY is among them).
func delMapping(k mappingKey, m *mapping) op {
	if m.Kind == kindLB {
		return op{req: &nat44_ed.Nat44AddDelLbStaticMapping{
			Flags: m.Flags, ExternalAddr: ip4(k.Addr), ExternalPort: k.Port, Protocol: k.Proto,
		}, reply: &nat44_ed.Nat44AddDelLbStaticMappingReply{}, del: true, key: k, m: m}
	}
	l := m.Locals[0]
	return op{req: &nat44_ed.Nat44AddDelStaticMappingV2{
		Flags: m.Flags, LocalIPAddress: ip4(l.Addr), LocalPort: l.Port,
		ExternalIPAddress: ip4(k.Addr), ExternalPort: k.Port, Protocol: k.Proto,
		ExternalSwIfIndex: noInterface,
	}, reply: &nat44_ed.Nat44AddDelStaticMappingV2Reply{}, del: true, key: k, m: m}
}

// peakSum is the largest sum of probabilities the mapping reaches while
// change adds the locals added, then replaces the changed ones, then
// removes the others: VPP must never hold more than its u8 can (see
// maxProbabilitySum).
func peakSum(old *mapping, added, changed []local) int {
	sum := 0
	for _, l := range old.Locals {
		sum += int(l.Probability)
	}
	for _, l := range added {
		sum += int(l.Probability)
	}
	peak := sum
	for _, l := range changed {
		was := old.Locals[slices.IndexFunc(old.Locals, func(o local) bool { return o.key() == l.key() })]
		sum += int(l.Probability) - int(was.Probability)
		peak = max(peak, sum)
	}
	return peak
}

func addDelLocal(k mappingKey, m *mapping, l local, isAdd bool) op {
	return op{req: &nat44_ed.Nat44LbStaticMappingAddDelLocal{
		IsAdd: isAdd, ExternalAddr: ip4(k.Addr), ExternalPort: k.Port, Protocol: k.Proto,
		Local: nat44_ed.Nat44LbAddrPort{Addr: ip4(l.Addr), Port: l.Port, Probability: l.Probability},
	}, reply: &nat44_ed.Nat44LbStaticMappingAddDelLocalReply{}, del: !isAdd, key: k, m: m, backend: &l}
}

// change appends the requests that turn old into new at k (either may be
// nil) to ops.
//
// Backends of an LB mapping change through
// nat44_lb_static_mapping_add_del_local, which keeps the sessions of the
// other backends: added ones first, then removed ones, since VPP refuses
// to remove a local when fewer than three are left (adding first keeps two
// or more). VPP refuses to add a local that exists, so a changed
// probability is the removal of the local and its addition with the new
// one (the removal deletes that backend's sessions).
//
// The mapping is deleted and added again (all its sessions go) where VPP
// leaves no other way: between LB and plain (two and one backends, whose
// key is one), between two plain mappings (VPP has no change of a plain
// mapping), when flags, affinity or tag change, when a probability changes
// on a mapping of two locals, and when a mapping with ClientIP affinity
// loses a backend: VPP keeps its affinity records until the mapping is
// deleted, and they would keep sending clients to the gone backend; and
// when adding before removing would take the sum of probabilities beyond
// what VPP can hold. The deletion comes first, as it frees the key for the
// addition; both go on one channel in order, and VPP handles them in order.
func change(ops []op, k mappingKey, old, new *mapping) []op {
	switch {
	case old.equal(new):
		return ops
	case old == nil:
		return append(ops, addMapping(k, new))
	case new == nil:
		return append(ops, delMapping(k, old))
	}
	if old.Kind != kindLB || new.Kind != kindLB || old.Flags != new.Flags || old.Affinity != new.Affinity || old.Tag != new.Tag {
		return append(ops, delMapping(k, old), addMapping(k, new))
	}
	var added, removed, changed []local
	i, j := 0, 0
	for i < len(old.Locals) || j < len(new.Locals) {
		switch {
		case j == len(new.Locals) || (i < len(old.Locals) && compareLocals(old.Locals[i], new.Locals[j]) < 0):
			removed = append(removed, old.Locals[i])
			i++
		case i == len(old.Locals) || compareLocals(old.Locals[i], new.Locals[j]) > 0:
			added = append(added, new.Locals[j])
			j++
		default:
			if old.Locals[i].Probability != new.Locals[j].Probability {
				changed = append(changed, new.Locals[j])
			}
			i++
			j++
		}
	}
	lost := len(removed) > 0 || len(changed) > 0
	if (old.Affinity > 0 && lost) || (len(changed) > 0 && len(old.Locals)+len(added) < 3) ||
		peakSum(old, added, changed) > maxProbabilitySum {
		return append(ops, delMapping(k, old), addMapping(k, new))
	}
	for _, l := range added {
		ops = append(ops, addDelLocal(k, new, l, true))
	}
	for _, l := range changed {
		was := l
		was.Probability = old.Locals[slices.IndexFunc(old.Locals, func(o local) bool { return o.key() == l.key() })].Probability
		ops = append(ops, addDelLocal(k, new, was, false), addDelLocal(k, new, l, true))
	}
	for _, l := range removed {
		ops = append(ops, addDelLocal(k, new, l, false))
	}
	return ops
}
