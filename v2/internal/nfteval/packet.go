package nfteval

import (
	"fmt"
	"net/netip"
)

// Protocol numbers of the transport protocols a Packet may carry.
const (
	ICMP   uint8 = 1
	TCP    uint8 = 6
	UDP    uint8 = 17
	ICMPv6 uint8 = 58
	SCTP   uint8 = 132
)

// CtState is a connection tracking state, with the kernel's bit values
// (nf_conntrack_common.h), since `ct state` matches compare bit masks.
type CtState uint32

const (
	CtInvalid     CtState = 1
	CtEstablished CtState = 2
	CtRelated     CtState = 4
	CtNew         CtState = 8
	CtUntracked   CtState = 64
)

// Hook is a netfilter hook of the inet family.
type Hook string

const (
	Prerouting  Hook = "prerouting"
	Input       Hook = "input"
	Forward     Hook = "forward"
	Output      Hook = "output"
	Postrouting Hook = "postrouting"
)

// Packet is what a rule can see of one packet at a hook.
type Packet struct {
	// Src and Dst are the addresses at the hook (after any DNAT that ran
	// before it); both of one family. The family decides which chains of an
	// ip or ip6 table see the packet.
	Src, Dst netip.Addr
	// Proto is the transport protocol (meta l4proto): TCP, UDP, SCTP, ICMP
	// or ICMPv6.
	Proto uint8
	// SrcPort and DstPort are the ports of TCP, UDP and SCTP packets.
	SrcPort, DstPort uint16
	// ICMPType is the type of an ICMP or ICMPv6 packet.
	ICMPType uint8
	// Ct is the packet's conntrack state; zero means CtNew.
	Ct CtState
	// IIF and OIF are the names of the input and output interfaces; empty
	// where the hook has none (no IIF at output, no OIF at input). A match
	// on a missing name does not match, as in the kernel.
	IIF, OIF string
	// Mark is the packet's meta mark.
	Mark uint32
	// DstLocal says that Dst is an address of the host (what `fib daddr
	// type local` tests). It must be true at the input hook and false at
	// the forward hook.
	DstLocal bool
	// SrcLocal says that Src is an address of the host (what `fib saddr
	// type local` tests), as for the host's own packets.
	SrcLocal bool
}

func (p Packet) String() string {
	s := fmt.Sprintf("%s %s", protoName(p.Proto), p.Src)
	if hasPorts(p.Proto) {
		s += fmt.Sprintf(":%d", p.SrcPort)
	}
	s += " -> " + p.Dst.String()
	if hasPorts(p.Proto) {
		s += fmt.Sprintf(":%d", p.DstPort)
	}
	if isICMP(p.Proto) {
		s += fmt.Sprintf(" type %d", p.ICMPType)
	}
	s += fmt.Sprintf(" ct %s", p.ct())
	if p.IIF != "" {
		s += " iif " + p.IIF
	}
	if p.OIF != "" {
		s += " oif " + p.OIF
	}
	if p.Mark != 0 {
		s += fmt.Sprintf(" mark %#x", p.Mark)
	}
	if p.SrcLocal {
		s += " from-local"
	}
	if p.DstLocal {
		s += " to-local"
	}
	return s
}

func (p Packet) ct() CtState {
	if p.Ct == 0 {
		return CtNew
	}
	return p.Ct
}

func (s CtState) String() string {
	if name, ok := ctStateNames[s]; ok {
		return name
	}
	return fmt.Sprintf("ct(%d)", uint32(s))
}

func hasPorts(proto uint8) bool { return proto == TCP || proto == UDP || proto == SCTP }
func isICMP(proto uint8) bool   { return proto == ICMP || proto == ICMPv6 }

func protoName(proto uint8) string {
	for name, v := range protocols {
		if v == uint64(proto) && name != "icmpv6" {
			return name
		}
	}
	return fmt.Sprintf("proto(%d)", proto)
}

// check rejects packets that no hook could see, so that a test's mistake
// does not turn into a verdict.
func (p Packet) check(hook Hook) error {
	if !p.Src.IsValid() || !p.Dst.IsValid() {
		return fmt.Errorf("packet %s: source and destination addresses are required", p)
	}
	if p.Src.Is4() != p.Dst.Is4() || p.Src.Is4In6() || p.Dst.Is4In6() {
		return fmt.Errorf("packet %s: source and destination must be of one family (no IPv4-mapped IPv6)", p)
	}
	switch {
	case hasPorts(p.Proto):
	case p.Proto == ICMP && !p.Src.Is4(), p.Proto == ICMPv6 && p.Src.Is4():
		return fmt.Errorf("packet %s: ICMP is IPv4's, ICMPv6 is IPv6's", p)
	case isICMP(p.Proto):
	default:
		return fmt.Errorf("packet %s: protocol %d is not modelled (TCP, UDP, SCTP, ICMP, ICMPv6)", p, p.Proto)
	}
	if _, ok := ctStateNames[p.ct()]; !ok {
		return fmt.Errorf("packet %s: conntrack state %d is not one state", p, p.Ct)
	}
	switch hook {
	case Input:
		if !p.DstLocal || p.OIF != "" {
			return fmt.Errorf("packet %s at input: the destination must be local and there is no output interface", p)
		}
	case Forward:
		if p.DstLocal {
			return fmt.Errorf("packet %s at forward: a forwarded packet's destination is not local", p)
		}
	case Output:
		if p.IIF != "" {
			return fmt.Errorf("packet %s at output: a locally sent packet has no input interface", p)
		}
	case Prerouting:
		if p.OIF != "" {
			return fmt.Errorf("packet %s at prerouting: there is no output interface yet", p)
		}
	case Postrouting:
	default:
		return fmt.Errorf("packet %s: hook %q is not one of prerouting, input, forward, output, postrouting", p, hook)
	}
	return nil
}

var ctStateNames = func() map[CtState]string {
	m := map[CtState]string{}
	for name, v := range ctStates {
		m[CtState(v)] = name
	}
	return m
}()
