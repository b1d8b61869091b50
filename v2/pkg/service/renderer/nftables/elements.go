package nftables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"

	gnft "github.com/google/nftables"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The elements of the table's sets and maps are read over netlink rather
// than through `nft --json list`: at ten thousand services nft takes
// seconds to print the 110,000 elements and Go as long again to parse its
// JSON, while the kernel hands them over in a few tens of milliseconds.
// The price is decoding the kernel's bytes, which this file does only for
// the layouts the renderer declares (layout.go); a set of another name is
// not read. Each field of a concatenation occupies a whole number of
// 32-bit registers, so a protocol (1 byte) or a port (2 bytes) takes 4.
// Elements are returned in knftables' text form, the one `nft --json list`
// gives, so that adoption does not depend on how they were read.

// field is one part of a key or value.
type field uint8

const (
	fieldAddr    field = iota // ipv4_addr or ipv6_addr
	fieldProto                // inet_proto
	fieldPort                 // inet_service
	fieldPrefix               // an address range of an interval set: the key's address to the end key's
	fieldVerdict              // a verdict map's value
)

// elementLayout is the key and value of a set or map of the table.
type elementLayout struct {
	fam   string
	key   []field
	value []field
}

var (
	frontendFields = []field{fieldAddr, fieldProto, fieldPort}
	endpointFields = []field{fieldAddr, fieldPort}
)

// layoutOf is the layout of the set or map name, false for a name the
// renderer does not declare.
func layoutOf(name string) (elementLayout, bool) {
	if isAffinityMap(name) {
		fam := name[len(mapAffinityPrefix) : len(mapAffinityPrefix)+1]
		return elementLayout{fam, append([]field{fieldAddr}, frontendFields...), endpointFields}, true
	}
	set, fam, _, ok := parseSetName(name)
	if !ok {
		return elementLayout{}, false
	}
	switch set {
	case setServices, setExternalLocal, setAffinityFrontends:
		return elementLayout{fam, frontendFields, []field{fieldVerdict}}, true
	case setBackends, setBackendsLocal:
		return elementLayout{fam, frontendFields, endpointFields}, true
	case setNoEndpoints, setFirewall:
		return elementLayout{fam, frontendFields, nil}, true
	case setFirewallAllow:
		return elementLayout{fam, append(frontendFields[:3:3], fieldPrefix), nil}, true
	case setHairpin:
		return elementLayout{fam, []field{fieldAddr, fieldAddr}, nil}, true
	}
	return elementLayout{}, false
}

// netlinkElements lists the elements of the table's set or map name over
// netlink, in the namespace of conn.
func netlinkElements(conn *gnft.Conn, table, name string) ([]*knftables.Element, error) {
	l, ok := layoutOf(name)
	if !ok {
		return nil, fmt.Errorf("set %s has no known layout", name)
	}
	set := &gnft.Set{Name: name, Table: &gnft.Table{Name: table, Family: gnft.TableFamilyINet}}
	raw, err := conn.GetSetElements(set)
	if err != nil {
		return nil, err
	}
	elems := make([]*knftables.Element, 0, len(raw))
	for i := range raw {
		e, err := l.decode(&raw[i])
		if err != nil {
			return nil, fmt.Errorf("element %d of %s: %w", i, name, err)
		}
		if e == nil {
			continue
		}
		if l.value != nil {
			e.Map = name
		} else {
			e.Set = name
		}
		elems = append(elems, e)
	}
	return elems, nil
}

// decode turns one element into text; nil for the closing element of a
// range in an interval set of one field, which the renderer never writes.
func (l elementLayout) decode(raw *gnft.SetElement) (*knftables.Element, error) {
	if raw.IntervalEnd {
		return nil, nil
	}
	key, err := l.fields(l.key, raw.Key, raw.KeyEnd)
	if err != nil {
		return nil, fmt.Errorf("key %x: %w", raw.Key, err)
	}
	e := &knftables.Element{Key: key}
	if l.value != nil {
		if e.Value, err = l.fields(l.value, raw.Val, nil); err != nil {
			return nil, fmt.Errorf("value %x: %w", raw.Val, err)
		}
	}
	return e, nil
}

func (l elementLayout) fields(fields []field, b, end []byte) ([]string, error) {
	addrLen := 4
	if l.fam == "6" {
		addrLen = 16
	}
	out := make([]string, 0, len(fields))
	off := 0
	for _, f := range fields {
		n := 4
		if f == fieldAddr || f == fieldPrefix {
			n = addrLen
		}
		if f == fieldVerdict {
			n = len(b) - off
		}
		if off+n > len(b) {
			return nil, fmt.Errorf("%d bytes, want more", len(b))
		}
		v := b[off : off+n]
		switch f {
		case fieldAddr:
			a, _ := netip.AddrFromSlice(v)
			out = append(out, a.String())
		case fieldProto:
			out = append(out, proto(v[0]).String())
		case fieldPort:
			out = append(out, strconv.Itoa(int(binary.BigEndian.Uint16(v))))
		case fieldPrefix:
			lo, _ := netip.AddrFromSlice(v)
			hi := lo
			if len(end) >= off+n {
				hi, _ = netip.AddrFromSlice(end[off : off+n])
			}
			out = append(out, rangeText(lo, hi))
		case fieldVerdict:
			s, err := verdictText(v)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		off += n
	}
	if off != len(b) {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), off)
	}
	return out, nil
}

// rangeText writes lo-hi as nft lists it: an address, a prefix, or a
// range.
func rangeText(lo, hi netip.Addr) string {
	if lo == hi {
		return lo.String()
	}
	for bits := lo.BitLen() - 1; bits >= 0; bits-- {
		p := netip.PrefixFrom(lo, bits)
		if p.Masked().Addr() != lo {
			break
		}
		if lastOf(p) == hi {
			return p.String()
		}
	}
	return lo.String() + "-" + hi.String()
}

// lastOf is the last address of prefix p.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Netlink attributes of a verdict (linux/netfilter/nf_tables.h).
const (
	nftaVerdictCode  = 1
	nftaVerdictChain = 2
	nfDrop           = 0
	nfAccept         = 1
	nftContinue      = -1
	nftReturn        = -5
	nftJump          = -3
	nftGoto          = -4
)

// verdictText writes a verdict's netlink attributes as nft lists them
// ("drop", "goto pick4-3").
func verdictText(b []byte) (string, error) {
	var code int32
	var chain string
	haveCode := false
	for len(b) >= 4 {
		n := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) & 0x3fff
		if n < 4 || n > len(b) {
			return "", fmt.Errorf("verdict attribute of %d bytes in %d", n, len(b))
		}
		v := b[4:n]
		switch typ {
		case nftaVerdictCode:
			if len(v) != 4 {
				return "", fmt.Errorf("verdict code of %d bytes", len(v))
			}
			code, haveCode = int32(binary.BigEndian.Uint32(v)), true
		case nftaVerdictChain:
			for len(v) > 0 && v[len(v)-1] == 0 {
				v = v[:len(v)-1]
			}
			chain = string(v)
		}
		b = b[min((n+3)&^3, len(b)):]
	}
	if !haveCode {
		return "", fmt.Errorf("verdict without a code")
	}
	switch code {
	case nfDrop:
		return "drop", nil
	case nfAccept:
		return "accept", nil
	case nftContinue:
		return "continue", nil
	case nftReturn:
		return "return", nil
	case nftJump:
		return "jump " + chain, nil
	case nftGoto:
		return "goto " + chain, nil
	}
	return "verdict " + strconv.Itoa(int(code)), nil
}

// ruleComment is a rule's chain and comment, all the renderer reads of a
// rule (its comment identifies it, layout.go's ruleID).
type ruleComment struct{ chain, comment string }

// Netlink attributes of a rule (linux/netfilter/nf_tables.h).
const (
	nftaRuleTable    = 1
	nftaRuleChain    = 2
	nftaRuleUserdata = 7
)

// ruleComments dumps the rules of the inet table over netlink in the
// namespace nsFd (0: the process's own), in chain order. It decodes only
// their chain and comment: google/nftables' GetRules decodes the
// expressions too, and fails on some the renderer writes ("ct original
// ip daddr").
func ruleComments(nsFd int, table string) ([]ruleComment, error) {
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: nsFd})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ae := netlink.NewAttributeEncoder()
	ae.String(nftaRuleTable, table)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | unix.NFT_MSG_GETRULE),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		return nil, err
	}
	rules := make([]ruleComment, 0, len(msgs))
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		var r ruleComment
		var inTable bool
		for ad.Next() {
			switch ad.Type() {
			case nftaRuleTable:
				inTable = ad.String() == table
			case nftaRuleChain:
				r.chain = ad.String()
			case nftaRuleUserdata:
				r.comment, _ = userdata.GetString(ad.Bytes(), userdata.TypeComment)
			}
		}
		if err := ad.Err(); err != nil {
			return nil, err
		}
		if inTable {
			rules = append(rules, r)
		}
	}
	return rules, nil
}
