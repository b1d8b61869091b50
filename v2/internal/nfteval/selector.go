package nfteval

import (
	"fmt"
	"strings"
)

// selector reads one field of a packet. get reports ok=false when the
// packet does not have the field: the dependency nft adds when it compiles
// the match (`meta nfproto ipv4` before `ip saddr`, `meta l4proto tcp`
// before `tcp dport`) fails, so the rule does not match whatever the
// operator. It returns an error when the kernel would read something this
// package does not model.
type selector struct {
	name string
	kind kind
	get  func(p *Packet) (v value, ok bool, err error)
}

func (s selector) String() string { return s.name }

func selectorKinds(sels []selector) []kind {
	ks := make([]kind, len(sels))
	for i, s := range sels {
		ks[i] = s.kind
	}
	return ks
}

func selectorsString(sels []selector) string {
	names := make([]string, len(sels))
	for i, s := range sels {
		names[i] = s.name
	}
	return strings.Join(names, " . ")
}

// parseSelectors reads the left side of a match or the key of a verdict
// map: one selector or a concatenation.
func parseSelectors(raw any) ([]selector, error) {
	if m, ok := raw.(map[string]any); ok && len(m) == 1 {
		if parts, ok := m["concat"].([]any); ok {
			var sels []selector
			for _, p := range parts {
				s, err := parseSelector(p)
				if err != nil {
					return nil, err
				}
				sels = append(sels, s)
			}
			return sels, nil
		}
	}
	s, err := parseSelector(raw)
	if err != nil {
		return nil, err
	}
	return []selector{s}, nil
}

func parseSelector(raw any) (selector, error) {
	m, ok := raw.(map[string]any)
	if !ok || len(m) != 1 {
		return selector{}, fmt.Errorf("expression %v is not modelled", raw)
	}
	for key, arg := range m {
		a, _ := arg.(map[string]any)
		switch key {
		case "payload":
			proto, _ := a["protocol"].(string)
			field, _ := a["field"].(string)
			if s, ok := payloadSelector(proto, field); ok {
				return s, nil
			}
			return selector{}, fmt.Errorf("payload %v is not modelled", arg)
		case "meta":
			k, _ := a["key"].(string)
			if s, ok := metaSelector(k); ok {
				return s, nil
			}
			return selector{}, fmt.Errorf("meta %v is not modelled", arg)
		case "ct":
			if k, _ := a["key"].(string); k == "state" && len(a) == 1 {
				return selector{name: "ct state", kind: kCtState, get: func(p *Packet) (value, bool, error) {
					return value{num: uint64(p.ct())}, true, nil
				}}, nil
			}
			return selector{}, fmt.Errorf("ct %v is not modelled (only ct state)", arg)
		case "fib":
			flags, _ := a["flags"].([]any)
			if r, _ := a["result"].(string); r == "type" && len(flags) == 1 && (flags[0] == "daddr" || flags[0] == "saddr") {
				daddr := flags[0] == "daddr"
				return selector{name: fmt.Sprintf("fib %s type", flags[0]), kind: kFibType, get: func(p *Packet) (value, bool, error) {
					if (daddr && p.DstLocal) || (!daddr && p.SrcLocal) {
						return value{num: 1}, true, nil
					}
					return value{num: 0}, true, nil
				}}, nil
			}
			return selector{}, fmt.Errorf("fib %v is not modelled (only fib daddr type local and fib saddr type local)", arg)
		}
		return selector{}, fmt.Errorf("expression %q is not modelled", key)
	}
	panic("unreachable")
}

func payloadSelector(proto, field string) (selector, bool) {
	name := proto + " " + field
	ofFamily := func(k kind, v4 bool, pick func(p *Packet) value) (selector, bool) {
		return selector{name: name, kind: k, get: func(p *Packet) (value, bool, error) {
			if p.Src.Is4() != v4 {
				return value{}, false, nil
			}
			return pick(p), true, nil
		}}, true
	}
	port := func(pick func(p *Packet) uint16) (selector, bool) {
		want := map[string]uint8{"tcp": TCP, "udp": UDP, "sctp": SCTP}[proto]
		return selector{name: name, kind: kPort, get: func(p *Packet) (value, bool, error) {
			switch {
			case proto == "th" && !hasPorts(p.Proto):
				// th has no dependency: the kernel reads whatever is at
				// the ports' offset. The match is decided only if it is
				// decided whatever that is.
				return value{unknown: true}, true, nil
			case proto != "th" && p.Proto != want:
				return value{}, false, nil
			}
			return value{num: uint64(pick(p))}, true, nil
		}}, true
	}
	switch {
	case proto == "ip" && field == "saddr":
		return ofFamily(kAddr4, true, func(p *Packet) value { return value{addr: p.Src} })
	case proto == "ip" && field == "daddr":
		return ofFamily(kAddr4, true, func(p *Packet) value { return value{addr: p.Dst} })
	case proto == "ip6" && field == "saddr":
		return ofFamily(kAddr6, false, func(p *Packet) value { return value{addr: p.Src} })
	case proto == "ip6" && field == "daddr":
		return ofFamily(kAddr6, false, func(p *Packet) value { return value{addr: p.Dst} })
	case proto == "ip" && field == "protocol":
		return ofFamily(kProto, true, func(p *Packet) value { return value{num: uint64(p.Proto)} })
	case (proto == "th" || proto == "tcp" || proto == "udp" || proto == "sctp") && field == "sport":
		return port(func(p *Packet) uint16 { return p.SrcPort })
	case (proto == "th" || proto == "tcp" || proto == "udp" || proto == "sctp") && field == "dport":
		return port(func(p *Packet) uint16 { return p.DstPort })
	case proto == "icmp" && field == "type", proto == "icmpv6" && field == "type":
		want, k := ICMP, kICMPType
		if proto == "icmpv6" {
			want, k = ICMPv6, kICMPv6Type
		}
		return selector{name: name, kind: k, get: func(p *Packet) (value, bool, error) {
			if p.Proto != want {
				return value{}, false, nil
			}
			return value{num: uint64(p.ICMPType)}, true, nil
		}}, true
	}
	return selector{}, false
}

func metaSelector(key string) (selector, bool) {
	name := "meta " + key
	switch key {
	case "l4proto":
		return selector{name: name, kind: kProto, get: func(p *Packet) (value, bool, error) {
			return value{num: uint64(p.Proto)}, true, nil
		}}, true
	case "nfproto":
		return selector{name: name, kind: kNfproto, get: func(p *Packet) (value, bool, error) {
			if p.Src.Is4() {
				return value{num: nfprotos["ipv4"]}, true, nil
			}
			return value{num: nfprotos["ipv6"]}, true, nil
		}}, true
	case "iifname", "oifname":
		return selector{name: name, kind: kIfname, get: func(p *Packet) (value, bool, error) {
			n := p.IIF
			if key == "oifname" {
				n = p.OIF
			}
			// Where the hook has no such interface the kernel's meta
			// expression breaks the rule.
			return value{name: n}, n != "", nil
		}}, true
	case "mark":
		return selector{name: name, kind: kMark, get: func(p *Packet) (value, bool, error) {
			return value{num: uint64(p.Mark)}, true, nil
		}}, true
	}
	return selector{}, false
}
