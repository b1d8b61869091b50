package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// nfnetlink: the nftables subsystem, its multicast group, and the
// messages the monitor reads (linux/netfilter/nf_tables.h). The kernel
// notifies a transaction's objects when it commits it, and then the new
// generation; deletions come as their own types (DELRULE 8, DELSETELEM
// 14, DESTROY*), which the monitor ignores.
const (
	NFNLSubsysNFTables = 10
	nfnlGroupNFTables  = 7
	nftMsgNewRule      = 6
	NFTMsgNewSetElem   = 12
	nftMsgNewGen       = 15
)

// The attributes on the paths to the data values: a set element's key and
// data, and the data of the expressions that carry one in a rule.
const (
	nftaListElem = 1 // each entry of a list (elements, expressions)

	nftaSetElemListElements = 3
	nftaSetElemKey          = 1
	nftaSetElemData         = 2
	nftaSetElemFlags        = 3
	// An interval set (rbtree) holds a range as two elements, the second
	// flagged as its end and keyed by the first address past the range.
	nftSetElemIntervalEnd = 1

	nftaRuleExpressions = 4
	nftaExprName        = 1
	nftaExprData        = 2
	nftaCmpData         = 3
	nftaImmediateData   = 2

	nftaDataValue = 1
)

// appendNoticeAddrs appends the addresses of EndpointRange that an
// nftables notice adds to the kernel: the data values of a new set or map
// element (key and data, so a policy set's address as well as a DNAT map's
// endpoint), and those of a new rule's cmp and immediate expressions
// (kube-proxy's `ip saddr 10.200.0.11` and `dnat to 10.200.0.11:8080`).
// Other messages, deletions among them, add nothing.
//
// Only data values are read, where the kernel keeps what elements hold
// and rules compare or load: text (table, chain and set names, comments
// in user data, kube-proxy's chain names that spell the address) and the
// other numbers (handles, positions, flags, timeouts, counters) are never
// taken for an address, which a search of the raw bytes could not tell
// apart. What remains to mistake for one is another 4-byte word of a
// data value whose bytes lie in 10.200.0.0/13: a port, padded to 4 bytes
// in a concatenation, 2760–2767 reads as 10.200.0.0–10.207.0.0; a mark or
// another number compared or loaded; a 32-bit group of an IPv6 address
// (::ffff:10.200.0.1 holds one). The proxies under test write none of
// these (their ports are 80 and 8080), and nothing else in the lab uses
// 10/8 (objects.go).
//
// IPv4 only: EndpointRange and the benchmark's EndpointSlices are IPv4,
// whose addresses the kernel stores as one 4-byte word, 4-byte aligned
// within a value (each component of a concatenation is padded to 4 bytes).
func appendNoticeAddrs(dst []netip.Addr, m syscall.NetlinkMessage) []netip.Addr {
	if m.Header.Type>>8 != NFNLSubsysNFTables || len(m.Data) < 4 {
		return dst
	}
	// The attributes follow a 4-byte nfgenmsg.
	switch body := m.Data[4:]; m.Header.Type & 0xff {
	case NFTMsgNewSetElem:
		return appendSetElemAddrs(dst, body)
	case nftMsgNewRule:
		return appendRuleAddrs(dst, body)
	}
	return dst
}

// attrs walks the netlink attributes of a payload: after next, typ and
// payload are the next attribute's; it stops at the first malformed one.
// The type is read without its flags, but nesting is known from the
// message's layout, not from NLA_F_NESTED: nf_tables opens its nests with
// nla_nest_start_noflag (none of a 6.18 kernel's notices carries the
// flag), so the walk descends where the layout has a nest. A struct
// rather than an iterator function, whose closure would be allocated for
// every nest of 100,000 elements.
type attrs struct {
	b       []byte
	typ     uint16
	payload []byte
}

func (a *attrs) next() bool {
	if len(a.b) < unix.SizeofNlAttr {
		return false
	}
	l := int(binary.NativeEndian.Uint16(a.b))
	if l < unix.SizeofNlAttr || l > len(a.b) {
		return false
	}
	a.typ = binary.NativeEndian.Uint16(a.b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
	a.payload = a.b[unix.SizeofNlAttr:l]
	a.b = a.b[min((l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1), len(a.b)):]
	return true
}

// appendSetElemAddrs reads a NEWSETELEM notice: a list of elements, each
// with a key and maybe data, both nests of one data value (a verdict map's
// data is a verdict instead, and holds no address). A range is taken for
// its first address: the key, not the key's end (NFTA_SET_ELEM_KEY_END)
// nor an interval's end element.
func appendSetElemAddrs(dst []netip.Addr, body []byte) []netip.Addr {
	for list := (attrs{b: body}); list.next(); {
		if list.typ != nftaSetElemListElements {
			continue
		}
		for elem := (attrs{b: list.payload}); elem.next(); {
			if elem.typ != nftaListElem {
				continue
			}
			mark, end := len(dst), false
			for a := (attrs{b: elem.payload}); a.next(); {
				switch a.typ {
				case nftaSetElemKey, nftaSetElemData:
					dst = appendDataValueAddrs(dst, a.payload)
				case nftaSetElemFlags:
					end = len(a.payload) >= 4 && binary.BigEndian.Uint32(a.payload)&nftSetElemIntervalEnd != 0
				}
			}
			if end {
				// The end of an interval is the first address past it.
				dst = dst[:mark]
			}
		}
	}
	return dst
}

// appendRuleAddrs reads a NEWRULE notice: a list of expressions, each a
// name and its attributes. A cmp compares a register with a data value,
// an immediate loads one (a DNAT's address and port go to two registers
// this way); a lookup's addresses are a set's elements, notified apart.
func appendRuleAddrs(dst []netip.Addr, body []byte) []netip.Addr {
	for list := (attrs{b: body}); list.next(); {
		if list.typ != nftaRuleExpressions {
			continue
		}
		for expr := (attrs{b: list.payload}); expr.next(); {
			if expr.typ != nftaListElem {
				continue
			}
			var name, data []byte
			for a := (attrs{b: expr.payload}); a.next(); {
				switch a.typ {
				case nftaExprName:
					name = a.payload
				case nftaExprData:
					data = a.payload
				}
			}
			var value uint16
			switch string(cstring(name)) {
			case "cmp":
				value = nftaCmpData
			case "immediate":
				value = nftaImmediateData
			default:
				continue
			}
			for a := (attrs{b: data}); a.next(); {
				if a.typ == value {
					dst = appendDataValueAddrs(dst, a.payload)
				}
			}
		}
	}
	return dst
}

// cstring is b up to its terminating NUL.
func cstring(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// appendDataValueAddrs reads an nft_data nest: the 4-byte words of its
// value that lie in EndpointRange (a verdict has no value).
func appendDataValueAddrs(dst []netip.Addr, nest []byte) []netip.Addr {
	for a := (attrs{b: nest}); a.next(); {
		if a.typ != nftaDataValue {
			continue
		}
		for v := a.payload; len(v) >= 4; v = v[4:] {
			if a := netip.AddrFrom4([4]byte(v)); EndpointRange.Contains(a) {
				dst = append(dst, a)
			}
		}
	}
	return dst
}

// ReadNotices reads an nftables notice socket (NFTablesSocket) until ctx
// ends or the socket fails, and hands each datagram's messages to fn with
// the time it was read; fn must not keep the messages, whose buffer is
// read into again. lost counts the socket's overflows (notices the kernel
// dropped). The caller closes fd.
func ReadNotices(ctx context.Context, fd int, lost *atomic.Int64, fn func(now time.Time, msgs []syscall.NetlinkMessage)) error {
	buf := make([]byte, 1<<20)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		switch {
		case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOBUFS):
			lost.Add(1)
			continue
		case err != nil:
			return err
		}
		now := time.Now()
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		fn(now, msgs)
	}
	return nil
}

// NFTablesSocket opens a netfilter netlink socket in the network namespace
// at nsPath, subscribed to nftables' notices, with a large buffer and a
// 1 s receive timeout (so that a reader sees its context end). A socket
// stays in the namespace it was made in.
func NFTablesSocket(nsPath string) (int, error) {
	fd := -1
	err := ns.WithNetNSPath(nsPath, func(ns.NetNS) error {
		var err error
		if fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1 << (nfnlGroupNFTables - 1)}); err != nil {
			unix.Close(fd)
			return err
		}
		return nil
	})
	if err != nil {
		return -1, fmt.Errorf("netfilter netlink socket in %s: %w", nsPath, err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 64<<20)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 1})
	return fd, nil
}
