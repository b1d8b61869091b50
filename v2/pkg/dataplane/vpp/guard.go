package vpp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/ip_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// The pod guard: messages only a router may send are dropped where a pod
// sends them. Source validation (source.go) checks who a packet claims to
// come from, not what it says; a pod may send an IPv6 router advertisement
// or redirect from its own address or from a link-local one (which it must
// be able to use for neighbour discovery), and VPP would route it to
// another pod or to the node. A receiver ignores such a message unless its
// hop limit is 255, which VPP's forwarding has decremented, but nothing a
// pod sends should depend on that: the guard drops ICMPv6 router
// advertisements (134) and redirects (137), and ICMP redirects (5), on
// every pod interface's input.
//
// It is an ACL of the ACL plugin, because the plugin finds the ICMP header
// behind IPv6 extension headers (a classifier matches fixed offsets, which
// a hop-by-hop header moves). VPP applies the first rule that matches
// across an interface's ACLs and denies what none matches, so the guard
// comes first in every pod interface's input list and holds only denials;
// where no owner (policies, services) has input ACLs on the pod, a second
// ACL that permits everything follows it. Both are made at every sync
// (adopted by their tags when VPP holds them) and put on each pod
// interface before it comes up.

// guardTagKind is the kind of the guard's ACL tags.
const guardTagKind = "vcoil-guard"

var (
	guardDenyTag   = formatversion.Tag(guardTagKind, "deny")
	guardPermitTag = formatversion.Tag(guardTagKind, "permit")
)

// ICMP types only routers send.
const (
	icmp4Redirect            = 5
	icmp6RouterAdvertisement = 134
	icmp6Redirect            = 137
)

var (
	anyIPv4 = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	anyIPv6 = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
)

// guardACLs are the guard's ACL indexes in this incarnation; ok is false
// until the sync made them.
type guardACLs struct {
	deny, permit uint32
	ok           bool
}

// GuardDenyRules are the rules of the guard's first ACL: every code of
// the router-only ICMP types, from any source to any destination.
func GuardDenyRules() []acl_types.ACLRule {
	icmp := func(all netip.Prefix, proto ip_types.IPProto, typ uint16) acl_types.ACLRule {
		return acl_types.ACLRule{
			IsPermit: acl_types.ACL_ACTION_API_DENY, SrcPrefix: vppapi.Prefix(all), DstPrefix: vppapi.Prefix(all), Proto: proto,
			SrcportOrIcmptypeFirst: typ, SrcportOrIcmptypeLast: typ, DstportOrIcmpcodeFirst: 0, DstportOrIcmpcodeLast: 255,
		}
	}
	return []acl_types.ACLRule{
		icmp(anyIPv6, ip_types.IP_API_PROTO_ICMP6, icmp6RouterAdvertisement),
		icmp(anyIPv6, ip_types.IP_API_PROTO_ICMP6, icmp6Redirect),
		icmp(anyIPv4, ip_types.IP_API_PROTO_ICMP, icmp4Redirect),
	}
}

// guardPermitRules permit everything of both families, without sessions.
func guardPermitRules() []acl_types.ACLRule {
	out := make([]acl_types.ACLRule, 0, 2)
	for _, all := range []netip.Prefix{anyIPv4, anyIPv6} {
		out = append(out, acl_types.ACLRule{
			IsPermit: acl_types.ACL_ACTION_API_PERMIT, SrcPrefix: vppapi.Prefix(all), DstPrefix: vppapi.Prefix(all),
			SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeLast: 65535,
		})
	}
	return out
}

// ensureGuard makes VPP hold the guard's two ACLs with their rules: it
// adopts the ones it finds by tag (replacing their rules in place when they
// differ, so that the interfaces' lists stay valid), deletes extra copies,
// and adds what is missing. A guard tag of a newer format stops the sync.
// The caller holds d.mu.
func (d *driver) ensureGuard() error {
	d.guard = guardACLs{}
	found := map[string][]*acl.ACLDetails{}
	var newer []error
	err := vppapi.Dump(d.ch, &acl.ACLDump{ACLIndex: ^uint32(0)}, func() *acl.ACLDetails { return &acl.ACLDetails{} }, func(m *acl.ACLDetails) {
		kind, _, _, ok := formatversion.ParseTag(m.Tag)
		if !ok || kind != guardTagKind {
			return
		}
		if err := formatversion.CheckTag(fmt.Sprintf("VPP ACL %d", m.ACLIndex), m.Tag); err != nil {
			newer = append(newer, err)
			return
		}
		found[m.Tag] = append(found[m.Tag], m)
	})
	if err != nil {
		return fmt.Errorf("pod guard: list VPP's ACLs: %w", err)
	}
	if err := errors.Join(newer...); err != nil {
		return fmt.Errorf("pod guard: %w", err)
	}
	var g guardACLs
	for _, want := range []struct {
		tag   string
		rules []acl_types.ACLRule
		index *uint32
	}{{guardDenyTag, GuardDenyRules(), &g.deny}, {guardPermitTag, guardPermitRules(), &g.permit}} {
		have := found[want.tag]
		index := ^uint32(0)
		if len(have) > 0 {
			index = have[0].ACLIndex
		}
		if len(have) == 0 || !SameACLRules(have[0].R, want.rules) {
			reply := &acl.ACLAddReplaceReply{}
			req := &acl.ACLAddReplace{ACLIndex: index, Tag: want.tag, Count: uint32(len(want.rules)), R: want.rules}
			if err := vppapi.Call(d.ch, req, reply); err != nil {
				return fmt.Errorf("pod guard: write the ACL %q: %w", want.tag, err)
			}
			index = reply.ACLIndex
		}
		*want.index = index
		for _, extra := range have[min(1, len(have)):] {
			// A copy no interface should use: an interface that still does
			// makes VPP refuse, and the copy stays until the next sync.
			if err := vppapi.Call(d.ch, &acl.ACLDel{ACLIndex: extra.ACLIndex}, &acl.ACLDelReply{}); err != nil {
				d.log.Info("cannot delete a second copy of a pod guard ACL", "acl", extra.ACLIndex, "tag", want.tag, "error", err.Error())
			}
		}
	}
	if d.cfg.StatsSocket != "" {
		// The guard's drops are counted from its rules' counters, which
		// VPP keeps only while the plugin's counters are on. VPP 25.10
		// answers with the message ID of acl_del_reply (its handler uses
		// the wrong one; both hold just a retval).
		if err := vppapi.Call(d.ch, &acl.ACLStatsIntfCountersEnable{Enable: true}, &acl.ACLDelReply{}); err != nil {
			return fmt.Errorf("pod guard: enable the ACL counters: %w", err)
		}
	}
	g.ok = true
	d.guard = g
	return nil
}

// podInput is a pod interface's input list: the guard, then the owners'
// input ACLs in, or the guard's permit when in is empty.
func (g guardACLs) podInput(in []uint32) []uint32 {
	out := make([]uint32, 0, len(in)+2)
	out = append(out, g.deny)
	if len(in) == 0 {
		return append(out, g.permit)
	}
	return append(out, in...)
}

// guarded reports whether a pod interface's input list starts with the
// guard.
func (g guardACLs) guarded(in []uint32) bool {
	return g.ok && len(in) > 0 && in[0] == g.deny
}

// withoutGuard is an input list without the guard's ACLs.
func (g guardACLs) withoutGuard(in []uint32) []uint32 {
	return slices.DeleteFunc(slices.Clone(in), func(x uint32) bool { return x == g.deny || x == g.permit })
}

// SameACLRules compares ACL rules by meaning: VPP may return the unused
// bytes of an IPv4 address's union differently from how they were sent.
func SameACLRules(a, b []acl_types.ACLRule) bool {
	return slices.EqualFunc(a, b, func(x, y acl_types.ACLRule) bool {
		return CanonicalACLRule(x) == CanonicalACLRule(y)
	})
}

// CanonicalACLRule is r with the unused bytes of its IPv4 prefixes'
// unions zeroed, as VPP does not keep them.
func CanonicalACLRule(r acl_types.ACLRule) acl_types.ACLRule {
	r.SrcPrefix, r.DstPrefix = canonicalPrefix(r.SrcPrefix), canonicalPrefix(r.DstPrefix)
	return r
}

func canonicalPrefix(p ip_types.Prefix) ip_types.Prefix {
	if p.Address.Af == ip_types.ADDRESS_IP4 {
		var u ip_types.AddressUnion
		u.SetIP4(p.Address.Un.GetIP4())
		p.Address.Un = u
	}
	return p
}
