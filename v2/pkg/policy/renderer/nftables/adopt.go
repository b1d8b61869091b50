package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// adoption is what reading the kernel's table found.
type adoption struct {
	table *kernelTable // nil: there is no table
	// purge: the table cannot be adopted and is replaced (adopt).
	purge bool
}

// adoptKernel empties the mirror and refills it from the kernel's table,
// at the first Render and after a failed one.
func (r *Renderer) adoptKernel(ctx context.Context) (*adoption, error) {
	r.resetMirror()
	kt, err := r.k.list(ctx)
	switch {
	case errors.Is(err, errNoTable):
		return &adoption{}, nil
	case err != nil:
		return nil, fmt.Errorf("render policies: read table inet %s: %w", r.cfg.Table, err)
	}
	purge, err := r.adopt(kt)
	if err != nil {
		return nil, fmt.Errorf("render policies: table inet %s: %w", r.cfg.Table, err)
	}
	if purge {
		r.resetMirror()
	}
	return &adoption{table: kt, purge: purge}, nil
}

// baseMatches says whether the table's base chains, maps and version are
// the ones this renderer writes.
func baseMatches(kt *kernelTable, podIfPrefix string) bool {
	if kt.format != formatComment || !kt.counters[counterUnknownSource] {
		return false
	}
	for f, name := range srcSets {
		if s := kt.sets[name]; s == nil || s.typ != addrType(f) || !s.interval {
			return false
		}
	}
	for s := range slotMaps {
		for _, name := range slotMaps[s] {
			if _, ok := kt.maps[name]; !ok {
				return false
			}
		}
	}
	for _, names := range deniedSets {
		for f, name := range names {
			if !deniedSetMatches(kt.sets[name], f) {
				return false
			}
		}
	}
	// The self sets hold the addresses of the egress maps.
	for f, name := range selfSets {
		s := kt.sets[name]
		if s == nil {
			return false
		}
		egress := map[netip.Addr]bool{}
		for sl := range slotMaps {
			if slot(sl).dir() == renderer.Egress {
				for a := range kt.maps[slotMaps[sl][f]] {
					egress[a] = true
				}
			}
		}
		if len(s.elems) != len(egress) {
			return false
		}
		for _, e := range s.elems {
			if a, err := selfElemOf(e); err != nil || !egress[a] {
				return false
			}
		}
	}
	for name, rules := range baseRules(podIfPrefix) {
		c := kt.chains[name]
		if c == nil || !c.base || len(c.rules) != len(rules) {
			return false
		}
		for i, rule := range rules {
			if c.rules[i] != ruleID(rule) {
				return false
			}
		}
	}
	return true
}

// deniedSetMatches says whether s is denied set of family f as the
// renderer declares it.
func deniedSetMatches(s *kernelSet, f int) bool {
	return s != nil && s.typ == addrType(f) && !s.interval && s.dynamic && s.exprs && s.comment == deniedSetComment
}

// adopt fills the mirror from the kernel's table. It returns purge when
// the table is one this vcoild cannot adopt (another layout of an older
// version, or objects it does not recognize): the plan then replaces the
// whole table in one transaction, so that no pod is ever unfiltered.
func (r *Renderer) adopt(kt *kernelTable) (purge bool, err error) {
	reason, err := r.adoptTable(kt)
	if reason != "" {
		r.log.Info("cannot adopt the policy table: replacing it in one transaction", "table", r.cfg.Table, "reason", reason)
	}
	return reason != "", err
}

// adoptTable is adopt; it returns why the table cannot be adopted.
func (r *Renderer) adoptTable(kt *kernelTable) (string, error) {
	if kt.format != formatComment {
		if v, ok := nft.ParseFormatComment(formatKind, kt.format); ok {
			if err := formatversion.Check("nftables table inet "+r.cfg.Table, v, formatVersion); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("its format %q is not this vcoild's (%q)", kt.format, formatComment), nil
	}
	// The self sets follow the egress maps; baseMatches checks them.
	sets := map[string]bool{selfSets[v4]: true, selfSets[v6]: true}
	for _, names := range deniedSets {
		for f, name := range names {
			sets[name] = true
			if s := kt.sets[name]; s != nil && !deniedSetMatches(s, f) {
				// The base's "add set" would fail over it.
				return fmt.Sprintf("set %s is not a set of denied packets of this vcoild's", name), nil
			}
		}
	}
	for f, name := range srcSets {
		sets[name] = true
		if s := kt.sets[name]; s != nil && s.interval {
			ivs, err := intervalsOf(s)
			if err != nil {
				return fmt.Sprintf("set %s: %v", name, err), nil
			}
			r.srcs[f] = ivs
		}
	}
	for name := range kt.chains {
		if name == chainForward || name == chainPostrouting {
			continue
		}
		k, n, ok := parseGroupName(name)
		if !ok {
			return "unknown chain " + name, nil
		}
		g, err := r.adoptGroup(kt, k, name)
		if err != nil {
			return fmt.Sprintf("group %s: %v", name, err), nil
		}
		for _, s := range g.sets() {
			sets[s.name] = true
		}
		r.groups[name] = g
		if other := r.byKey[g.key]; other == nil || other.name > g.name {
			r.byKey[g.key] = g
		}
		r.nextID = max(r.nextID, n+1)
	}
	for name := range kt.sets {
		if !sets[name] {
			return "unknown set " + name, nil
		}
	}
	for s := range slotMaps {
		for _, name := range slotMaps[s] {
			for a, target := range kt.maps[name] {
				g := r.groups[target]
				if g == nil || g.slot() != slot(s) {
					return fmt.Sprintf("map %s sends %s to %q, not a group of its tier and direction", name, a, target), nil
				}
				r.elems[s][a] = g
				g.refs++
			}
		}
	}
	return "", nil
}

// adoptGroup reads group chain name of kind k from the kernel: its
// direction, its content from its sets, and checks its rules.
func (r *Renderer) adoptGroup(kt *kernelTable, k kind, name string) (*group, error) {
	kc := kt.chains[name]
	cc := &chainContent{}
	var ls []runLayout
	if k == kindNetworkPolicy {
		c, l, _, err := adoptRun(kt, setNames(name))
		if err != nil {
			return nil, err
		}
		cc.runs, ls = []run{{v: verdictReturn, c: c}}, []runLayout{{v: verdictReturn, l: l}}
	} else {
		// Runs are numbered from 0; their sets' names say their verdicts.
		for i := 0; ; i++ {
			found := false
			for v := range verdict(len(verdictLetters)) {
				c, l, ok, err := adoptRun(kt, runNames(k, name, i, v))
				if err != nil {
					return nil, err
				}
				if ok {
					if found {
						return nil, fmt.Errorf("run %d has sets of two verdicts", i)
					}
					found = true
					cc.runs = append(cc.runs, run{v: v, c: c})
					ls = append(ls, runLayout{v: v, l: l})
				}
			}
			if !found {
				break
			}
		}
		if len(cc.runs) == 0 {
			return nil, errors.New("it has no sets")
		}
	}
	// The rules say the direction: they match the peer's source or
	// destination address.
	dir, found := renderer.Ingress, false
	for _, d := range []renderer.Direction{renderer.Ingress, renderer.Egress} {
		want := chainRules(k, name, d, ls, r.cfg.LogDrops)
		same := len(kc.rules) == len(want)
		for i := 0; same && i < len(want); i++ {
			same = kc.rules[i] == ruleID(want[i])
		}
		if same {
			dir, found = d, true
		}
	}
	if !found {
		return nil, errors.New("its rules are not those of a group of its sets (drop logging switched?)")
	}
	if !kt.counters[name] {
		return nil, errors.New("its counter is missing")
	}
	return &group{name: name, kind: k, dir: dir, cc: cc, key: cc.key(slotOf(k, dir)), layouts: ls, structure: structureOf(ls)}, nil
}

// adoptRun reads the content of the sets named g: found is false when
// there is none.
func adoptRun(kt *kernelTable, g setNames) (c *content, l groupLayout, found bool, err error) {
	c = &content{}
	// The layout is the sets the run has.
	for f := range 2 {
		for slot, set := range []string{g.hostPorts(f), g.hosts(f), g.nets(f)} {
			_, l.fixed[f][slot] = kt.sets[set]
			found = found || l.fixed[f][slot]
		}
	}
	for i := 0; ; i++ {
		var sl sigLayout
		comment := ""
		for f := range 2 {
			if s, ok := kt.sets[g.sig(i, f)]; ok {
				sl.fams[f], comment = true, s.comment
			}
		}
		if !sl.fams[v4] && !sl.fams[v6] {
			break
		}
		found = true
		sig, err := parseSignature(comment)
		if err != nil {
			return nil, l, false, fmt.Errorf("set %s: %w", g.sig(i, v4), err)
		}
		sl.sig = sig
		l.sigs = append(l.sigs, sl)
	}
	for _, s := range groupSets(g, l) {
		ks := kt.sets[s.name]
		if ks == nil || ks.typ != s.typ || ks.comment != s.comment {
			return nil, l, false, fmt.Errorf("set %s is of another type or signature", s.name)
		}
	}
	set := func(name string) *kernelSet {
		if s := kt.sets[name]; s != nil {
			return s
		}
		return &kernelSet{}
	}
	for f := range 2 {
		for _, e := range set(g.hostPorts(f)).elems {
			hp, err := hostPortOf(e)
			if err != nil {
				return nil, l, false, fmt.Errorf("set %s: %w", g.hostPorts(f), err)
			}
			c.hostPorts[f] = append(c.hostPorts[f], hp)
		}
		for _, e := range set(g.hosts(f)).elems {
			a, err := addrOf(e)
			if err != nil {
				return nil, l, false, fmt.Errorf("set %s: %w", g.hosts(f), err)
			}
			c.hosts[f] = append(c.hosts[f], a)
		}
		var err error
		if c.nets[f], err = intervalsOf(set(g.nets(f))); err != nil {
			return nil, l, false, fmt.Errorf("set %s: %w", g.nets(f), err)
		}
	}
	for i, sl := range l.sigs {
		ss := sigSets{sig: sl.sig}
		for f := range 2 {
			var err error
			if ss.peers[f], err = intervalsOf(set(g.sig(i, f))); err != nil {
				return nil, l, false, fmt.Errorf("set %s: %w", g.sig(i, f), err)
			}
		}
		c.sigs = append(c.sigs, ss)
	}
	for f := range 2 {
		slices.SortFunc(c.hostPorts[f], compareHostPorts)
		slices.SortFunc(c.hosts[f], netip.Addr.Compare)
	}
	return c, l, found, nil
}

func intervalsOf(s *kernelSet) ([]interval, error) {
	var out []interval
	for _, e := range s.elems {
		iv, err := intervalOf(e)
		if err != nil {
			return nil, err
		}
		out = append(out, iv)
	}
	return normalize(out), nil
}

// The elements of a set come as list reads them: a key's fields as nft
// writes them.

func addrOf(key []string) (netip.Addr, error) {
	if len(key) != 1 {
		return netip.Addr{}, fmt.Errorf("unexpected element %q", strings.Join(key, " . "))
	}
	return netip.ParseAddr(key[0])
}

// intervalOf decodes an element of an address interval set: an address, a
// prefix or a range.
func intervalOf(key []string) (interval, error) {
	if len(key) != 1 {
		return interval{}, fmt.Errorf("unexpected interval element %q", strings.Join(key, " . "))
	}
	first, last, err := nft.ParseRange(key[0])
	return interval{first, last}, err
}

// hostPortOf decodes an element of a hostPorts set.
func hostPortOf(key []string) (hostPort, error) {
	if len(key) != 3 {
		return hostPort{}, fmt.Errorf("unexpected element %q", strings.Join(key, " . "))
	}
	a, err := netip.ParseAddr(key[0])
	if err != nil {
		return hostPort{}, err
	}
	proto, ok := parseProtocol(key[1])
	if !ok {
		return hostPort{}, fmt.Errorf("element %q: protocol %s", strings.Join(key, " . "), key[1])
	}
	port, err := strconv.ParseUint(key[2], 10, 16)
	if err != nil {
		return hostPort{}, fmt.Errorf("element %q: port %s", strings.Join(key, " . "), key[2])
	}
	return hostPort{addr: a, proto: proto, port: uint16(port)}, nil
}

// selfElemOf decodes an element "a . a" of a self set.
func selfElemOf(key []string) (netip.Addr, error) {
	if len(key) != 2 || key[0] != key[1] {
		return netip.Addr{}, fmt.Errorf("unexpected element %q", strings.Join(key, " . "))
	}
	return netip.ParseAddr(key[0])
}

func parseProtocol(v any) (renderer.Protocol, bool) {
	switch fmt.Sprint(v) {
	case "tcp", "6":
		return renderer.ProtocolTCP, true
	case "udp", "17":
		return renderer.ProtocolUDP, true
	case "sctp", "132":
		return renderer.ProtocolSCTP, true
	}
	return 0, false
}

// parseSignature reads signature.String.
func parseSignature(s string) (signature, error) {
	var proto, sport, dport string
	if _, err := fmt.Sscanf(s, "%s sport %s dport %s", &proto, &sport, &dport); err != nil {
		return signature{}, fmt.Errorf("signature %q: %w", s, err)
	}
	p, ok := parseProtocol(proto)
	if !ok {
		return signature{}, fmt.Errorf("signature %q: protocol %q", s, proto)
	}
	sp, err := parsePorts(sport)
	if err != nil {
		return signature{}, fmt.Errorf("signature %q: %w", s, err)
	}
	dp, err := parsePorts(dport)
	if err != nil {
		return signature{}, fmt.Errorf("signature %q: %w", s, err)
	}
	return signature{proto: p, sport: sp, dport: dp}, nil
}

func parsePorts(s string) (renderer.PortRange, error) {
	if s == "any" {
		return renderer.AnyPort, nil
	}
	first, last, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(first, 10, 16)
	if err != nil {
		return renderer.PortRange{}, fmt.Errorf("ports %q", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(last, 10, 16); err != nil {
			return renderer.PortRange{}, fmt.Errorf("ports %q", s)
		}
	}
	return renderer.PortRange{First: uint16(a), Last: uint16(b)}, nil
}
