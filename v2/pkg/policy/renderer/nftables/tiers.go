package nftables

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// The tiers of a pod's policies (renderer.Tiers), each a pair of dispatch
// maps per direction and a kind of group chain (docs/policy.md, "The
// nftables renderer"). The base chains look a packet up in the Admin maps,
// then the NetworkPolicy maps, then the Baseline maps:
//
//   - an Admin group accepts (final for the hook), drops, or returns (a
//     Pass rule, or no rule matched) to the base chain, which goes on to
//     the NetworkPolicy maps;
//   - a NetworkPolicy group returns when a rule permits and drops at its
//     end (a pod that NetworkPolicies isolate in a direction is never in
//     that direction's Baseline maps, so its verdict is final);
//   - a Baseline group accepts (Accept and Pass rules), drops, or returns
//     (no rule matched), and the base chain ends by accepting.
//
// Admin and Baseline groups are sequences of runs: consecutive rules of one
// verdict, whose order among themselves does not matter, so that a run is a
// content (a union of peers and ports in sets) like a NetworkPolicy
// group's. Pods whose tier of a direction is equal share its group, as with
// NetworkPolicies; a ClusterNetworkPolicy's rules do not depend on the pod
// it selects, so all the pods of one set of policies share one.

// kind is the tier a group chain renders.
type kind uint8

const (
	kindNetworkPolicy kind = iota
	kindAdmin
	kindBaseline
	nKinds
)

// kindPrefix starts the chain names of a kind's groups.
var kindPrefix = [nKinds]string{"g", "a", "b"}

func (k kind) String() string { return [nKinds]string{"networkpolicy", "admin", "baseline"}[k] }

// slot is one pair of dispatch maps: a tier and a direction.
type slot uint8

const nSlots = int(nKinds) * 2

func slotOf(k kind, d renderer.Direction) slot { return slot(int(k)*2 + int(d)) }
func (s slot) kind() kind                      { return kind(s / 2) }
func (s slot) dir() renderer.Direction         { return renderer.Direction(s % 2) }

// slotMaps are the dispatch maps of each slot, by family. Every name ends
// in its family's digit (elementLayout).
var slotMaps = [nSlots][2]string{
	{"in4", "in6"}, {"eg4", "eg6"},
	{"admin-in4", "admin-in6"}, {"admin-eg4", "admin-eg6"},
	{"baseline-in4", "baseline-in6"}, {"baseline-eg4", "baseline-eg6"},
}

// verdict is what the rules of a run do with the packets they match.
type verdict uint8

const (
	verdictReturn verdict = iota
	verdictAccept
	verdictDrop
)

// verdictLetters name verdicts in the set names of tier groups' runs, from
// which adoption reads them back.
const verdictLetters = "rad"

// run is consecutive rules of one verdict and one ClusterNetworkPolicy of
// a tier.
type run struct {
	v verdict
	c *content
	// policy is the policy the rules come from ("" for the rules vcoild
	// adds); a drop run counts its drops in a counter of its own, so that
	// they are counted per policy.
	policy string
}

// chainContent is what a group chain holds: for a NetworkPolicy group one
// run of permits (verdictReturn) followed by the drop; for a tier group
// its runs, in order.
type chainContent struct {
	runs []run
}

// tierContent turns the rules of tier k (kindAdmin or kindBaseline) of
// direction d into runs. It returns nil when the tier decides nothing: no
// rules, or only rules that do what its end does anyway (an Admin tier
// returns to the NetworkPolicy maps, a Baseline tier to the base chain's
// accept).
func tierContent(k kind, d renderer.Direction, rules []renderer.TierRule) *chainContent {
	var runs []run
	var matches []renderer.Rule
	flush := func(v verdict, policy string) {
		if len(matches) > 0 {
			runs = append(runs, run{v: v, c: unionOf(d, matches), policy: policy})
			matches = nil
		}
	}
	cur, policy := verdict(0), ""
	for i, r := range rules {
		v := tierVerdict(k, r.Action)
		if i > 0 && (v != cur || r.Policy != policy) {
			flush(cur, policy)
		}
		cur, policy = v, r.Policy
		matches = append(matches, r.Match)
	}
	flush(cur, policy)
	// The chain's end returns, and after a Baseline group the base chain
	// accepts: a trailing run doing the same is left out.
	for len(runs) > 0 {
		last := runs[len(runs)-1].v
		if last == verdictReturn || (k == kindBaseline && last == verdictAccept) {
			runs = runs[:len(runs)-1]
			continue
		}
		break
	}
	if len(runs) == 0 {
		return nil
	}
	return &chainContent{runs: runs}
}

// tierVerdict is the verdict of action a in a group of kind k: Pass
// leaves the Admin tier for the NetworkPolicies, and after the Baseline
// tier nothing is left to ask.
func tierVerdict(k kind, a renderer.TierAction) verdict {
	switch a {
	case renderer.TierAccept:
		return verdictAccept
	case renderer.TierDeny:
		return verdictDrop
	}
	if k == kindBaseline {
		return verdictAccept
	}
	return verdictReturn
}

// runNames names the sets of run i of group chain name of kind k: a
// NetworkPolicy group's one run uses the chain name alone, a tier group's
// runs add their index and verdict letter ("a3-0d-h4").
func runNames(k kind, name string, i int, v verdict) setNames {
	if k == kindNetworkPolicy {
		return setNames(name)
	}
	return setNames(name + "-" + strconv.Itoa(i) + string(verdictLetters[v]))
}

// key identifies the content within slot s: equal keys, equal contents.
func (cc *chainContent) key(s slot) string {
	if cc == nil {
		return ""
	}
	if s.kind() == kindNetworkPolicy {
		return s.dir().String() + "/" + cc.runs[0].c.key()
	}
	var b strings.Builder
	for _, r := range cc.runs {
		b.WriteByte(verdictLetters[r.v])
		b.WriteString(r.c.key())
		b.WriteString(strconv.Quote(r.policy))
	}
	h := sha256.Sum256([]byte(b.String()))
	return s.kind().String() + "/" + s.dir().String() + "/" + hex.EncodeToString(h[:16])
}

// layouts are the layouts of the content's runs.
func (cc *chainContent) layouts() []runLayout {
	out := make([]runLayout, len(cc.runs))
	for i, r := range cc.runs {
		out[i] = runLayout{v: r.v, l: layoutOf(r.c)}
	}
	return out
}

// elements are the elements of the sets of a group of kind k named name
// with this content, by set.
func (cc *chainContent) elements(k kind, name string) map[string][]string {
	if len(cc.runs) == 1 {
		return cc.runs[0].c.elements(runNames(k, name, 0, cc.runs[0].v))
	}
	out := map[string][]string{}
	for i, r := range cc.runs {
		for set, e := range r.c.elements(runNames(k, name, i, r.v)) {
			out[set] = e
		}
	}
	return out
}

// runLayout is the layout of one run: its verdict and sets.
type runLayout struct {
	v verdict
	l groupLayout
}

// structureOf is the identity of a sequence of run layouts: two contents of
// one structure differ only in set elements.
func structureOf(ls []runLayout) string {
	if len(ls) == 1 {
		return ls[0].l.String()
	}
	var b strings.Builder
	for _, l := range ls {
		b.WriteByte('|')
		b.WriteByte(verdictLetters[l.v])
		b.WriteString(l.l.String())
	}
	return b.String()
}

// chainSets lists the sets of group chain name of kind k.
func chainSets(k kind, name string, ls []runLayout) []setDef {
	var out []setDef
	for i, l := range ls {
		out = append(out, groupSets(runNames(k, name, i, l.v), l.l)...)
	}
	return out
}

// chainRules are the rules of group chain name of kind k and direction d.
func chainRules(k kind, name string, d renderer.Direction, ls []runLayout, logDrops bool) []string {
	if k == kindNetworkPolicy {
		return groupRules(setNames(name), d, ls[0].l, logDrops)
	}
	var out []string
	for i, l := range ls {
		names := runNames(k, name, i, l.v)
		switch l.v {
		case verdictReturn:
			out = append(out, matchRules(names, d, l.l, "return")...)
		case verdictAccept:
			out = append(out, matchRules(names, d, l.l, "accept")...)
		case verdictDrop:
			if logDrops {
				// A limit is a match: the logging rules pass the packet
				// on to the drops whether or not they log it.
				out = append(out, matchRules(names, d, l.l, dropLog(name, k.String()+" "+d.String()))...)
			}
			out = append(out, matchRules(names, d, l.l, fmt.Sprintf("counter name %q drop", string(names)))...)
		}
	}
	return out
}

// dropCounters are the counters of a tier group's drop runs, by name, with
// the policy of each (from cc; nil for a NetworkPolicy group, which counts
// in its group's counter).
func dropCounters(k kind, name string, cc *chainContent) map[string]string {
	if k == kindNetworkPolicy {
		return nil
	}
	out := map[string]string{}
	for i, r := range cc.runs {
		if r.v == verdictDrop {
			out[string(runNames(k, name, i, r.v))] = r.policy
		}
	}
	return out
}

// dropLog is the statement that logs a group's drops.
func dropLog(name, what string) string {
	return fmt.Sprintf("limit rate %s log prefix %q level info", logRate, "vcoil-policy "+name+" "+what+" drop: ")
}

// groupName is the chain name of group number n of kind k.
func groupName(k kind, n int) string { return kindPrefix[k] + strconv.Itoa(n) }

// parseGroupName returns the kind and number of a group chain name.
func parseGroupName(name string) (kind, int, bool) {
	for k := range nKinds {
		s, ok := strings.CutPrefix(name, kindPrefix[k])
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		return k, n, err == nil && n >= 0 && groupName(k, n) == name
	}
	return 0, 0, false
}
