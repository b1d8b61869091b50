package nftables

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// The table's layout (docs/policy.md, "The nftables renderer").
//
// Two base chains check every pod's traffic, each with two verdict maps
// keyed by the local pods' addresses:
//
//   - forward (filter, forward hook, after the service renderer's filter):
//     traffic out of a local pod, by its source address (maps eg4, eg6),
//     with the destination already translated by the service DNAT of
//     prerouting: a pod's egress rules see the backend, not the Service.
//   - postrouting (filter, postrouting hook, after source NAT): traffic
//     into a local pod, by its destination address (maps in4, in6), with
//     the source as the pod sees it: the NAT loopback for a pod reaching
//     itself through a Service (hairpin), which the rules always permit.
//
// A map's element sends the packet to its pod's group chain with jump. A
// group chain returns when a rule permits the packet and drops it at its
// end, so traffic between two local pods is checked by the source pod's
// egress group in forward and then by the destination pod's ingress group
// in postrouting: neither check can skip the other.
//
// A pod reaching itself through a Service (hairpin) is forwarded with its
// own address as source and, after the DNAT, as destination: its egress
// group would judge it, though a pod's policies never filter its traffic to
// itself. Forward accepts it first by the sets self4 and self6, which hold
// "a . a" for every address of the egress maps (nft cannot compare a
// packet's source with its destination); postrouting then sees the NAT
// loopback as its source, which the ingress rules always permit.
//
// Before anything else, forward drops what comes out of a local pod's
// interface (its name starts with Config.PodIfPrefix) with a source that no
// local pod may use: neither a pod's address nor inside a pod's allowed
// source prefixes (sets src4 and src6). The egress maps are keyed by the
// source, so a forged one would find no group and pass unfiltered; traffic
// forwarded from elsewhere, and the node's own, are not the pods' and are
// left as they are. The drops are counted (counter unknown-source).
//
// Traffic of established and related connections is accepted first, and
// the node's own traffic to its pods (the kubelet's probes) and IPv6
// neighbour discovery always pass. Traffic from a pod to its own node (the
// input hook) is never filtered: Kubernetes always permits it.
const (
	chainForward     = "forward"
	chainPostrouting = "postrouting"
	// formatVersion is written as the comment of the empty set
	// setFormat (nft's JSON shows no table or chain comments): a vcoild
	// adopts a table of its own version and refuses one of a newer one.
	formatVersion = formatversion.PolicyTable
	setFormat     = nft.FormatSet
	formatKind    = "policy"
	formatComment = "vcoil policy v1" // nft.FormatComment(formatKind, formatVersion)
	// logRate bounds the drop log: at most this many lines per second
	// over the whole table, so that a flood cannot fill the kernel log.
	logRate = "10/second burst 20 packets"
)

// srcSets are the interval sets of the sources local pods may send from,
// by family: their addresses and allowed source prefixes.
var srcSets = [2]string{"src4", "src6"}

// counterUnknownSource counts the packets of local pods' interfaces with a
// source not in srcSets.
const counterUnknownSource = "unknown-source"

// deniedSets count, per local pod address, the packets its NetworkPolicy
// group denied, by direction and family: before its drop, a group chain
// adds the pod's address (the destination of ingress, the source of
// egress) to them, and each element counts its packets. The renderer names the
// policies isolating each address, so the counts become per NetworkPolicy
// (Renderer.Denied) although pods of other policies share a group. They
// hold only keys of the dispatch maps, so no pod can grow them beyond the
// local pods' addresses; the size is a bound all the same.
var deniedSets = [2][2]string{{"denied-in4", "denied-in6"}, {"denied-eg4", "denied-eg6"}}

// deniedSetSize bounds each denied set. A full set makes the group's
// updating rule fail, which passes the packet on to the drop all the same.
const deniedSetSize = 65536

// deniedSetComment tells the denied sets apart from a set of that name
// without per-element counters, which adoption replaces.
const deniedSetComment = "packets the NetworkPolicy groups denied, per local pod address"

// deniedSetScript declares the denied sets, with a counter per element:
// knftables cannot write one.
func deniedSetScript(table string) string {
	var b strings.Builder
	for _, names := range deniedSets {
		for f, name := range names {
			fmt.Fprintf(&b, "add set inet %s %s { type %s ; flags dynamic ; size %d ; counter ; comment %q ; }\n",
				table, name, addrType(f), deniedSetSize, deniedSetComment)
		}
	}
	return b.String()
}

// podField is the address of the local pod in a packet of direction d.
func podField(d renderer.Direction) string {
	if d == renderer.Egress {
		return "saddr"
	}
	return "daddr"
}

// selfSets are the sets of egress-isolated addresses that reach
// themselves, by family.
var selfSets = [2]string{"self4", "self6"}

func selfElem(a netip.Addr) string { return a.String() + " . " + a.String() }

func ipOf(f int) string {
	if f == v4 {
		return "ip"
	}
	return "ip6"
}

func addrType(f int) string {
	if f == v4 {
		return "ipv4_addr"
	}
	return "ipv6_addr"
}

func famSuffix(f int) string {
	if f == v4 {
		return "4"
	}
	return "6"
}

// peerField is the address of the peer in a packet of direction d: the
// source of traffic into the pod, the destination of traffic out of it.
func peerField(d renderer.Direction) string {
	if d == renderer.Egress {
		return "daddr"
	}
	return "saddr"
}

// setNames names a group's sets.
type setNames string // the group's chain name

func (g setNames) hostPorts(f int) string { return string(g) + "-hp" + famSuffix(f) }
func (g setNames) hosts(f int) string     { return string(g) + "-h" + famSuffix(f) }
func (g setNames) nets(f int) string      { return string(g) + "-n" + famSuffix(f) }
func (g setNames) sig(i, f int) string {
	return string(g) + "-s" + strconv.Itoa(i) + "-" + famSuffix(f)
}

// setDef is one set of a group: its name, type, whether it holds
// intervals, and a comment (a signature's, which adoption reads back).
type setDef struct {
	name, typ string
	interval  bool
	comment   string
}

// groupLayout is which sets a group has: only non-empty ones, so that a
// group costs the kernel (and nft, at a full render) only what it holds. A
// group's chain follows from its layout; two contents of one layout differ
// only in set elements.
type groupLayout struct {
	// fixed: the hostPorts, hosts and nets sets, by family.
	fixed [2][3]bool
	sigs  []sigLayout
}

type sigLayout struct {
	sig  signature
	fams [2]bool
}

const (
	slotHostPorts = iota
	slotHosts
	slotNets
)

// layoutOf is the layout of content c.
func layoutOf(c *content) groupLayout {
	var l groupLayout
	for f := range 2 {
		l.fixed[f] = [3]bool{len(c.hostPorts[f]) > 0, len(c.hosts[f]) > 0, len(c.nets[f]) > 0}
	}
	for _, s := range c.sigs {
		l.sigs = append(l.sigs, sigLayout{sig: s.sig, fams: [2]bool{len(s.peers[v4]) > 0, len(s.peers[v6]) > 0}})
	}
	return l
}

// String is the layout's identity.
func (l groupLayout) String() string {
	var b strings.Builder
	for f := range 2 {
		for _, on := range l.fixed[f] {
			b.WriteByte("01"[btoi(on)])
		}
	}
	for _, s := range l.sigs {
		fmt.Fprintf(&b, ";%s %d%d", s.sig, btoi(s.fams[v4]), btoi(s.fams[v6]))
	}
	return b.String()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// groupSets lists the sets of a group with chain name g and layout l, in a
// fixed order.
func groupSets(g setNames, l groupLayout) []setDef {
	var out []setDef
	for f := range 2 {
		if l.fixed[f][slotHostPorts] {
			out = append(out, setDef{name: g.hostPorts(f), typ: addrType(f) + " . inet_proto . inet_service"})
		}
		if l.fixed[f][slotHosts] {
			out = append(out, setDef{name: g.hosts(f), typ: addrType(f)})
		}
		if l.fixed[f][slotNets] {
			out = append(out, setDef{name: g.nets(f), typ: addrType(f), interval: true})
		}
		for i, s := range l.sigs {
			if s.fams[f] {
				out = append(out, setDef{name: g.sig(i, f), typ: addrType(f), interval: true, comment: s.sig.String()})
			}
		}
	}
	return out
}

// groupRules are the rules of NetworkPolicy group chain g of direction d
// and layout l: permits that return, then the drop (logged when
// logDrops), counted for the group and for the pod's address (deniedSets).
// The updating rules are apart from the drop, so that one that fails (a
// full set) cannot keep the packet from it.
func groupRules(g setNames, d renderer.Direction, l groupLayout, logDrops bool) []string {
	out := matchRules(g, d, l, "return")
	if logDrops {
		out = append(out, dropLog(string(g), d.String()))
	}
	for f := range 2 {
		out = append(out, fmt.Sprintf("meta nfproto %s update @%s { %s %s }", []string{"ipv4", "ipv6"}[f], deniedSets[d][f], ipOf(f), podField(d)))
	}
	return append(out, fmt.Sprintf("counter name %q drop", string(g)))
}

// matchRules are the rules matching the peers and ports of sets g of
// layout l in direction d, each ending in statement.
func matchRules(g setNames, d renderer.Direction, l groupLayout, statement string) []string {
	peer := peerField(d)
	var out []string
	for f := range 2 {
		ip := ipOf(f)
		if l.fixed[f][slotHostPorts] {
			out = append(out, fmt.Sprintf("%s %s . meta l4proto . th dport @%s %s", ip, peer, g.hostPorts(f), statement))
		}
		if l.fixed[f][slotHosts] {
			out = append(out, fmt.Sprintf("%s %s @%s %s", ip, peer, g.hosts(f), statement))
		}
		if l.fixed[f][slotNets] {
			out = append(out, fmt.Sprintf("%s %s @%s %s", ip, peer, g.nets(f), statement))
		}
	}
	for i, s := range l.sigs {
		l4 := "meta l4proto " + s.sig.proto.String()
		if !s.sig.sport.IsAny() {
			l4 += " th sport " + portsString(s.sig.sport)
		}
		if !s.sig.dport.IsAny() {
			l4 += " th dport " + portsString(s.sig.dport)
		}
		for f := range 2 {
			if s.fams[f] {
				out = append(out, fmt.Sprintf("%s %s %s @%s %s", l4, ipOf(f), peer, g.sig(i, f), statement))
			}
		}
	}
	return out
}

func portsString(p renderer.PortRange) string {
	if p.First == p.Last {
		return strconv.Itoa(int(p.First))
	}
	return strconv.Itoa(int(p.First)) + "-" + strconv.Itoa(int(p.Last))
}

// baseRules are the rules of the two base chains, for pods' interfaces
// named podIfPrefix and more.
func baseRules(podIfPrefix string) map[string][]string {
	var fwd []string
	for f := range 2 {
		fwd = append(fwd, fmt.Sprintf("iifname %q %s saddr != @%s counter name %q drop", podIfPrefix+"*", ipOf(f), srcSets[f], counterUnknownSource))
	}
	fwd = append(fwd, "ct state established,related accept")
	for f := range 2 {
		fwd = append(fwd, fmt.Sprintf("%s saddr . %s daddr @%s accept", ipOf(f), ipOf(f), selfSets[f]))
	}
	post := []string{
		"ct state established,related accept",
		"icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-solicit, nd-router-advert, nd-redirect } accept",
		// The node's own traffic to its pods, and what the node itself
		// translated to one of its addresses.
		"fib saddr type local accept",
	}
	// The tiers in order: Admin, NetworkPolicy, Baseline (tiers.go).
	for _, k := range []kind{kindAdmin, kindNetworkPolicy, kindBaseline} {
		for f := range 2 {
			fwd = append(fwd, fmt.Sprintf("%s saddr vmap @%s", ipOf(f), slotMaps[slotOf(k, renderer.Egress)][f]))
			post = append(post, fmt.Sprintf("%s daddr vmap @%s", ipOf(f), slotMaps[slotOf(k, renderer.Ingress)][f]))
		}
	}
	return map[string][]string{chainForward: fwd, chainPostrouting: post}
}

// ruleID is the comment a rule carries: a digest of its text, by which
// adoption recognizes the rules it would write.
func ruleID(rule string) string {
	h := sha256.Sum256([]byte(rule))
	return hex.EncodeToString(h[:8])
}
