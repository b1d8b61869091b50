package nftables

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// content is what one pod's rule list of one direction means, in the form
// the table stores it: a union of permitted peers and ports, then "deny the
// rest". Every rule of a list but the last permits (renderer.PodRules), so
// their order does not matter and the list is a union; the last one is a
// DenyAll (a list ending in PermitAll permits everything and needs no
// content at all).
//
// Pods whose lists have equal contents share one group (a chain and its
// sets). The permitted traffic is split by the kind of set that holds it:
//
//   - hostPorts: an exact peer address with one exact destination port of
//     one protocol (a hash set of address . protocol . port);
//   - hosts: an exact peer address, every protocol (a hash set);
//   - nets: a peer network, every protocol (an interval set);
//   - sigs: everything else, by signature (protocol and port ranges): the
//     peer networks and addresses of each signature (one interval set each).
//
// Sets are per family. Intervals are normalized (sorted, disjoint, merged
// when adjacent), since nft refuses overlapping elements in an interval set.
type content struct {
	hostPorts [2][]hostPort
	hosts     [2][]netip.Addr
	nets      [2][]interval
	sigs      []sigSets
}

// family indexes content's per-family fields.
const (
	v4 = 0
	v6 = 1
)

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return v4
	}
	return v6
}

type hostPort struct {
	addr  netip.Addr
	proto renderer.Protocol
	port  uint16
}

func compareHostPorts(a, b hostPort) int {
	if c := a.addr.Compare(b.addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.proto, b.proto); c != 0 {
		return c
	}
	return cmp.Compare(a.port, b.port)
}

// signature is the L4 part of a rule that is not stored in a hash set.
type signature struct {
	proto        renderer.Protocol
	sport, dport renderer.PortRange
}

func compareSignatures(a, b signature) int {
	if c := cmp.Compare(a.proto, b.proto); c != 0 {
		return c
	}
	if c := cmp.Compare(a.dport.First, b.dport.First); c != 0 {
		return c
	}
	if c := cmp.Compare(a.dport.Last, b.dport.Last); c != 0 {
		return c
	}
	if c := cmp.Compare(a.sport.First, b.sport.First); c != 0 {
		return c
	}
	return cmp.Compare(a.sport.Last, b.sport.Last)
}

func (s signature) String() string {
	return fmt.Sprintf("%s sport %s dport %s", s.proto, s.sport, s.dport)
}

type sigSets struct {
	sig   signature
	peers [2][]interval
}

// interval is an inclusive range of addresses of one family.
type interval struct {
	first, last netip.Addr
}

func prefixInterval(p netip.Prefix) interval {
	p = p.Masked()
	return interval{first: p.Addr(), last: nft.LastAddr(p)}
}

// elem is the interval as an nft set element: an address, a prefix or a
// range.
func (iv interval) elem() string { return nft.RangeText(iv.first, iv.last) }

// normalize sorts ivs and merges overlapping and adjacent intervals.
func normalize(ivs []interval) []interval {
	if len(ivs) == 0 {
		return nil
	}
	slices.SortFunc(ivs, func(a, b interval) int {
		if c := a.first.Compare(b.first); c != 0 {
			return c
		}
		return a.last.Compare(b.last)
	})
	out := ivs[:1]
	for _, iv := range ivs[1:] {
		cur := &out[len(out)-1]
		next := cur.last.Next()
		if iv.first.Compare(cur.last) <= 0 || (next.IsValid() && iv.first == next) {
			if iv.last.Compare(cur.last) > 0 {
				cur.last = iv.last
			}
			continue
		}
		out = append(out, iv)
	}
	return slices.Clip(out)
}

// everyAddress is the interval of all addresses of a family.
var everyAddress = [2]interval{
	prefixInterval(netip.MustParsePrefix("0.0.0.0/0")),
	prefixInterval(netip.MustParsePrefix("::/0")),
}

// contentOf turns a pod's rule list of direction d into its content. It
// returns nil for a list that restricts nothing (empty, or ending in
// PermitAll). rules must be a valid list (renderer.ValidateRuleList).
func contentOf(d renderer.Direction, rules []renderer.Rule) *content {
	if len(rules) == 0 || rules[len(rules)-1].Action == renderer.ActionPermit {
		return nil
	}
	return unionOf(d, rules[:len(rules)-1])
}

// unionOf is the content of what any of rules matches in direction d
// (their actions are not read).
func unionOf(d renderer.Direction, rules []renderer.Rule) *content {
	c := &content{}
	var nets [2][]interval
	sigs := map[signature]*[2][]interval{}
	for _, r := range rules {
		peer := r.SrcNetwork
		if d == renderer.Egress {
			peer = r.DstNetwork
		}
		var fams []int
		var ivs [2]interval
		if peer.IsValid() {
			f := familyOf(peer.Addr())
			fams, ivs[f] = []int{f}, prefixInterval(peer)
		} else {
			fams, ivs = []int{v4, v6}, everyAddress
		}
		host := peer.IsValid() && peer.IsSingleIP()
		switch {
		case r.Protocol == renderer.ProtocolAny && host:
			c.hosts[fams[0]] = append(c.hosts[fams[0]], peer.Addr())
		case r.Protocol == renderer.ProtocolAny:
			for _, f := range fams {
				nets[f] = append(nets[f], ivs[f])
			}
		case host && r.SrcPort.IsAny() && r.DstPort.First == r.DstPort.Last:
			c.hostPorts[fams[0]] = append(c.hostPorts[fams[0]], hostPort{addr: peer.Addr(), proto: r.Protocol, port: r.DstPort.First})
		default:
			s := signature{proto: r.Protocol, sport: r.SrcPort, dport: r.DstPort}
			p := sigs[s]
			if p == nil {
				p = &[2][]interval{}
				sigs[s] = p
			}
			for _, f := range fams {
				p[f] = append(p[f], ivs[f])
			}
		}
	}
	for f := range 2 {
		slices.SortFunc(c.hostPorts[f], compareHostPorts)
		c.hostPorts[f] = slices.Compact(c.hostPorts[f])
		slices.SortFunc(c.hosts[f], netip.Addr.Compare)
		c.hosts[f] = slices.Compact(c.hosts[f])
		c.nets[f] = normalize(nets[f])
	}
	for s, p := range sigs {
		c.sigs = append(c.sigs, sigSets{sig: s, peers: [2][]interval{normalize(p[v4]), normalize(p[v6])}})
	}
	slices.SortFunc(c.sigs, func(a, b sigSets) int { return compareSignatures(a.sig, b.sig) })
	return c
}

// key identifies the content: equal keys, equal contents. It hashes a
// binary encoding (fmt costs more than the rest of a render).
func (c *content) key() string {
	b := make([]byte, 0, 256)
	addr := func(a netip.Addr) {
		s := a.As16()
		b = append(b, s[:]...)
	}
	sep := func(x byte) { b = append(b, 0xff, x) }
	for f := range 2 {
		sep('p')
		for _, hp := range c.hostPorts[f] {
			addr(hp.addr)
			b = append(b, byte(hp.proto), byte(hp.port>>8), byte(hp.port))
		}
		sep('h')
		for _, a := range c.hosts[f] {
			addr(a)
		}
		sep('n')
		for _, iv := range c.nets[f] {
			addr(iv.first)
			addr(iv.last)
		}
	}
	for _, s := range c.sigs {
		sep('s')
		b = append(b, byte(s.sig.proto))
		for _, p := range []renderer.PortRange{s.sig.sport, s.sig.dport} {
			b = append(b, byte(p.First>>8), byte(p.First), byte(p.Last>>8), byte(p.Last))
		}
		for f := range 2 {
			sep('f')
			for _, iv := range s.peers[f] {
				addr(iv.first)
				addr(iv.last)
			}
		}
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:16])
}

// elements returns the content's set elements by set (named by setNames),
// each as nft writes it.
func (c *content) elements(names setNames) map[string][]string {
	out := make(map[string][]string)
	for f := range 2 {
		var e []string
		for _, hp := range c.hostPorts[f] {
			e = append(e, fmt.Sprintf("%s . %s . %d", hp.addr, hp.proto, hp.port))
		}
		if len(e) > 0 {
			out[names.hostPorts(f)] = e
		}
		e = nil
		for _, a := range c.hosts[f] {
			e = append(e, a.String())
		}
		if len(e) > 0 {
			out[names.hosts(f)] = e
		}
		if len(c.nets[f]) > 0 {
			out[names.nets(f)] = intervalElems(c.nets[f])
		}
		for i, s := range c.sigs {
			if len(s.peers[f]) > 0 {
				out[names.sig(i, f)] = intervalElems(s.peers[f])
			}
		}
	}
	return out
}

func intervalElems(ivs []interval) []string {
	out := make([]string, 0, len(ivs))
	for _, iv := range ivs {
		out = append(out, iv.elem())
	}
	return out
}
