package tables

import (
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// space is a set of connections between two fixed addresses, described by
// protocol and destination port: what a rule list permits for one pair of
// peers. CombineRules of the Contiv/VPP design works on sets of TCP and UDP
// ports (docs/background.md#combinerules-and-local-tables); vcoil
// adds SCTP and "every protocol", which is the only way a rule list permits
// protocols without ports.
type space struct {
	// all is every protocol and every port, port-less protocols included.
	all bool
	// ports holds, per protocol (index protocol-1: TCP, UDP, SCTP), sorted,
	// disjoint and non-adjacent ranges.
	ports [3][]renderer.PortRange
}

// rules is the number of rules appendRules makes.
func (s *space) rules() int {
	if s.all {
		return 1
	}
	return len(s.ports[0]) + len(s.ports[1]) + len(s.ports[2])
}

func (s *space) empty() bool {
	return !s.all && len(s.ports[0]) == 0 && len(s.ports[1]) == 0 && len(s.ports[2]) == 0
}

// add puts the traffic of a Permit rule into s.
func (s *space) add(r *renderer.Rule) {
	if s.all {
		return
	}
	if r.Protocol == renderer.ProtocolAny {
		*s = space{all: true}
		return
	}
	i := int(r.Protocol) - 1
	s.ports[i] = insertRange(s.ports[i], r.DstPort)
}

// insertRange adds p to sorted, disjoint, non-adjacent ranges and keeps them so.
func insertRange(rs []renderer.PortRange, p renderer.PortRange) []renderer.PortRange {
	// Find the first range that ends at or after p.First-1 (could merge).
	i := 0
	for i < len(rs) && int(rs[i].Last)+1 < int(p.First) {
		i++
	}
	j := i
	for j < len(rs) && int(rs[j].First) <= int(p.Last)+1 {
		p.First = min(p.First, rs[j].First)
		p.Last = max(p.Last, rs[j].Last)
		j++
	}
	if i == j {
		rs = append(rs, renderer.PortRange{})
		copy(rs[i+1:], rs[i:])
		rs[i] = p
		return rs
	}
	rs[i] = p
	return append(rs[:i+1], rs[j:]...)
}

// covers reports whether every connection of o is in s.
func (s *space) covers(o *space) bool {
	if s.all {
		return true
	}
	if o.all {
		return false
	}
	for i := range s.ports {
		if !rangesCover(s.ports[i], o.ports[i]) {
			return false
		}
	}
	return true
}

func rangesCover(outer, inner []renderer.PortRange) bool {
	j := 0
	for _, r := range inner {
		for j < len(outer) && outer[j].Last < r.First {
			j++
		}
		if j == len(outer) || !outer[j].Covers(r) {
			return false
		}
	}
	return true
}

// intersect returns the connections in both s and o. The result may share
// storage with them: read it, do not change it.
func (s *space) intersect(o *space) space {
	if s.all {
		return *o
	}
	if o.all {
		return *s
	}
	var out space
	for i := range s.ports {
		out.ports[i] = intersectRanges(s.ports[i], o.ports[i])
	}
	return out
}

func (s *space) clone() space {
	out := space{all: s.all}
	for i := range s.ports {
		if len(s.ports[i]) > 0 {
			out.ports[i] = append([]renderer.PortRange(nil), s.ports[i]...)
		}
	}
	return out
}

func intersectRanges(a, b []renderer.PortRange) []renderer.PortRange {
	var out []renderer.PortRange
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		lo, hi := max(a[i].First, b[j].First), min(a[i].Last, b[j].Last)
		if lo <= hi {
			out = append(out, renderer.PortRange{First: lo, Last: hi})
		}
		if a[i].Last < b[j].Last {
			i++
		} else {
			j++
		}
	}
	return out
}

// appendRules appends the Permit rules that permit exactly s for traffic from
// the peer src (Ingress orientation), sorted by Rule.Compare.
func (s *space) appendRules(rules []renderer.Rule, src netip.Prefix) []renderer.Rule {
	if s.all {
		r := renderer.PermitAll
		r.SrcNetwork = src
		return append(rules, r)
	}
	start := len(rules)
	rules = slices.Grow(rules, len(s.ports[0])+len(s.ports[1])+len(s.ports[2])+1)
	for i, rs := range s.ports {
		for _, p := range rs {
			rules = append(rules, renderer.Rule{
				Action:     renderer.ActionPermit,
				Protocol:   renderer.Protocol(i + 1),
				SrcNetwork: src,
				SrcPort:    renderer.AnyPort,
				DstPort:    p,
			})
		}
	}
	renderer.SortRules(rules[start:])
	return rules
}
