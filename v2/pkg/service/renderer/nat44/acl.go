package nat44

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/ip_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// aclTag marks the renderer's one ACL; at most one ACL with it is
// vcoil's, the others are left alone. An ACL an earlier vcoild tagged in
// format 1 ("vcoil-svc-source-ranges") is adopted as it is; one of a
// newer format stops the sync.
var aclTag = formatversion.Tag(aclTagKind)

const aclTagKind = "vcoil-svc-source-ranges"

// aclState is the renderer's ACL in the current incarnation.
type aclState struct {
	// exists: VPP holds the ACL at index with rules.
	exists bool
	index  uint32
	rules  []acl_types.ACLRule
	// applied: the outside interfaces' lists hold index.
	applied bool
}

// sourceRangeRules are the rules of the loadBalancerSourceRanges ACL
// (nil when no service has ranges): for each service with ranges, each of
// its IPv4 LoadBalancer IPs and each TCP or UDP port, a permit and reflect
// from each IPv4 range to the LoadBalancer IP and port, then a deny of
// every other source (a service without IPv4 ranges drops every IPv4
// client, as kube-proxy does); last, vpp.ReflectiveRules, which permit
// everything else of both families: the ACL plugin denies what no rule
// matches, and the input ACL sees every packet of the outside interfaces.
//
// The input ACL runs before NAT44-ED's out2in node, so it sees the
// LoadBalancer IP before translation; NAT44-ED itself has no source filter.
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
func sourceRangeRules(services map[service.ID]*service.Service, ranged map[service.ID]bool) []acl_types.ACLRule {
	if len(ranged) == 0 {
		return nil
	}
	var rules []acl_types.ACLRule
	for _, id := range slices.SortedFunc(maps.Keys(ranged), service.ID.Compare) {
		s := services[id]
		var from []netip.Prefix
		for _, p := range s.LoadBalancerSourceRanges {
			if p.Addr().Is4() {
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
			if !lb.Is4() {
				continue
			}
			to := netip.PrefixFrom(lb, 32)
			for i := range s.Ports {
				proto, ok := protoOf(s.Ports[i].Protocol)
				if !ok {
					continue
				}
				port := s.Ports[i].Port
				for _, src := range from {
					rules = append(rules, portRule(acl_types.ACL_ACTION_API_PERMIT_REFLECT, src, to, proto, port))
				}
				rules = append(rules, portRule(acl_types.ACL_ACTION_API_DENY, netip.PrefixFrom(netip.IPv4Unspecified(), 0), to, proto, port))
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

// syncACL makes VPP hold the source-ranges ACL on the outside interfaces
// (input side, through the dataplane, which merges it with the policy
// renderer's ACLs), or neither the ACL nor its use when no service has
// ranges. The ACL is replaced in place when its rules change, so that the
// interfaces' lists stay as they are. full: find the ACL by its tag (after
// a restart of vcoild or of VPP) and set the interfaces' lists again.
func (r *Renderer) syncACL(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces, full bool) error {
	want := sourceRangeRules(r.services, r.ranged)
	if full {
		if err := r.findACL(ch); err != nil {
			return err
		}
	}
	if want == nil {
		if full || r.acl.applied {
			if err := r.setInterfaceACLs(ctx, ifs, []uint32{}); err != nil {
				return err
			}
			r.acl.applied = false
		}
		if r.acl.exists {
			if err := vppapi.Call(ch, &acl.ACLDel{ACLIndex: r.acl.index}, &acl.ACLDelReply{}); err != nil {
				return fmt.Errorf("NAT44 service renderer: delete the source-ranges ACL %d: %w", r.acl.index, err)
			}
			r.acl = aclState{}
		}
		return nil
	}
	if !r.acl.exists || !vpp.SameACLRules(r.acl.rules, want) {
		index := ^uint32(0)
		if r.acl.exists {
			index = r.acl.index
		}
		reply := &acl.ACLAddReplaceReply{}
		req := &acl.ACLAddReplace{ACLIndex: index, Tag: aclTag, Count: uint32(len(want)), R: want}
		if err := vppapi.Call(ch, req, reply); err != nil {
			// Whether VPP changed the ACL is unknown: find it again next time.
			r.synced = false
			return fmt.Errorf("NAT44 service renderer: write the source-ranges ACL (%d rules, %d services): %w", len(want), len(r.ranged), err)
		}
		if !r.acl.exists || reply.ACLIndex != r.acl.index {
			r.acl.applied = false
		}
		r.acl = aclState{exists: true, index: reply.ACLIndex, rules: want, applied: r.acl.applied}
	}
	if full || !r.acl.applied {
		if err := r.setInterfaceACLs(ctx, ifs, []uint32{r.acl.index}); err != nil {
			return err
		}
		r.acl.applied = true
	}
	return nil
}

// findACL adopts the ACL with the renderer's tag that VPP holds, if any.
func (r *Renderer) findACL(ch api.Channel) error {
	r.acl = aclState{}
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
		if r.acl.exists {
			others = append(others, d.ACLIndex)
			return
		}
		r.acl = aclState{exists: true, index: d.ACLIndex, rules: d.R}
	})
	if err != nil {
		r.acl = aclState{}
		return fmt.Errorf("NAT44 service renderer: dump ACLs: %w", err)
	}
	if len(newer) > 0 {
		r.acl = aclState{}
		return fmt.Errorf("NAT44 service renderer: %w", errors.Join(newer...))
	}
	if len(others) > 0 {
		r.log.Info("More than one ACL with the source-ranges tag; using the first", "used", r.acl.index, "others", others)
	}
	return nil
}

func (r *Renderer) setInterfaceACLs(ctx context.Context, ifs vpp.NodeInterfaces, input []uint32) error {
	for _, c := range []struct {
		iface vpp.NodeInterface
		sw    uint32
	}{{vpp.Uplink, ifs.Uplink}, {vpp.HostInterconnect, ifs.HostInterconnect}} {
		if c.sw == vpp.NoInterface {
			continue
		}
		if err := r.dp.SetInterfaceACLs(ctx, ifs.Incarnation, c.iface, vpp.ACLServices, input); err != nil {
			return fmt.Errorf("NAT44 service renderer: set the source-ranges ACL %v on the %s interface: %w", input, c.iface, err)
		}
	}
	return nil
}
