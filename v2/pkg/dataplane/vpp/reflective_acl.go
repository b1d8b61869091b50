package vpp

import (
	"net/netip"

	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/ip_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// TCP flags the reflective rules look at.
const (
	tcpSYN = 0x02
	tcpACK = 0x10
)

// ReflectiveRules are the rules that record the sessions which let replies
// pass an interface's output ACLs, for each family: permit and reflect
// (record a session for) a TCP SYN without ACK, the first packet of a
// connection the interface's side opens; permit every other TCP packet
// without a session; permit and reflect every other protocol.
//
// They are the policy renderer's reflective ACL, and they end the services
// renderer's source-ranges ACL, which comes before it on the node
// interfaces' input (see ACLOwner): VPP applies the first rule that matches
// across an interface's ACLs, so that ACL must record sessions exactly as
// the reflective ACL behind it would have.
//
// Replies to connections the other side opened must not make sessions: VPP
// matches a session in both directions on its interface, so a session made
// by a pod's reply would let the client's later packets bypass the pod's
// output ACL, and a connection that a new policy denies would go on (seen
// on VPP 25.10; docs/policy.md#vpp-acls). UDP and other protocols have no
// such first packet: their replies make sessions, and a denied UDP flow
// passes until its session idles out.
func ReflectiveRules() []acl_types.ACLRule {
	out := make([]acl_types.ACLRule, 0, 6)
	for _, all := range []netip.Prefix{netip.PrefixFrom(netip.IPv4Unspecified(), 0), netip.PrefixFrom(netip.IPv6Unspecified(), 0)} {
		r := acl_types.ACLRule{
			SrcPrefix: vppapi.Prefix(all), DstPrefix: vppapi.Prefix(all),
			SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeLast: 65535,
		}
		syn, tcp, other := r, r, r
		syn.IsPermit, syn.Proto, syn.TCPFlagsMask, syn.TCPFlagsValue = acl_types.ACL_ACTION_API_PERMIT_REFLECT, ip_types.IP_API_PROTO_TCP, tcpSYN|tcpACK, tcpSYN
		tcp.IsPermit, tcp.Proto = acl_types.ACL_ACTION_API_PERMIT, ip_types.IP_API_PROTO_TCP
		other.IsPermit = acl_types.ACL_ACTION_API_PERMIT_REFLECT
		out = append(out, syn, tcp, other)
	}
	return out
}
