package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// kernel is the renderer's table in the node's network namespace, through
// package nft: scripts run by nft in the namespace, element changes in
// netlink batches, and the table read back over netlink to adopt it.
type kernel struct {
	t     nft.Table
	netns ns.NetNS // nil: the process's own namespace (or a Fake's table)
}

func openKernel(netnsPath, table string) (*kernel, error) {
	k := &kernel{}
	if netnsPath != "" {
		var err error
		if k.netns, err = ns.GetNS(netnsPath); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", netnsPath, err)
		}
	}
	t, err := nft.Open(k.netns, knftables.InetFamily, table, elementLayout)
	if err != nil {
		k.close()
		return nil, err
	}
	k.t = t
	return k, nil
}

func (k *kernel) close() {
	if k.t != nil {
		k.t.Close()
		k.t = nil
	}
	if k.netns != nil {
		k.netns.Close()
		k.netns = nil
	}
}

// errNoTable is what listing reports when the table does not exist.
var errNoTable = errors.New("no table")

// kernelTable is what listing the table found, in the renderer's terms.
type kernelTable struct {
	// format is the comment of the format set (setFormat), "" without it.
	format string
	chains map[string]*kernelChain
	sets   map[string]*kernelSet
	// maps holds the elements of the dispatch maps: address -> group
	// chain jumped to ("" for another verdict).
	maps     map[string]map[netip.Addr]string
	counters map[string]bool
}

type kernelChain struct {
	base  bool
	rules []string // the rules' comments, in order
}

type kernelSet struct {
	typ      string
	interval bool
	comment  string
	// dynamic and exprs: rules add to it, each element has a counter.
	dynamic, exprs bool
	// elems are the elements' keys as nft writes them, a field each; an
	// interval is an address, a prefix or a range "a-b".
	elems [][]string
}

// list reads the table over netlink: its sets and maps with their
// elements, its chains with their rules' comments, its counters. It is
// only done to adopt the table at the first render of a process and after
// a failed one. The elements of a set or map are read only when its type
// is the one the renderer gives a set of its name: another is not adopted
// (adoptGroup), whatever it holds.
func (k *kernel) list(ctx context.Context) (*kernelTable, error) {
	c, err := k.t.Read(ctx)
	if err != nil {
		return nil, err
	}
	if !c.Exists {
		return nil, errNoTable
	}
	t := &kernelTable{chains: map[string]*kernelChain{}, sets: map[string]*kernelSet{}, maps: map[string]map[netip.Addr]string{}, counters: map[string]bool{}}
	for name, ch := range c.Chains {
		t.chains[name] = &kernelChain{base: ch.Base, rules: ch.Rules}
	}
	for name := range c.Counters {
		t.counters[name] = true
	}
	for name, s := range c.Sets {
		if s.Anonymous {
			continue
		}
		if name == setFormat {
			t.format = s.Comment
			continue
		}
		var elems []*knftables.Element
		if l, ok := elementLayout(name); ok && s.Map == (l.Value != nil) && s.Interval == isInterval(l) && s.Type+s.ValueType == layoutType(l) {
			if elems, err = k.t.Elements(ctx, name); err != nil {
				return nil, err
			}
		}
		if !s.Map {
			ks := &kernelSet{typ: s.Type, interval: s.Interval, comment: s.Comment, dynamic: s.Dynamic, exprs: s.ElementExprs}
			for _, e := range elems {
				ks.elems = append(ks.elems, e.Key)
			}
			t.sets[name] = ks
			continue
		}
		m := map[netip.Addr]string{}
		for _, e := range elems {
			a, err := netip.ParseAddr(e.Key[0])
			if err != nil {
				return nil, fmt.Errorf("map %s: element key %v: %w", name, e.Key, err)
			}
			target := ""
			if len(e.Value) == 1 {
				target, _ = strings.CutPrefix(e.Value[0], "jump ")
				if target == e.Value[0] {
					target = ""
				}
			}
			m[a] = target
		}
		t.maps[name] = m
	}
	return t, nil
}
