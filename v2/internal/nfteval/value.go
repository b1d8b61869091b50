package nfteval

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// kind is the data type of a selector's value; it decides how the JSON
// literals compared with it are read.
type kind int

const (
	kAddr4 kind = iota + 1
	kAddr6
	kPort
	kProto
	kNfproto
	kIfname
	kMark
	kCtState
	kICMPType
	kICMPv6Type
	kFibType
)

func (k kind) String() string {
	return map[kind]string{
		kAddr4: "ipv4_addr", kAddr6: "ipv6_addr", kPort: "inet_service", kProto: "inet_proto",
		kNfproto: "nf_proto", kIfname: "ifname", kMark: "mark", kCtState: "ct_state",
		kICMPType: "icmp_type", kICMPv6Type: "icmpv6_type", kFibType: "fib_addrtype",
	}[k]
}

// setTypes are the set and map key types (the "type" of a named set) this
// package reads.
var setTypes = map[string]kind{
	"ipv4_addr": kAddr4, "ipv6_addr": kAddr6, "inet_service": kPort, "inet_proto": kProto,
	"nf_proto": kNfproto, "ifname": kIfname, "mark": kMark, "ct_state": kCtState,
	"icmp_type": kICMPType, "icmpv6_type": kICMPv6Type,
}

// value is one selector's value for a packet: addr for addresses, name for
// interface names, num for everything else.
type value struct {
	addr netip.Addr
	name string
	num  uint64
	// unknown is a value the kernel reads but this package does not model:
	// the th ports of a packet without ports. A comparison with it is
	// decided only when another component of a concatenation decides it.
	unknown bool
}

func (v value) String() string {
	switch {
	case v.unknown:
		return "(unknown)"
	case v.addr.IsValid():
		return v.addr.String()
	case v.name != "":
		return strconv.Quote(v.name)
	}
	return strconv.FormatUint(v.num, 10)
}

// span is what one component of a literal, a set element or an interval
// covers: lo to hi inclusive. An interface name ending in * (wildcard)
// covers every name that starts with what precedes it; a ct_state span is a
// bit mask that covers every state it has a bit of (the kernel compiles
// `ct state established,related` as a mask test).
type span struct {
	lo, hi   value
	wildcard bool
}

func (s span) covers(k kind, v value) bool {
	switch k {
	case kAddr4, kAddr6:
		return s.lo.addr.Compare(v.addr) <= 0 && v.addr.Compare(s.hi.addr) <= 0
	case kIfname:
		if s.wildcard {
			return strings.HasPrefix(v.name, s.lo.name)
		}
		return v.name == s.lo.name
	case kCtState:
		return v.num&s.lo.num != 0
	}
	return s.lo.num <= v.num && v.num <= s.hi.num
}

func (s span) String() string {
	switch {
	case s.wildcard:
		return strconv.Quote(s.lo.name + "*")
	case s.lo == s.hi:
		return s.lo.String()
	}
	return s.lo.String() + "-" + s.hi.String()
}

// element is one member of a set, a map or a literal: a span per component
// of the key (one unless the key is a concatenation), and for a verdict map
// the verdict.
type element struct {
	key     []span
	verdict *verdict
}

// covers says whether e covers vs; undecided is true when that depends
// only on unknown components.
func (e element) covers(kinds []kind, vs []value) (covered, undecided bool) {
	for i, s := range e.key {
		if vs[i].unknown {
			undecided = true
			continue
		}
		if !s.covers(kinds[i], vs[i]) {
			return false, false
		}
	}
	return !undecided, undecided
}

// lookup finds the first element covering vs, as the kernel's lookup does;
// it fails when the answer depends on an unknown value.
func lookup(elems []element, kinds []kind, vs []value) (*element, error) {
	var undecided *element
	for i := range elems {
		covered, maybe := elems[i].covers(kinds, vs)
		if covered {
			return &elems[i], nil
		}
		if maybe && undecided == nil {
			undecided = &elems[i]
		}
	}
	if undecided != nil {
		return nil, fmt.Errorf("whether %s is in %s depends on values that are not modelled (ports of a packet without ports)", valuesString(vs), undecided)
	}
	return nil, nil
}

func valuesString(vs []value) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return strings.Join(parts, " . ")
}

func (e element) String() string {
	parts := make([]string, len(e.key))
	for i, s := range e.key {
		parts[i] = s.String()
	}
	return strings.Join(parts, " . ")
}

// parseElement reads a set element, a literal, a prefix, a range or a
// concatenation of them, for a key of the given kinds.
func parseElement(kinds []kind, raw any) (element, error) {
	if m, ok := raw.(map[string]any); ok {
		if e, ok := m["elem"]; ok && len(m) == 1 {
			// A set element with attributes (timeout, comment): only its
			// value matters to a lookup.
			em, ok := e.(map[string]any)
			if !ok {
				return element{}, fmt.Errorf("element %v: elem is not an object", raw)
			}
			return parseElement(kinds, em["val"])
		}
		if c, ok := m["concat"]; ok && len(m) == 1 {
			parts, ok := c.([]any)
			if !ok || len(parts) != len(kinds) {
				return element{}, fmt.Errorf("element %v: a concatenation of %d parts is compared with a key of %d", raw, len(parts), len(kinds))
			}
			var e element
			for i, p := range parts {
				s, err := parseSpan(kinds[i], p)
				if err != nil {
					return element{}, err
				}
				e.key = append(e.key, s)
			}
			return e, nil
		}
	}
	if len(kinds) != 1 {
		return element{}, fmt.Errorf("element %v is not a concatenation of %d parts", raw, len(kinds))
	}
	s, err := parseSpan(kinds[0], raw)
	if err != nil {
		return element{}, err
	}
	return element{key: []span{s}}, nil
}

// parseSpan reads one component: a literal, {"prefix": ...} or {"range": ...}.
func parseSpan(k kind, raw any) (span, error) {
	if m, ok := raw.(map[string]any); ok && len(m) == 1 {
		if p, ok := m["prefix"].(map[string]any); ok {
			if k != kAddr4 && k != kAddr6 {
				return span{}, fmt.Errorf("prefix %v compared with %s", raw, k)
			}
			a, err := parseLiteral(k, p["addr"])
			if err != nil {
				return span{}, err
			}
			n, ok := p["len"].(json.Number)
			bits, err := strconv.Atoi(string(n))
			if !ok || err != nil {
				return span{}, fmt.Errorf("prefix %v: length is not a number", raw)
			}
			pfx, err := a.addr.Prefix(bits)
			if err != nil || pfx.Addr() != a.addr {
				return span{}, fmt.Errorf("prefix %v: not a network prefix", raw)
			}
			return span{lo: value{addr: pfx.Addr()}, hi: value{addr: lastAddr(pfx)}}, nil
		}
		if r, ok := m["range"].([]any); ok {
			if len(r) != 2 || k == kIfname || k == kCtState {
				return span{}, fmt.Errorf("range %v compared with %s", raw, k)
			}
			lo, err := parseLiteral(k, r[0])
			if err != nil {
				return span{}, err
			}
			hi, err := parseLiteral(k, r[1])
			if err != nil {
				return span{}, err
			}
			return span{lo: lo, hi: hi}, nil
		}
	}
	if s, ok := raw.(string); ok && k == kIfname && strings.HasSuffix(s, "*") && !strings.HasSuffix(s, `\*`) {
		return span{lo: value{name: strings.TrimSuffix(s, "*")}, wildcard: true}, nil
	}
	v, err := parseLiteral(k, raw)
	if err != nil {
		return span{}, err
	}
	return span{lo: v, hi: v}, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Names nft prints for values of symbolic types.
var (
	protocols = map[string]uint64{
		"icmp": 1, "igmp": 2, "tcp": 6, "udp": 17, "gre": 47, "esp": 50, "ah": 51,
		"ipv6-icmp": 58, "icmpv6": 58, "udplite": 136, "sctp": 132,
	}
	nfprotos = map[string]uint64{"ipv4": 2, "ipv6": 10}
	ctStates = map[string]uint64{
		"invalid": 1, "established": 2, "related": 4, "new": 8, "untracked": 64,
	}
	icmpTypes = map[string]uint64{
		"echo-reply": 0, "destination-unreachable": 3, "source-quench": 4, "redirect": 5,
		"echo-request": 8, "router-advertisement": 9, "router-solicitation": 10,
		"time-exceeded": 11, "parameter-problem": 12, "timestamp-request": 13,
		"timestamp-reply": 14, "info-request": 15, "info-reply": 16,
		"address-mask-request": 17, "address-mask-reply": 18,
	}
	icmpv6Types = map[string]uint64{
		"destination-unreachable": 1, "packet-too-big": 2, "time-exceeded": 3,
		"parameter-problem": 4, "echo-request": 128, "echo-reply": 129,
		"mld-listener-query": 130, "mld-listener-report": 131, "mld-listener-done": 132,
		"mld-listener-reduction": 132, "nd-router-solicit": 133, "nd-router-advert": 134,
		"nd-neighbor-solicit": 135, "nd-neighbor-advert": 136, "nd-redirect": 137,
		"router-renumbering": 138, "ind-neighbor-solicit": 141, "ind-neighbor-advert": 142,
		"mld2-listener-report": 143,
	}
)

// parseLiteral reads one value of kind k. A ct_state literal may be a list
// of states (a mask).
func parseLiteral(k kind, raw any) (value, error) {
	bad := func(why string) (value, error) {
		return value{}, fmt.Errorf("%v is not a %s value: %s", raw, k, why)
	}
	switch k {
	case kAddr4, kAddr6:
		s, ok := raw.(string)
		if !ok {
			return bad("not a string")
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Is4() != (k == kAddr4) || a.Zone() != "" {
			return bad("not an address of the family")
		}
		return value{addr: a}, nil
	case kIfname:
		s, ok := raw.(string)
		if !ok {
			return bad("not a string")
		}
		return value{name: strings.ReplaceAll(s, `\*`, "*")}, nil
	case kCtState:
		if list, ok := raw.([]any); ok {
			var mask uint64
			for _, e := range list {
				v, err := parseLiteral(k, e)
				if err != nil {
					return value{}, err
				}
				mask |= v.num
			}
			return value{num: mask}, nil
		}
		return symbolic(k, raw, ctStates, 1<<32-1)
	case kPort:
		return symbolic(k, raw, nil, 1<<16-1)
	case kProto:
		return symbolic(k, raw, protocols, 1<<8-1)
	case kNfproto:
		return symbolic(k, raw, nfprotos, 1<<8-1)
	case kMark:
		return symbolic(k, raw, nil, 1<<32-1)
	case kICMPType:
		return symbolic(k, raw, icmpTypes, 1<<8-1)
	case kICMPv6Type:
		return symbolic(k, raw, icmpv6Types, 1<<8-1)
	case kFibType:
		if raw != "local" {
			return bad("only the type local is modelled (Packet.DstLocal)")
		}
		return value{num: 1}, nil
	}
	return bad("unknown kind")
}

// symbolic reads a number, or a name of names, up to max.
func symbolic(k kind, raw any, names map[string]uint64, max uint64) (value, error) {
	switch r := raw.(type) {
	case json.Number:
		n, err := strconv.ParseUint(string(r), 10, 64)
		if err != nil || n > max {
			return value{}, fmt.Errorf("%v is not a %s value: out of range", raw, k)
		}
		return value{num: n}, nil
	case string:
		if n, ok := names[r]; ok {
			return value{num: n}, nil
		}
		if n, err := strconv.ParseUint(r, 0, 64); err == nil && n <= max {
			return value{num: n}, nil
		}
	}
	return value{}, fmt.Errorf("%v is not a %s value known here", raw, k)
}
