package nftables

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// The table's layout. Its chains are fixed, except for one chain per
// distinct endpoint count (pick4-N, pick-local4-N…) and one chain and one
// dynamic map per distinct affinity timeout: services and endpoints are
// elements of the maps and sets below, never chains or rules.
//
// A set's or map's type is fixed by its name: a change of type must come
// with a new name, since a renderer adopting an existing table checks names
// only. Rules are identified by a hash of their text kept in their comment.
const (
	chainReject         = "reject-chain"
	chainNoEndpoints    = "no-endpoints"
	chainFirewall       = "firewall"
	chainAffinityRecord = "affinity-record"

	chainNATPrerouting    = "nat-prerouting"
	chainNATOutput        = "nat-output"
	chainNATPostrouting   = "nat-postrouting"
	chainFilterInput      = "filter-input"
	chainFilterForward    = "filter-forward"
	chainFilterOutput     = "filter-output"
	chainFirewallPre      = "firewall-prerouting"
	chainFirewallOut      = "firewall-output"
	chainAffinityPre      = "affinity-prerouting"
	chainAffinityOut      = "affinity-output"
	setServices           = "services"
	setExternalLocal      = "external-local"
	setBackends           = "backends"
	setBackendsLocal      = "backends-local"
	setNoEndpoints        = "no-endpoints"
	setFirewall           = "firewall"
	setFirewallAllow      = "firewall-allow"
	setAffinityFrontends  = "affinity-frontends"
	setHairpin            = "hairpin"
	chainAffinityPrefix   = "affinity"        // affinity4, affinity6: the lookups
	chainEndpointPrefix   = "endpoint"        // endpoint4-I: DNAT by backends4-I
	chainEndpointLocalPre = "endpoint-local"  // endpoint-local4-I: by backends-local4-I
	chainPickPrefix       = "pick"            // pick4-N
	chainPickLocalPrefix  = "pick-local"      // pick-local4-N
	chainStickyPrefix     = "sticky"          // sticky6-N
	chainStickyLocalPref  = "sticky-local"    // sticky-local6-N
	chainAffinityUpPrefix = "affinity-update" // affinity-update4-T
	mapAffinityPrefix     = "affinity"        // affinity4-T
)

// formatKind names the table's kind in its format set's comment ("vcoil
// services v2"). Version 1, the table before format versions, had no format
// set; it is adopted like a table of the current version, in place.
const formatKind = "services"

var families = []string{"4", "6"}

// ipOf is the nft protocol keyword of a family; addrType its address type.
func ipOf(fam string) string {
	if fam == "4" {
		return "ip"
	}
	return "ip6"
}

func addrType(fam string) string {
	if fam == "4" {
		return "ipv4_addr"
	}
	return "ipv6_addr"
}

func pickChain(fam string, n int) string {
	return chainPickPrefix + fam + "-" + strconv.Itoa(n)
}
func pickLocalChain(fam string, n int) string {
	return chainPickLocalPrefix + fam + "-" + strconv.Itoa(n)
}
func backendsMap(fam string, i int) string { return setBackends + fam + "-" + strconv.Itoa(i) }
func backendsLocalMap(fam string, i int) string {
	return setBackendsLocal + fam + "-" + strconv.Itoa(i)
}
func endpointChain(fam string, i int) string {
	return chainEndpointPrefix + fam + "-" + strconv.Itoa(i)
}
func endpointLocalChain(fam string, i int) string {
	return chainEndpointLocalPre + fam + "-" + strconv.Itoa(i)
}

func stickyChain(fam string, n int) string {
	return chainStickyPrefix + fam + "-" + strconv.Itoa(n)
}
func stickyLocalChain(fam string, n int) string {
	return chainStickyLocalPref + fam + "-" + strconv.Itoa(n)
}
func affinityUpdateChain(fam string, t int) string {
	return chainAffinityUpPrefix + fam + "-" + strconv.Itoa(t)
}
func affinityMap(fam string, t int) string { return mapAffinityPrefix + fam + "-" + strconv.Itoa(t) }

// useKind names the chains and maps that exist only while an element
// refers to them.
type useKind uint8

const (
	usePick useKind = iota
	usePickLocal
	useSticky
	useStickyLocal
	useAffinity
	// useIndex, useIndexLocal: the map and chain of the endpoints of
	// index N (backends4-N and endpoint4-N).
	useIndex
	useIndexLocal
)

// stickySeed seeds the hash of IPv6 session affinity; fixed, so that a
// restarted renderer sends clients where the previous one did.
const stickySeed = "0x76636f69"

type use struct {
	Fam  string
	Kind useKind
	N    int
}

// chainDef is a chain with its rules.
type chainDef struct {
	Chain *knftables.Chain
	Rules []string
}

// ruleID is the comment that identifies a rule: a hash of its text, so that
// an adopted table's rules are compared without parsing nft's rendering of
// them.
func ruleID(rule string) string {
	sum := sha256.Sum256([]byte(rule))
	return hex.EncodeToString(sum[:6])
}

func (c chainDef) ids() []string {
	ids := make([]string, len(c.Rules))
	for i, r := range c.Rules {
		ids[i] = ruleID(r)
	}
	return ids
}

// objects are the table's sets, maps and chains (without elements).
type objects struct {
	// Sets holds sets and maps by name: *knftables.Set or *knftables.Map.
	Sets map[string]knftables.Object
	// Chains in the order they can be filled: a chain's rules refer only to
	// chains before it.
	Chains []chainDef
}

func (o *objects) chain(name string) *chainDef {
	for i := range o.Chains {
		if o.Chains[i].Chain.Name == name {
			return &o.Chains[i]
		}
	}
	return nil
}

// layout renders the table's objects from the configuration, the node and
// the chains in use.
type layout struct {
	podIfPrefix string
	mark        uint32
	dropInvalid bool
}

func (l layout) objects(node *service.Node, uses map[use]int) objects {
	o := objects{Sets: map[string]knftables.Object{}}
	var used []use
	for u, n := range uses {
		if n > 0 {
			used = append(used, u)
		}
	}
	slices.SortFunc(used, func(a, b use) int {
		if a.Fam != b.Fam {
			return cmpString(a.Fam, b.Fam)
		}
		if a.Kind != b.Kind {
			return int(a.Kind) - int(b.Kind)
		}
		return a.N - b.N
	})
	timeouts := func(fam string) []int {
		var ts []int
		for _, u := range used {
			if u.Fam == fam && u.Kind == useAffinity {
				ts = append(ts, u.N)
			}
		}
		return ts
	}
	frontend := func(fam string) string { return addrType(fam) + " . inet_proto . inet_service" }
	pod := fmt.Sprintf("%q", l.podIfPrefix+"*")
	mark := fmt.Sprintf("0x%x", l.mark)

	// Sets and maps. The empty set format carries the table's format
	// version (formatversion.ServiceTable) in its comment.
	o.Sets[nft.FormatSet] = nft.NewFormatSet(formatKind, formatversion.ServiceTable)
	for _, fam := range families {
		for _, name := range []string{setServices, setExternalLocal} {
			o.Sets[name+fam] = &knftables.Map{Name: name + fam, Type: frontend(fam) + " : verdict"}
		}
		if fam == "4" {
			o.Sets[setAffinityFrontends+fam] = &knftables.Map{Name: setAffinityFrontends + fam, Type: frontend(fam) + " : verdict"}
		}
		// The endpoints of index I of every frontend are one map,
		// backends4-I, rather than one map keyed by frontend and index:
		// numgen's index has no nft type name, and nft 1.0.6 cannot read
		// back a map declared with typeof when a later transaction adds a
		// rule that uses it.
		for _, u := range used {
			if u.Fam != fam {
				continue
			}
			switch u.Kind {
			case useIndex:
				o.Sets[backendsMap(fam, u.N)] = &knftables.Map{Name: backendsMap(fam, u.N), Type: frontend(fam) + " : " + addrType(fam) + " . inet_service"}
			case useIndexLocal:
				o.Sets[backendsLocalMap(fam, u.N)] = &knftables.Map{Name: backendsLocalMap(fam, u.N), Type: frontend(fam) + " : " + addrType(fam) + " . inet_service"}
			}
		}
		for _, name := range []string{setNoEndpoints, setFirewall} {
			o.Sets[name+fam] = &knftables.Set{Name: name + fam, Type: frontend(fam)}
		}
		o.Sets[setFirewallAllow+fam] = &knftables.Set{
			Name: setFirewallAllow + fam, Type: frontend(fam) + " . " + addrType(fam),
			Flags: []knftables.SetFlag{knftables.IntervalFlag},
		}
		o.Sets[setHairpin+fam] = &knftables.Set{Name: setHairpin + fam, Type: addrType(fam) + " . " + addrType(fam)}
		for _, t := range timeouts(fam) {
			o.Sets[affinityMap(fam, t)] = &knftables.Map{
				Name:    affinityMap(fam, t),
				Type:    addrType(fam) + " . " + frontend(fam) + " : " + addrType(fam) + " . inet_service",
				Flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
				Timeout: new(time.Duration(t) * time.Second),
				// Room for a million clients per timeout; nft's default
				// (65535) would silently stop recording past it.
				Size: new(uint64(1 << 20)),
			}
		}
	}

	// Chains called from others.
	add := func(name string, rules ...string) {
		o.Chains = append(o.Chains, chainDef{Chain: &knftables.Chain{Name: name}, Rules: rules})
	}
	add(chainReject, "meta l4proto tcp reject with tcp reset", "reject with icmpx type port-unreachable")
	var noEndpoints, firewall, record []string
	for _, fam := range families {
		ip := ipOf(fam)
		dst := ip + " daddr . meta l4proto . th dport"
		noEndpoints = append(noEndpoints, dst+" @"+setNoEndpoints+fam+" goto "+chainReject)
		firewall = append(firewall, dst+" @"+setFirewall+fam+" "+dst+" . "+ip+" saddr != @"+setFirewallAllow+fam+" drop")
		if fam != "4" {
			continue // IPv6 affinity hashes the client (setAffinity)
		}
		for _, p := range protos {
			record = append(record, fmt.Sprintf("meta l4proto %s ct original %s daddr . meta l4proto . ct original proto-dst vmap @%s", p, ip, setAffinityFrontends+fam))
		}
		var lookups []string
		for _, t := range timeouts(fam) {
			lookups = append(lookups, fmt.Sprintf("dnat %s to %s saddr . %s map @%s", ip, ip, dst, affinityMap(fam, t)))
			var updates []string
			for _, p := range protos {
				updates = append(updates, fmt.Sprintf("meta l4proto %s update @%s { %s saddr . ct original %s daddr . meta l4proto . ct original proto-dst : %s daddr . th dport }",
					p, affinityMap(fam, t), ip, ip, ip))
			}
			add(affinityUpdateChain(fam, t), updates...)
		}
		add(chainAffinityPrefix+fam, lookups...)
	}
	add(chainNoEndpoints, noEndpoints...)
	add(chainFirewall, firewall...)
	add(chainAffinityRecord, record...)
	for _, u := range used {
		ip := ipOf(u.Fam)
		dnat := func(m string) string {
			return fmt.Sprintf("dnat %s to %s daddr . meta l4proto . th dport map @%s", ip, ip, m)
		}
		switch u.Kind {
		case useIndex:
			add(endpointChain(u.Fam, u.N), dnat(backendsMap(u.Fam, u.N)))
		case useIndexLocal:
			add(endpointLocalChain(u.Fam, u.N), dnat(backendsLocalMap(u.Fam, u.N)))
		}
	}
	for _, u := range used {
		ip := ipOf(u.Fam)
		pickFrom := func(index string, endpoint func(string, int) string) string {
			targets := make([]string, u.N)
			for i := range targets {
				targets[i] = fmt.Sprintf("%d : goto %s", i, endpoint(u.Fam, i))
			}
			return index + " vmap { " + strings.Join(targets, ", ") + " }"
		}
		random := fmt.Sprintf("numgen random mod %d", u.N)
		hash := fmt.Sprintf("jhash %s saddr mod %d seed %s", ip, u.N, stickySeed)
		// Traffic that is not from a local pod is masqueraded if it
		// leaves the node (nat-postrouting); the pod network is routed
		// and keeps its addresses.
		masq := "iifname != " + pod + " meta mark set meta mark | " + mark
		// IPv4 looks up the clients' affinity entries first (an empty
		// chain without affinity services).
		var lookup []string
		if u.Fam == "4" {
			lookup = []string{"jump " + chainAffinityPrefix + u.Fam}
		}
		switch u.Kind {
		case usePick:
			add(pickChain(u.Fam, u.N), append(append([]string{masq}, lookup...), pickFrom(random, endpointChain))...)
		case usePickLocal:
			add(pickLocalChain(u.Fam, u.N), append(lookup, pickFrom(random, endpointLocalChain))...)
		case useSticky:
			add(stickyChain(u.Fam, u.N), masq, pickFrom(hash, endpointChain))
		case useStickyLocal:
			add(stickyLocalChain(u.Fam, u.N), pickFrom(hash, endpointLocalChain))
		}
	}

	// Base chains.
	base := func(name string, typ knftables.BaseChainType, hook knftables.BaseChainHook, prio knftables.BaseChainPriority, rules ...string) {
		o.Chains = append(o.Chains, chainDef{
			Chain: &knftables.Chain{Name: name, Type: &typ, Hook: &hook, Priority: &prio},
			Rules: rules,
		})
	}
	var pre, out, post []string
	for _, fam := range families {
		dst := ipOf(fam) + " daddr . meta l4proto . th dport"
		pre = append(pre, "iifname != "+pod+" fib saddr type != local "+dst+" vmap @"+setExternalLocal+fam)
	}
	for _, fam := range families {
		dst := ipOf(fam) + " daddr . meta l4proto . th dport"
		pre = append(pre, dst+" vmap @"+setServices+fam)
		out = append(out, dst+" vmap @"+setServices+fam)
	}
	for _, fam := range families {
		ip := ipOf(fam)
		hairpin := "masquerade"
		for _, a := range node.NATLoopback {
			if familyOf(a) == fam {
				hairpin = "snat " + ip + " to " + a.String()
			}
		}
		// Only a packet going back out through a pod interface is a pod's
		// hairpin: a host-network endpoint is the node's own address, and
		// the node reaching it through a service must keep its source
		// (the NAT loopback is not routable back to the node itself).
		post = append(post, "ct status dnat oifname "+pod+" "+ip+" saddr . "+ip+" daddr @"+setHairpin+fam+" "+hairpin)
	}
	post = append(post,
		"meta mark & "+mark+" == 0 return",
		"oifname "+pod+" return",
		"meta mark set meta mark ^ "+mark,
		"masquerade fully-random")
	checkNoEndpoints := "ct state new jump " + chainNoEndpoints
	base(chainFirewallPre, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority+"-10", "jump "+chainFirewall)
	base(chainFirewallOut, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority+"-10", "jump "+chainFirewall)
	base(chainNATPrerouting, knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority, pre...)
	base(chainNATOutput, knftables.NATType, knftables.OutputHook, knftables.DNATPriority, out...)
	base(chainAffinityPre, knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority+"+10", "ct state new ct status dnat jump "+chainAffinityRecord)
	base(chainAffinityOut, knftables.FilterType, knftables.OutputHook, knftables.DNATPriority+"+10", "ct state new ct status dnat jump "+chainAffinityRecord)
	base(chainFilterInput, knftables.FilterType, knftables.InputHook, knftables.FilterPriority+"-10", checkNoEndpoints)
	var forward []string
	if l.dropInvalid {
		forward = append(forward, "ct state invalid drop")
	}
	forward = append(forward, checkNoEndpoints)
	base(chainFilterForward, knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority+"-10", forward...)
	base(chainFilterOutput, knftables.FilterType, knftables.OutputHook, knftables.FilterPriority+"-10", checkNoEndpoints)
	base(chainNATPostrouting, knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority, post...)
	return o
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// elementsOf are the elements one frontend puts in the table, written to
// emit as (set or map name, key, value).
func elementsOf(k frontendKey, f *frontendState, emit func(set string, key, value []string)) {
	fam := familyOf(k.Addr)
	fk := []string{k.Addr.String(), k.Proto.String(), strconv.Itoa(int(k.Port))}
	with := func(extra ...string) []string { return append(slices.Clip(fk), extra...) }
	verdictValue := func(v verdict, chain, sticky func(string, int) string) []string {
		switch {
		case v.Kind == verdictDrop:
			return []string{"drop"}
		case v.Kind == verdictPick && v.Sticky:
			return []string{"goto " + sticky(fam, v.N)}
		case v.Kind == verdictPick:
			return []string{"goto " + chain(fam, v.N)}
		}
		return []string{foreign}
	}
	if f.Cluster.Kind != verdictNone {
		emit(setServices+fam, fk, verdictValue(f.Cluster, pickChain, stickyChain))
	}
	for i, e := range f.Backends {
		if e.IsValid() {
			emit(backendsMap(fam, i), fk, []string{e.Addr().String(), strconv.Itoa(int(e.Port()))})
		}
	}
	if f.Local.Kind != verdictNone {
		emit(setExternalLocal+fam, fk, verdictValue(f.Local, pickLocalChain, stickyLocalChain))
	}
	for i, e := range f.LocalBackends {
		if e.IsValid() {
			emit(backendsLocalMap(fam, i), fk, []string{e.Addr().String(), strconv.Itoa(int(e.Port()))})
		}
	}
	if f.Reject {
		emit(setNoEndpoints+fam, fk, nil)
	}
	if f.Firewalled {
		emit(setFirewall+fam, fk, nil)
	}
	for _, p := range f.Allowed {
		emit(setFirewallAllow+fam, with(p.String()), nil)
	}
	switch {
	case f.Affinity > 0:
		emit(setAffinityFrontends+fam, fk, []string{"goto " + affinityUpdateChain(fam, f.Affinity)})
	case f.Affinity < 0:
		emit(setAffinityFrontends+fam, fk, []string{foreign})
	}
}

// elementCount is the number of elements elementsOf emits for f, counted
// without writing them: the ruleset counts every frontend it holds at every
// Resync, and writing 110,000 elements' text only to count them was most of
// a periodic Resync's garbage.
func elementCount(f *frontendState) int {
	n := len(f.Allowed)
	for _, b := range []bool{f.Cluster.Kind != verdictNone, f.Local.Kind != verdictNone, f.Reject, f.Firewalled, f.Affinity != 0} {
		if b {
			n++
		}
	}
	for _, l := range [][]netip.AddrPort{f.Backends, f.LocalBackends} {
		for _, e := range l {
			if e.IsValid() {
				n++
			}
		}
	}
	return n
}

// foreign stands for the value of an element read from the kernel that
// vcoil does not write; it never equals a wanted value, so the element is
// replaced.
const foreign = "(foreign)"

// usesOf are the chains and maps a frontend's elements refer to.
func usesOf(k frontendKey, f *frontendState, add func(use)) {
	fam := familyOf(k.Addr)
	if f.Cluster.Kind == verdictPick {
		add(use{fam, pickKind(f.Cluster.Sticky, usePick, useSticky), f.Cluster.N})
	}
	if f.Local.Kind == verdictPick {
		add(use{fam, pickKind(f.Local.Sticky, usePickLocal, useStickyLocal), f.Local.N})
	}
	if f.Affinity > 0 {
		add(use{fam, useAffinity, f.Affinity})
	}
	for i, e := range f.Backends {
		if e.IsValid() {
			add(use{fam, useIndex, i})
		}
	}
	for i, e := range f.LocalBackends {
		if e.IsValid() {
			add(use{fam, useIndexLocal, i})
		}
	}
}

func pickKind(sticky bool, random, hashed useKind) useKind {
	if sticky {
		return hashed
	}
	return random
}

func hairpinKey(a netip.Addr) []string { return []string{a.String(), a.String()} }
