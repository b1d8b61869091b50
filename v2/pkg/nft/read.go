package nft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"
)

// The table is read with netlink dumps decoded here rather than with
// google/nftables' listings: those decode rules' expressions (and fail on
// some vcoil writes, "ct original ip daddr"), do not decode set comments
// (where a table's format is) and refuse set types they do not know.

// nfproto is each family's NFPROTO_ number.
var nfproto = map[knftables.Family]byte{
	knftables.InetFamily:   unix.NFPROTO_INET,
	knftables.IPv4Family:   unix.NFPROTO_IPV4,
	knftables.IPv6Family:   unix.NFPROTO_IPV6,
	knftables.ARPFamily:    unix.NFPROTO_ARP,
	knftables.BridgeFamily: unix.NFPROTO_BRIDGE,
	knftables.NetDevFamily: unix.NFPROTO_NETDEV,
}

func familyOf(proto byte) (knftables.Family, bool) {
	for f, p := range nfproto {
		if p == proto {
			return f, true
		}
	}
	return "", false
}

// message is one message of a dump: its family and attributes.
type message struct {
	family byte
	attrs  *netlink.AttributeDecoder
}

// dump runs an nf_tables dump (msg: unix.NFT_MSG_GET*) in netns of family,
// limited to table when not "" (attribute 1 of every object type is its
// table), and calls f on each message.
func dump(netns ns.NetNS, msg uint16, family byte, table string, f func(message) error) error {
	cfg := &netlink.Config{}
	if netns != nil {
		cfg.NetNS = int(netns.Fd())
	}
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return fmt.Errorf("netfilter netlink socket: %w", err)
	}
	defer conn.Close()
	var attrs []byte
	if table != "" {
		ae := netlink.NewAttributeEncoder()
		ae.String(1, table)
		if attrs, err = ae.Encode(); err != nil {
			return err
		}
	}
	msgs, err := conn.Execute(netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(unix.NFNL_SUBSYS_NFTABLES<<8 | msg),
			Flags: netlink.Request | netlink.Dump,
		},
		Data: append([]byte{family, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if len(m.Data) < 4 {
			continue
		}
		if table != "" && tableOf(m.Data[4:]) != table {
			continue // not every kernel filters every dump by table
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return err
		}
		ad.ByteOrder = binary.BigEndian
		if err := f(message{m.Data[0], ad}); err != nil {
			return err
		}
		if err := ad.Err(); err != nil {
			return err
		}
	}
	return nil
}

// tableOf is the table of a message: its attribute 1.
func tableOf(b []byte) string {
	ad, err := netlink.NewAttributeDecoder(b)
	if err != nil {
		return ""
	}
	for ad.Next() {
		if ad.Type() == 1 {
			return ad.String()
		}
	}
	return ""
}

// exists is true when the table exists.
func (k *kernel) exists() (bool, error) {
	tables, err := ListTables(k.netns)
	if err != nil {
		return false, err
	}
	return slices.Contains(tables, k.id), nil
}

// ListTables lists the tables of every family in netns (nil: the
// process's own).
func ListTables(netns ns.NetNS) ([]TableID, error) {
	var out []TableID
	err := dump(netns, unix.NFT_MSG_GETTABLE, unix.NFPROTO_UNSPEC, "", func(m message) error {
		fam, ok := familyOf(m.family)
		for m.attrs.Next() {
			if m.attrs.Type() == unix.NFTA_TABLE_NAME && ok {
				out = append(out, TableID{fam, m.attrs.String()})
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list nftables tables: %w", err)
	}
	return out, nil
}

// Read lists the table over netlink.
func (k *kernel) Read(ctx context.Context) (*Contents, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &Contents{Sets: map[string]*SetInfo{}, Chains: map[string]*ChainInfo{}, Counters: map[string]bool{}}
	exists, err := k.exists()
	if err != nil || !exists {
		return c, err
	}
	c.Exists = true
	fam, table := nfproto[k.id.Family], k.id.Name
	wrap := func(what string, err error) error {
		if errors.Is(err, unix.ENOENT) {
			return nil // deleted meanwhile: read as it was
		}
		if err != nil {
			return fmt.Errorf("nftables table %s: list its %s: %w", k.id, what, err)
		}
		return nil
	}
	err = dump(k.netns, unix.NFT_MSG_GETSET, fam, table, func(m message) error {
		s := decodeSet(m.attrs)
		c.Sets[s.Name] = s
		return nil
	})
	if err := wrap("sets", err); err != nil {
		return nil, err
	}
	var order []string
	err = dump(k.netns, unix.NFT_MSG_GETCHAIN, fam, table, func(m message) error {
		ch := &ChainInfo{Rules: []string{}}
		for m.attrs.Next() {
			switch m.attrs.Type() {
			case unix.NFTA_CHAIN_NAME:
				ch.Name = m.attrs.String()
			case unix.NFTA_CHAIN_HOOK:
				ch.Base = true
			}
		}
		c.Chains[ch.Name] = ch
		order = append(order, ch.Name)
		return nil
	})
	if err := wrap("chains", err); err != nil {
		return nil, err
	}
	err = dump(k.netns, unix.NFT_MSG_GETRULE, fam, table, func(m message) error {
		var chain, comment string
		for m.attrs.Next() {
			switch m.attrs.Type() {
			case unix.NFTA_RULE_CHAIN:
				chain = m.attrs.String()
			case unix.NFTA_RULE_USERDATA:
				comment, _ = userdata.GetString(m.attrs.Bytes(), userdata.TypeComment)
			}
		}
		if ch := c.Chains[chain]; ch != nil {
			ch.Rules = append(ch.Rules, comment)
		}
		return nil
	})
	if err := wrap("rules", err); err != nil {
		return nil, err
	}
	counters, err := k.counters()
	if err := wrap("counters", err); err != nil {
		return nil, err
	}
	for _, cn := range counters {
		c.Counters[cn.Name] = true
	}
	return c, nil
}

// The kernel's attributes of a set's element expressions (enum
// nft_set_attributes), which x/sys/unix does not name.
const (
	nftaSetExpr        = 17
	nftaSetExpressions = 18
)

func decodeSet(ad *netlink.AttributeDecoder) *SetInfo {
	s := &SetInfo{}
	for ad.Next() {
		switch ad.Type() {
		case unix.NFTA_SET_NAME:
			s.Name = ad.String()
		case unix.NFTA_SET_FLAGS:
			flags := ad.Uint32()
			s.Anonymous = flags&unix.NFT_SET_ANONYMOUS != 0
			s.Interval = flags&unix.NFT_SET_INTERVAL != 0
			s.Map = flags&unix.NFT_SET_MAP != 0
			s.Dynamic = flags&unix.NFT_SET_EVAL != 0
		case nftaSetExpr, nftaSetExpressions:
			s.ElementExprs = true
		case unix.NFTA_SET_KEY_TYPE:
			s.Type = typeName(ad.Uint32())
		case unix.NFTA_SET_DATA_TYPE:
			s.ValueType = typeName(ad.Uint32())
		case unix.NFTA_SET_USERDATA:
			s.Comment, _ = userdata.GetString(ad.Bytes(), userdata.NFTNL_UDATA_SET_COMMENT)
		}
	}
	if !s.Map {
		s.ValueType = ""
	}
	return s
}

// nft's data types (nftables' include/datatype.h), by number.
var typeNames = map[uint32]string{
	1: "verdict", 2: "nf_proto", 3: "bitmask", 4: "integer", 5: "string", 6: "ll_addr",
	7: "ipv4_addr", 8: "ipv6_addr", 9: "ether_addr", 10: "ether_type", 11: "arp_op",
	12: "inet_proto", 13: "inet_service", 14: "icmp_type", 15: "tcp_flag", 19: "mark",
	20: "iface_index", 21: "iface_type", 22: "realm", 23: "classid", 24: "uid", 25: "gid",
	26: "ct_state", 27: "ct_dir", 28: "ct_status", 29: "icmpv6_type", 30: "ct_label",
	31: "pkttype", 32: "icmp_code", 33: "icmpv6_code", 34: "icmpx_code", 35: "devgroup",
	36: "dscp", 37: "ecn", 38: "fib_addrtype", 39: "boolean", 40: "ct_event",
	41: "ifname", 42: "igmp_type", 43: "time", 44: "hour", 45: "day",
}

// typeName writes a type number as nft does, a concatenation's fields
// (6 bits each, the first highest) joined by " . ".
func typeName(magic uint32) string {
	if magic == 0xffffff00 {
		return "verdict"
	}
	var parts []string
	for m := magic; m != 0; m >>= 6 {
		t := m & 0x3f
		name, ok := typeNames[t]
		if !ok {
			name = "type" + strconv.Itoa(int(t))
		}
		parts = append([]string{name}, parts...)
	}
	if len(parts) == 0 {
		return "type0"
	}
	if _, ok := typeNames[magic]; ok {
		return typeNames[magic]
	}
	return strings.Join(parts, " . ")
}

// Counters lists the table's named counters over netlink.
func (k *kernel) Counters(ctx context.Context) ([]Counter, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cs, err := k.counters()
	if err != nil {
		return nil, fmt.Errorf("nftables table %s: list its counters: %w", k.id, err)
	}
	return cs, nil
}

func (k *kernel) counters() ([]Counter, error) {
	var out []Counter
	err := dump(k.netns, unix.NFT_MSG_GETOBJ, nfproto[k.id.Family], k.id.Name, func(m message) error {
		var c Counter
		var isCounter bool
		for m.attrs.Next() {
			switch m.attrs.Type() {
			case unix.NFTA_OBJ_NAME:
				c.Name = m.attrs.String()
			case unix.NFTA_OBJ_TYPE:
				isCounter = m.attrs.Uint32() == unix.NFT_OBJECT_COUNTER
			case unix.NFTA_OBJ_DATA:
				m.attrs.Nested(func(nd *netlink.AttributeDecoder) error {
					for nd.Next() {
						switch nd.Type() {
						case unix.NFTA_COUNTER_BYTES:
							c.Bytes = nd.Uint64()
						case unix.NFTA_COUNTER_PACKETS:
							c.Packets = nd.Uint64()
						}
					}
					return nil
				})
			}
		}
		if isCounter {
			out = append(out, c)
		}
		return nil
	})
	return out, err
}
