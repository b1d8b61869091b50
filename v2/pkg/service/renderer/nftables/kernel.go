package nftables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	gnft "github.com/google/nftables"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// kernel runs nft, through knftables, in the node's network namespace.
// knftables executes the nft binary, and a child process starts in the
// network namespace of the thread that forks it: every call runs on a
// thread locked in the namespace (pkg/ns's Do), so that vcoild itself may
// live in another namespace (as in the lab, with --netns).
//
// The elements of the table's sets and maps are read over netlink
// (elements.go), in the same namespace.
type kernel struct {
	netns ns.NetNS // nil: the process's own namespace
	nsFd  int      // netns's descriptor, 0 for the process's own
	nft   knftables.Interface
	nl    *gnft.Conn
	table string
	// nftPath is the nft binary, run directly for the plans' scripts.
	nftPath string
}

func openKernel(netns ns.NetNS, family knftables.Family, table string) (*kernel, error) {
	k := &kernel{netns: netns, table: table}
	var err error
	if k.nftPath, err = exec.LookPath("nft"); err != nil {
		return nil, fmt.Errorf("nft binary: %w", err)
	}
	var opts []gnft.ConnOption
	if netns != nil {
		k.nsFd = int(netns.Fd())
		opts = append(opts, gnft.WithNetNSFd(k.nsFd))
	}
	if k.nl, err = gnft.New(opts...); err != nil {
		return nil, fmt.Errorf("nftables netlink connection: %w", err)
	}
	err = k.do(func() error {
		var err error
		k.nft, err = knftables.New(family, table)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nftables table %s %s: %w", family, table, err)
	}
	return k, nil
}

func (k *kernel) do(f func() error) error {
	if k.netns == nil {
		return f()
	}
	return k.netns.Do(func(ns.NetNS) error { return f() })
}

func (k *kernel) run(ctx context.Context, tx *knftables.Transaction) error {
	return k.do(func() error { return k.nft.Run(ctx, tx) })
}

// runScript runs an nft script (plan.script) as one transaction; with
// check, nft only checks it (the kernel too, without committing).
func (k *kernel) runScript(ctx context.Context, script string, check bool) error {
	args := []string{"-f", "-"}
	if check {
		args = append([]string{"--check"}, args...)
	}
	return k.do(func() error {
		cmd := exec.CommandContext(ctx, k.nftPath, args...)
		cmd.Stdin = strings.NewReader(script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return nil
	})
}

// listElements lists the elements of one of the renderer's sets or maps
// over netlink.
func (k *kernel) listElements(kind, name string) ([]*knftables.Element, error) {
	elems, err := netlinkElements(k.nl, k.table, name)
	if err != nil {
		return nil, fmt.Errorf("list %s %s of table %s: %w", kind, name, k.table, err)
	}
	return elems, nil
}

// read lists the table: its objects, its rules' IDs and the elements of the
// sets and maps vcoil writes (not the affinity maps, which the packet path
// fills). It is Resync's way of adopting a table a previous vcoild left.
// It reads over netlink: any nft listing of the table, even of one chain,
// reads and prints every element, which takes seconds at ten thousand
// services.
func (k *kernel) read(ctx context.Context) (tableObjects, *ruleset, error) {
	t := tableObjects{sets: map[string]bool{}, chains: map[string][]string{}}
	r := newRuleset()
	if err := ctx.Err(); err != nil {
		return t, nil, err
	}
	table, err := k.nl.ListTableOfFamily(k.table, gnft.TableFamilyINet)
	if errors.Is(err, unix.ENOENT) {
		return t, r, nil
	}
	if err != nil {
		return t, nil, fmt.Errorf("list table %s: %w", k.table, err)
	}
	t.exists = true
	sets, err := k.nl.GetSets(table)
	if err != nil {
		return t, nil, fmt.Errorf("list the sets of table %s: %w", k.table, err)
	}
	// A table of a newer format is left as it is: its objects may mean
	// something this vcoild does not know.
	hasFormat := slices.ContainsFunc(sets, func(s *gnft.Set) bool { return s.Name == formatversion.NFTSet })
	t.format, err = formatversion.NFTVersion("inet "+k.table, formatKind, hasFormat, func() (c string, err error) {
		err = k.do(func() error {
			c, err = formatversion.ReadNFTSetComment(ctx, "inet", k.table)
			return err
		})
		return c, err
	})
	if err != nil {
		return t, nil, err
	}
	if err := formatversion.Check("nftables table inet "+k.table, t.format, formatversion.ServiceTable); err != nil {
		return t, nil, err
	}
	for _, s := range sets {
		if !s.Anonymous { // the vmaps written inline in rules
			t.sets[s.Name] = s.IsMap
		}
	}
	chains, err := k.nl.ListChainsOfTableFamily(gnft.TableFamilyINet)
	if err != nil {
		return t, nil, fmt.Errorf("list the chains of table %s: %w", k.table, err)
	}
	for _, c := range chains {
		if c.Table != nil && c.Table.Name == k.table {
			t.chains[c.Name] = []string{}
		}
	}
	rules, err := ruleComments(k.nsFd, k.table)
	if err != nil {
		return t, nil, fmt.Errorf("list the rules of table %s: %w", k.table, err)
	}
	for _, rule := range rules {
		if _, ok := t.chains[rule.chain]; ok {
			t.chains[rule.chain] = append(t.chains[rule.chain], rule.comment)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.sets)) {
		set, fam, index, ok := parseSetName(name)
		if !ok {
			continue // the affinity maps, which the packet path fills, or strangers
		}
		kind := "set"
		if t.sets[name] {
			kind = "map"
		}
		elems, err := k.listElements(kind, name)
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
