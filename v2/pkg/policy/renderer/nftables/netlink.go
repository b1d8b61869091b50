package nftables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	gnft "github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// elemOp is one element to add to or delete from a set or map, in nft's
// text: the renderer writes it either into an nft script (a table's
// creation or replacement, one transaction with the objects) or over
// netlink (every other change). nft loads the elements of every interval
// set of the namespace before any element command, which costs a quarter
// of a second at a thousand pods (docs/policy.md); a netlink batch is one
// transaction too and costs what it changes.
type elemOp struct {
	del  bool
	set  string
	elem string
}

// setKind is how a set's elements are encoded, by the set's name.
type setKind int

const (
	kindAddr     setKind = iota // h4, h6
	kindInterval                // n4, n6, s<i>-4, s<i>-6
	kindHostPort                // hp4, hp6
	kindSelf                    // self4, self6
	kindDispatch                // in4, in6, eg4, eg6
)

func kindOf(set string) (setKind, error) {
	switch set {
	case selfSets[v4], selfSets[v6]:
		return kindSelf, nil
	}
	for _, names := range dirMaps {
		for _, n := range names {
			if n == set {
				return kindDispatch, nil
			}
		}
	}
	_, suffix, ok := strings.Cut(set, "-")
	switch {
	case !ok:
	case suffix == "hp4" || suffix == "hp6":
		return kindHostPort, nil
	case suffix == "h4" || suffix == "h6":
		return kindAddr, nil
	case suffix == "n4" || suffix == "n6" || strings.HasPrefix(suffix, "s"):
		return kindInterval, nil
	}
	return 0, fmt.Errorf("set %s: not one of the renderer's", set)
}

// encode turns an element's text into netlink set elements.
func encode(kind setKind, text string) ([]gnft.SetElement, error) {
	addr := func(s string) ([]byte, error) {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		return a.AsSlice(), nil
	}
	switch kind {
	case kindAddr:
		k, err := addr(text)
		return []gnft.SetElement{{Key: k}}, err
	case kindSelf:
		a, b, _ := strings.Cut(text, " . ")
		ka, err := addr(a)
		if err != nil {
			return nil, err
		}
		kb, err := addr(b)
		return []gnft.SetElement{{Key: append(ka, kb...)}}, err
	case kindDispatch:
		// "addr : jump chain" to add, "addr" to delete.
		a, verdict, ok := strings.Cut(text, " : jump ")
		k, err := addr(a)
		if err != nil {
			return nil, fmt.Errorf("map element %q: %w", text, err)
		}
		if !ok {
			return []gnft.SetElement{{Key: k}}, nil
		}
		return []gnft.SetElement{{Key: k, VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: verdict}}}, nil
	case kindHostPort:
		parts := strings.Split(text, " . ")
		if len(parts) != 3 {
			return nil, fmt.Errorf("element %q", text)
		}
		k, err := addr(parts[0])
		if err != nil {
			return nil, err
		}
		proto, ok := parseProtocol(parts[1])
		port, perr := strconv.ParseUint(parts[2], 10, 16)
		if !ok || perr != nil {
			return nil, fmt.Errorf("element %q", text)
		}
		// Concatenated fields are padded to 32-bit registers.
		k = append(k, protoNumber(proto), 0, 0, 0)
		k = binary.BigEndian.AppendUint16(k, uint16(port))
		return []gnft.SetElement{{Key: append(k, 0, 0)}}, nil
	case kindInterval:
		iv, err := parseInterval(text)
		if err != nil {
			return nil, err
		}
		// An interval set (rbtree) holds a start and, unless the interval
		// reaches the family's last address, an end marker after it.
		out := []gnft.SetElement{{Key: iv.first.AsSlice()}}
		if next := iv.last.Next(); next.IsValid() {
			out = append(out, gnft.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
		return out, nil
	}
	return nil, fmt.Errorf("element %q of an unknown kind", text)
}

func protoNumber(p interface{ String() string }) byte {
	switch p.String() {
	case "tcp":
		return 6
	case "udp":
		return 17
	case "sctp":
		return 132
	}
	return 0
}

// parseInterval reads interval.elem.
func parseInterval(s string) (interval, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return prefixInterval(p), nil
	}
	if a, b, ok := strings.Cut(s, "-"); ok {
		first, err := netip.ParseAddr(a)
		if err != nil {
			return interval{}, err
		}
		last, err := netip.ParseAddr(b)
		return interval{first, last}, err
	}
	a, err := netip.ParseAddr(s)
	return interval{a, a}, err
}

// applyElements sends ops as one netlink batch: one transaction.
func (k *kernel) applyElements(ops []elemOp) error {
	conn, err := k.netlinkConn()
	if err != nil {
		return err
	}
	for start := 0; start < len(ops); {
		end := start
		for end < len(ops) && ops[end].set == ops[start].set && ops[end].del == ops[start].del {
			end++
		}
		kind, err := kindOf(ops[start].set)
		if err != nil {
			return err
		}
		var elems []gnft.SetElement
		for _, op := range ops[start:end] {
			e, err := encode(kind, op.elem)
			if err != nil {
				return fmt.Errorf("set %s: %w", op.set, err)
			}
			elems = append(elems, e...)
		}
		set := &gnft.Set{Table: &gnft.Table{Name: k.table, Family: gnft.TableFamilyINet}, Name: ops[start].set}
		if ops[start].del {
			err = conn.SetDeleteElements(set, elems)
		} else {
			err = conn.SetAddElements(set, elems)
		}
		if err != nil {
			return fmt.Errorf("set %s: %w", ops[start].set, err)
		}
		start = end
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("netlink batch of %d element changes: %w", len(ops), err)
	}
	return nil
}

func (k *kernel) netlinkConn() (*gnft.Conn, error) {
	if k.nl != nil {
		return k.nl, nil
	}
	var opts []gnft.ConnOption
	if k.netns != nil {
		opts = append(opts, gnft.WithNetNSFd(int(k.netns.Fd())))
	}
	conn, err := gnft.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("nftables netlink connection: %w", err)
	}
	k.nl = conn
	return conn, nil
}
