package acl

import (
	"fmt"
	"net/netip"

	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/ip_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// IP protocol numbers of the rules' protocols; 0 is every protocol.
var protocolNumbers = map[renderer.Protocol]ip_types.IPProto{
	renderer.ProtocolAny:  0,
	renderer.ProtocolTCP:  ip_types.IP_API_PROTO_TCP,
	renderer.ProtocolUDP:  ip_types.IP_API_PROTO_UDP,
	renderer.ProtocolSCTP: ip_types.IP_API_PROTO_SCTP,
}

var (
	anyIPv4 = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	anyIPv6 = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
)

// aclRules translates a table, in order, into the rules of one ACL, which
// VPP applies first match first, as the table's meaning requires.
//
// A VPP rule matches one family: its source and destination prefixes must
// be of the same one. A network that is "any" (either family) therefore
// becomes the other side's family's 0/0, and a rule whose both networks
// are "any" becomes two rules, IPv4 then IPv6; they match disjoint packets,
// so the order of the table is kept. A rule for every protocol is
// protocol 0, for which VPP compares no ports: it matches ICMP and every
// other protocol too.
func aclRules(rules []renderer.Rule) ([]acl_types.ACLRule, error) {
	out := make([]acl_types.ACLRule, 0, len(rules)+1)
	for i := range rules {
		r := &rules[i]
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("rule %d: %w", i, err)
		}
		for _, v4 := range familiesOf(r) {
			all := anyIPv6
			if v4 {
				all = anyIPv4
			}
			src, dst := r.SrcNetwork, r.DstNetwork
			if !src.IsValid() {
				src = all
			}
			if !dst.IsValid() {
				dst = all
			}
			a := acl_types.ACLRule{
				IsPermit:  acl_types.ACL_ACTION_API_DENY,
				SrcPrefix: vppapi.Prefix(src), DstPrefix: vppapi.Prefix(dst),
				Proto:                  protocolNumbers[r.Protocol],
				SrcportOrIcmptypeFirst: r.SrcPort.First, SrcportOrIcmptypeLast: r.SrcPort.Last,
				DstportOrIcmpcodeFirst: r.DstPort.First, DstportOrIcmpcodeLast: r.DstPort.Last,
			}
			if r.Action == renderer.ActionPermit {
				a.IsPermit = acl_types.ACL_ACTION_API_PERMIT
			}
			out = append(out, a)
		}
	}
	return out, nil
}

// familiesOf are the families of the ACL rules rule r becomes, in order
// (is IPv4).
func familiesOf(r *renderer.Rule) []bool {
	switch {
	case r.SrcNetwork.IsValid():
		return []bool{r.SrcNetwork.Addr().Is4()}
	case r.DstNetwork.IsValid():
		return []bool{r.DstNetwork.Addr().Is4()}
	}
	return []bool{true, false}
}

// aclRuleCount is len(familiesOf(r)), without making the slice: the
// budget and the counters' origins count every rule of every table.
func aclRuleCount(r *renderer.Rule) int {
	if r.SrcNetwork.IsValid() || r.DstNetwork.IsValid() {
		return 1
	}
	return 2
}

// contentKey identifies an ACL's rules, for adopting after a restart of
// vcoild the ACLs that VPP already holds with the rules a table needs.
func contentKey(rules []acl_types.ACLRule) string {
	b := make([]byte, 0, len(rules)*48)
	for _, r := range rules {
		b = fmt.Appendf(b, "%v;", vpp.CanonicalACLRule(r))
	}
	return string(b)
}
