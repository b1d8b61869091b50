package nftables

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// table is the renderer's nftables table (nft.Table: the kernel's, or a
// Fake in tests). Its sets and maps are read over netlink, by the layouts
// of elements.go: any nft listing of the table, even of one chain, reads
// and prints every element, which takes seconds at ten thousand services.
type table interface {
	Name() string
	NewTransaction() *knftables.Transaction
	RunScript(ctx context.Context, script string) error
	CheckScript(ctx context.Context, script string) error
	ApplyElements(ctx context.Context, ops []nft.ElementOp) error
	Read(ctx context.Context) (*nft.Contents, error)
	Elements(ctx context.Context, set string) ([]*knftables.Element, error)
	Delete(ctx context.Context) error
	Close()
}

// read lists the table: its objects, its rules' IDs and the elements of the
// sets and maps vcoil writes (not the affinity maps, which the packet path
// fills). It is Resync's way of adopting a table a previous vcoild left.
func read(ctx context.Context, tbl table) (tableObjects, *ruleset, error) {
	t := tableObjects{sets: map[string]bool{}, chains: map[string][]string{}}
	r := newRuleset()
	c, err := tbl.Read(ctx)
	if err != nil {
		return t, nil, err
	}
	if !c.Exists {
		return t, r, nil
	}
	t.exists = true
	// A table of a newer format is left as it is: its objects may mean
	// something this vcoild does not know.
	id := nft.TableID{Family: knftables.InetFamily, Name: tbl.Name()}
	if t.format, err = nft.FormatOf(id, c, formatKind); err != nil {
		return t, nil, err
	}
	if err := formatversion.Check("nftables table "+id.String(), t.format, formatversion.ServiceTable); err != nil {
		return t, nil, err
	}
	for name, s := range c.Sets {
		if !s.Anonymous { // the vmaps written inline in rules
			t.sets[name] = s.Map
		}
	}
	for name, ch := range c.Chains {
		t.chains[name] = ch.Rules
	}
	for _, name := range slices.Sorted(maps.Keys(t.sets)) {
		set, fam, index, ok := parseSetName(name)
		if !ok {
			continue // the affinity maps, which the packet path fills, or strangers
		}
		elems, err := tbl.Elements(ctx, name)
		if err != nil {
			return t, nil, err
		}
		for _, e := range elems {
			if !adopt(r, set, fam, index, e) {
				r.stray = append(r.stray, e)
			}
		}
	}
	// Count the uses and elements of what was read.
	read := r.frontends
	r.frontends = make(map[frontendKey]*frontendState, len(read))
	for key, f := range read {
		r.put(key, f)
	}
	return t, r, nil
}

// adopt records one element read from the kernel in r; false means vcoil
// would not have written it.
func adopt(r *ruleset, set, fam string, index int, e *knftables.Element) bool {
	if len(e.Key) < 3 {
		if set == setHairpin && len(e.Key) == 2 && e.Key[0] == e.Key[1] {
			a, err := netip.ParseAddr(e.Key[0])
			if err == nil && familyOf(a) == fam {
				r.hairpin[a] = 1
				return true
			}
		}
		return false
	}
	k, ok := parseFrontend(e.Key[:3], fam)
	if !ok {
		return false
	}
	f := r.frontends[k]
	if f == nil {
		f = &frontendState{}
		r.frontends[k] = f
	}
	rest := e.Key[3:]
	switch set {
	case setServices, setExternalLocal:
		if len(rest) != 0 || len(e.Value) != 1 {
			return false
		}
		v := parseVerdict(e.Value[0], fam, set == setExternalLocal)
		if set == setServices {
			f.Cluster = v
		} else {
			f.Local = v
		}
	case setBackends, setBackendsLocal:
		if len(rest) != 0 || len(e.Value) != 2 {
			return false
		}
		i := index
		a, err2 := netip.ParseAddr(e.Value[0])
		port, err3 := strconv.ParseUint(e.Value[1], 10, 16)
		if err2 != nil || err3 != nil {
			return false
		}
		l := &f.Backends
		if set == setBackendsLocal {
			l = &f.LocalBackends
		}
		for len(*l) <= i {
			*l = append(*l, netip.AddrPort{})
		}
		(*l)[i] = netip.AddrPortFrom(a, uint16(port))
	case setNoEndpoints:
		f.Reject = len(rest) == 0
		return f.Reject
	case setFirewall:
		f.Firewalled = len(rest) == 0
		return f.Firewalled
	case setFirewallAllow:
		if len(rest) != 1 {
			return false
		}
		p, err := netip.ParsePrefix(rest[0])
		if err != nil {
			a, err2 := netip.ParseAddr(rest[0])
			if err2 != nil {
				return false
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		f.Allowed = append(f.Allowed, p)
	case setAffinityFrontends:
		if len(rest) != 0 || len(e.Value) != 1 {
			return false
		}
		f.Affinity = -1
		prefix := "goto " + chainAffinityUpPrefix + fam + "-"
		if t, err := strconv.Atoi(strings.TrimPrefix(e.Value[0], prefix)); err == nil && strings.HasPrefix(e.Value[0], prefix) && t > 0 {
			f.Affinity = t
		}
	default:
		return false
	}
	return true
}

// parseSetName recognises the sets and maps whose elements vcoil writes:
// the name without its family, the family, and the index of a backends map.
func parseSetName(name string) (set, fam string, index int, ok bool) {
	for _, fam := range families {
		for _, set := range []string{setServices, setExternalLocal, setNoEndpoints, setFirewall,
			setFirewallAllow, setAffinityFrontends, setHairpin} {
			if name == set+fam {
				return set, fam, 0, true
			}
		}
		for _, set := range []string{setBackendsLocal, setBackends} {
			rest, found := strings.CutPrefix(name, set+fam+"-")
			if !found {
				continue
			}
			i, err := strconv.Atoi(rest)
			if err != nil || i < 0 || i >= 1<<16 || strconv.Itoa(i) != rest {
				return "", "", 0, false
			}
			return set, fam, i, true
		}
	}
	return "", "", 0, false
}

func parseFrontend(key []string, fam string) (frontendKey, bool) {
	a, err := netip.ParseAddr(key[0])
	if err != nil || familyOf(a) != fam {
		return frontendKey{}, false
	}
	p, ok := parseProto(key[1])
	if !ok {
		return frontendKey{}, false
	}
	port, err := strconv.ParseUint(key[2], 10, 16)
	if err != nil {
		return frontendKey{}, false
	}
	return frontendKey{a, p, uint16(port)}, true
}

func parseVerdict(v, fam string, local bool) verdict {
	if v == "drop" {
		return verdict{Kind: verdictDrop}
	}
	pick, sticky := chainPickPrefix, chainStickyPrefix
	if local {
		pick, sticky = chainPickLocalPrefix, chainStickyLocalPref
	}
	for _, c := range []struct {
		prefix string
		sticky bool
	}{{pick, false}, {sticky, true}} {
		prefix := "goto " + c.prefix + fam + "-"
		if n, err := strconv.Atoi(strings.TrimPrefix(v, prefix)); err == nil && strings.HasPrefix(v, prefix) && n > 0 {
			return verdict{Kind: verdictPick, N: n, Sticky: c.sticky}
		}
	}
	return verdict{Kind: verdictOther}
}
