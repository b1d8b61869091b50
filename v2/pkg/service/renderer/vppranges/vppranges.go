// Package vppranges keeps the loadBalancerSourceRanges ACL of vcoil's VPP
// service renderers (NAT44 and cnat): one ACL, tagged, on the input side of
// the uplink and the host interconnect, where the ACL plugin sees a
// LoadBalancer IP before either plugin translates it.
package vppranges

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/ip_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Dataplane sets ACL lists of the node's interfaces (vpp.Dataplane does).
type Dataplane interface {
	SetInterfaceACLs(ctx context.Context, inc vpp.Incarnation, iface vpp.NodeInterface, owner vpp.ACLOwner, input []uint32) error
}

// ACL is the source-ranges ACL of one renderer.
type ACL struct {
	dp  Dataplane
	who string
	log logr.Logger
	st  state
	// lost: a write failed, so what VPP holds is unknown: the next Sync
	// finds the ACL again.
	lost bool
}

// New returns the ACL of the renderer named who (for errors).
func New(dp Dataplane, who string, log logr.Logger) *ACL {
	return &ACL{dp: dp, who: who, log: log}
}

// Forget drops what the ACL knows of VPP (a new VPP incarnation: its ACL
// indexes died with the old one).
func (a *ACL) Forget() { a.st = state{} }

// TagKind is the first word of the ACL's tag.
const TagKind = aclTagKind

// Messages are the ACL requests Sync sends, with their replies and the
// details of its dump.
func Messages() []api.Message {
	return []api.Message{
		&acl.ACLDump{}, &acl.ACLDetails{},
		&acl.ACLAddReplace{}, &acl.ACLAddReplaceReply{},
		&acl.ACLDel{}, &acl.ACLDelReply{},
	}
}

// aclTag marks the services' one source-ranges ACL; at most one ACL with it is
// vcoil's, the others are left alone. An ACL an earlier vcoild tagged in
// format 1 ("vcoil-svc-source-ranges") is adopted as it is; one of a
// newer format stops the sync.
var aclTag = formatversion.Tag(aclTagKind)

const aclTagKind = "vcoil-svc-source-ranges"

// state is the ACL in the current incarnation.
type state struct {
	// exists: VPP holds the ACL at index with rules.
	exists bool
	index  uint32
	rules  []acl_types.ACLRule
	// applied: the outside interfaces' lists hold index.
	applied bool
}

// Rules are the rules of the loadBalancerSourceRanges ACL (nil when no
// service has ranges): for each service with ranges, each of its
// LoadBalancer IPs (IPv4 ones only unless ipv6) and each TCP or UDP port, a
// permit and reflect from each range of the address's family to the
// LoadBalancer IP and port, then a deny of every other source of that
// family (a service without ranges of a family drops every client of it,
// as kube-proxy does); last, vpp.ReflectiveRules, which permit
// everything else of both families: the ACL plugin denies what no rule
// matches, and the input ACL sees every packet of the outside interfaces.
//
// The input ACL runs before NAT44-ED's out2in node, and before the FIB
// lookup where cnat translates traffic from the uplink, so it sees the
// LoadBalancer IP before translation; neither plugin has a source filter.
// The driver puts it before the policy renderer's reflective ACL on the
// same interfaces, which it would otherwise never reach (VPP applies the
// first rule that matches across an interface's ACLs). It therefore
// records the sessions that ACL would have, which let replies pass the
// policies' global table on the interfaces' output: its last rules are
// the reflective ACL's (without them, an egress-isolated pod could not
// answer an outside client that reaches it by its own address), and an
// admitted client's packets are reflected too, so that its connections
// get a session as they would without ranges. Every packet to a
// LoadBalancer IP and port comes from a client of the service (the
// service opens no connection from that address and port), so
// reflecting them all, not only TCP SYNs, records no session for a reply.
func Rules(services map[service.ID]*service.Service, ranged map[service.ID]bool, ipv6 bool) []acl_types.ACLRule {
	if len(ranged) == 0 {
		return nil
	}
	var rules []acl_types.ACLRule
	for _, id := range slices.SortedFunc(maps.Keys(ranged), service.ID.Compare) {
		s := services[id]
		var from []netip.Prefix
		for _, p := range s.LoadBalancerSourceRanges {
			if p.Addr().Is4() || ipv6 {
				from = append(from, p.Masked())
			}
		}
		slices.SortFunc(from, func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		})
		from = slices.Compact(from)
		for _, lb := range s.LoadBalancerIPs {
			if !lb.Is4() && !ipv6 {
				continue
			}
			to := netip.PrefixFrom(lb, lb.BitLen())
			any := netip.PrefixFrom(netip.IPv4Unspecified(), 0)
			if lb.Is6() {
				any = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
			}
			for i := range s.Ports {
				proto, ok := protoOf(s.Ports[i].Protocol)
				if !ok {
					continue
				}
				port := s.Ports[i].Port
				for _, src := range from {
					if src.Addr().Is4() == lb.Is4() {
						rules = append(rules, portRule(acl_types.ACL_ACTION_API_PERMIT_REFLECT, src, to, proto, port))
					}
				}
				rules = append(rules, portRule(acl_types.ACL_ACTION_API_DENY, any, to, proto, port))
			}
		}
	}
	return append(rules, vpp.ReflectiveRules()...)
}

func portRule(action acl_types.ACLAction, src, dst netip.Prefix, proto uint8, port uint16) acl_types.ACLRule {
	return acl_types.ACLRule{
		IsPermit: action, SrcPrefix: vppapi.Prefix(src), DstPrefix: vppapi.Prefix(dst), Proto: ip_types.IPProto(proto),
		SrcportOrIcmptypeFirst: 0, SrcportOrIcmptypeLast: 65535,
		DstportOrIcmpcodeFirst: port, DstportOrIcmpcodeLast: port,
	}
}

// Sync makes VPP hold the source-ranges ACL with the rules want (from
// Rules) on the outside interfaces (input side, through the dataplane,
// which merges it with the policy renderer's ACLs), or neither the ACL nor
// its use when want is nil. The ACL is replaced in place when its rules change, so that the
// interfaces' lists stay as they are. full: find the ACL by its tag (after
// a restart of vcoild or of VPP) and set the interfaces' lists again.
func (a *ACL) Sync(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces, want []acl_types.ACLRule, full bool) error {
	if a.lost {
		full = true
	}
	if full {
		if err := a.find(ch); err != nil {
			return err
		}
	}
	if want == nil {
		if full || a.st.applied {
			if err := a.setInterfaceACLs(ctx, ifs, []uint32{}); err != nil {
				return err
			}
			a.st.applied = false
		}
		if a.st.exists {
			if err := vppapi.Call(ch, &acl.ACLDel{ACLIndex: a.st.index}, &acl.ACLDelReply{}); err != nil {
				return fmt.Errorf("%s: delete the source-ranges ACL %d: %w", a.who, a.st.index, err)
			}
			a.st = state{}
		}
		return nil
	}
	if !a.st.exists || !vpp.SameACLRules(a.st.rules, want) {
		index := ^uint32(0)
		if a.st.exists {
			index = a.st.index
		}
		reply := &acl.ACLAddReplaceReply{}
		req := &acl.ACLAddReplace{ACLIndex: index, Tag: aclTag, Count: uint32(len(want)), R: want}
		if err := vppapi.Call(ch, req, reply); err != nil {
			// Whether VPP changed the ACL is unknown: find it again next time.
			a.lost = true
			return fmt.Errorf("%s: write the source-ranges ACL (%d rules): %w", a.who, len(want), err)
		}
		if !a.st.exists || reply.ACLIndex != a.st.index {
			a.st.applied = false
		}
		a.st = state{exists: true, index: reply.ACLIndex, rules: want, applied: a.st.applied}
	}
	if full || !a.st.applied {
		if err := a.setInterfaceACLs(ctx, ifs, []uint32{a.st.index}); err != nil {
			return err
		}
		a.st.applied = true
	}
	a.lost = false
	return nil
}

// find adopts the ACL with the tag that VPP holds, if any.
func (a *ACL) find(ch api.Channel) error {
	a.st = state{}
	var others []uint32
	var newer []error
	err := vppapi.Dump(ch, &acl.ACLDump{ACLIndex: ^uint32(0)}, func() *acl.ACLDetails { return &acl.ACLDetails{} }, func(d *acl.ACLDetails) {
		kind, _, _, ok := formatversion.ParseTag(d.Tag)
		if !ok || kind != aclTagKind {
			return
		}
		if err := formatversion.CheckTag(fmt.Sprintf("VPP ACL %d", d.ACLIndex), d.Tag); err != nil {
			newer = append(newer, err)
			return
		}
		if a.st.exists {
			others = append(others, d.ACLIndex)
			return
		}
		a.st = state{exists: true, index: d.ACLIndex, rules: d.R}
	})
	if err != nil {
		a.st = state{}
		return fmt.Errorf("%s: dump ACLs: %w", a.who, err)
	}
	if len(newer) > 0 {
		a.st = state{}
		return fmt.Errorf("%s: %w", a.who, errors.Join(newer...))
	}
	if len(others) > 0 {
		a.log.Info("More than one ACL with the source-ranges tag; using the first", "used", a.st.index, "others", others)
	}
	return nil
}

func (a *ACL) setInterfaceACLs(ctx context.Context, ifs vpp.NodeInterfaces, input []uint32) error {
	for _, c := range []struct {
		iface vpp.NodeInterface
		sw    uint32
	}{{vpp.Uplink, ifs.Uplink}, {vpp.HostInterconnect, ifs.HostInterconnect}} {
		if c.sw == vpp.NoInterface {
			continue
		}
		if err := a.dp.SetInterfaceACLs(ctx, ifs.Incarnation, c.iface, vpp.ACLServices, input); err != nil {
			return fmt.Errorf("%s: set the source-ranges ACL %v on the %s interface: %w", a.who, input, c.iface, err)
		}
	}
	return nil
}

// protoOf is the IP protocol of a TCP or UDP port (SCTP ports have no
// translation in either plugin, so no rule).
func protoOf(p service.Protocol) (uint8, bool) {
	switch p {
	case service.TCP:
		return 6, true
	case service.UDP:
		return 17, true
	}
	return 0, false
}
