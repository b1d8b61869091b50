package renderer

import (
	"context"
	"fmt"
	"net/netip"
)

// PodID names a pod.
type PodID struct {
	Namespace, Name string
}

func (p PodID) String() string { return p.Namespace + "/" + p.Name }

// Compare orders pod IDs by namespace, then name.
func (p PodID) Compare(o PodID) int {
	if p.Namespace != o.Namespace {
		if p.Namespace < o.Namespace {
			return -1
		}
		return 1
	}
	switch {
	case p.Name < o.Name:
		return -1
	case p.Name > o.Name:
		return 1
	}
	return 0
}

// PodRules is the policy configuration of one pod deployed on this node.
//
// Ingress and Egress are the pod's directions, as in Kubernetes (see
// Direction). Each list is either empty, meaning the pod is not isolated in
// that direction and all its traffic passes, or a list of Permit rules that
// ends with exactly one rule matching all traffic: DenyAll, or PermitAll when
// some policy permits everything. The lists are sorted by Rule.Compare and
// hold no duplicates, so a renderer may apply them in order with first-match
// semantics, apply the Permit rules before the final rule, or use a
// longest-prefix match.
type PodRules struct {
	Pod PodID
	// IPs are the pod's addresses, at most one per family.
	IPs []netip.Addr
	// SourcePrefixes are the prefixes the pod may send from besides its
	// IPs (its allowed-source-prefixes annotation), unmapped: a renderer
	// that checks the source of the pods' traffic lets these pass.
	SourcePrefixes []netip.Prefix
	// Removed is set when the pod is gone from this node (deleted, or it lost
	// its address); the renderer forgets it and its rule lists are empty.
	Removed bool
	// Ingress filters traffic into the pod (its ingress policies): its
	// destination network is "any", its source network names the peer.
	Ingress []Rule
	// Egress filters traffic out of the pod (its egress policies): its
	// source network is "any", its destination network names the peer.
	Egress []Rule
	// Admin and Baseline are the pod's ClusterNetworkPolicy tiers, by
	// Direction, in evaluation order (Tiers): Admin rules decide before
	// Ingress and Egress, Baseline rules after them, for a pod those do
	// not isolate. Their matches follow the direction as the lists above
	// do (the peer is the source of ingress, the destination of egress).
	// Empty tiers leave the pod to its NetworkPolicy lists alone.
	Admin    [2][]TierRule
	Baseline [2][]TierRule
	// NetworkPolicies name the NetworkPolicies ("namespace/name", sorted)
	// that isolate the pod, by Direction: those that made Ingress and
	// Egress what they are. Renderers only name them (the packets no rule
	// of a direction's list permitted count for each); they match by the
	// lists.
	NetworkPolicies [2][]string
}

// Tiers returns the pod's tiers of direction d.
func (p *PodRules) Tiers(d Direction) Tiers {
	np := p.Ingress
	if d == Egress {
		np = p.Egress
	}
	return Tiers{Admin: p.Admin[d], NetworkPolicy: np, Baseline: p.Baseline[d]}
}

// HasTiers reports whether any ClusterNetworkPolicy rule applies to the
// pod.
func (p *PodRules) HasTiers() bool {
	return len(p.Admin[Ingress])+len(p.Admin[Egress])+len(p.Baseline[Ingress])+len(p.Baseline[Egress]) > 0
}

// Validate checks the pod's lists and tiers (ValidateRuleList,
// ValidateTier).
func (p *PodRules) Validate() error { return p.ValidateShared(nil) }

// ValidationMemo remembers the tier slices a transaction's pods share (the
// configurator gives the pods of one set of ClusterNetworkPolicies the very
// same slices), so that each is checked once.
type ValidationMemo struct {
	checked map[validated]bool
	lists   map[validatedList]bool
}

type validated struct {
	first *TierRule
	n     int
	d     Direction
}

type validatedList struct {
	first *Rule
	n     int
	d     Direction
}

// Valid records that rule list l of direction d was checked before (a
// renderer passes the lists it holds: the configurator sends a pod's
// unchanged list again as the very same slice).
func (m *ValidationMemo) Valid(d Direction, l []Rule) {
	if len(l) == 0 {
		return
	}
	if m.lists == nil {
		m.lists = map[validatedList]bool{}
	}
	m.lists[validatedList{&l[0], len(l), d}] = true
}

// ValidateShared is Validate, checking each tier slice m has seen once
// (m nil: every time).
func (p *PodRules) ValidateShared(m *ValidationMemo) error {
	tier := func(d Direction, name string, rules []TierRule) error {
		if len(rules) == 0 {
			return nil
		}
		k := validated{&rules[0], len(rules), d}
		if m != nil && m.checked[k] {
			return nil
		}
		if err := ValidateTier(d, name, rules); err != nil {
			return err
		}
		if m != nil {
			if m.checked == nil {
				m.checked = map[validated]bool{}
			}
			m.checked[k] = true
		}
		return nil
	}
	for _, d := range []Direction{Ingress, Egress} {
		t := p.Tiers(d)
		if l := t.NetworkPolicy; m == nil || len(l) == 0 || !m.lists[validatedList{&l[0], len(l), d}] {
			if err := ValidateRuleList(d, l); err != nil {
				return err
			}
		}
		if err := tier(d, "admin", t.Admin); err != nil {
			return err
		}
		if err := tier(d, "baseline", t.Baseline); err != nil {
			return err
		}
	}
	return nil
}

// Txn is one transaction for the renderers: the new configuration of every
// local pod whose configuration may have changed. One change in the cluster
// (a policy, a pod, a namespace) that touches many pods is one Txn.
type Txn struct {
	// Resync is set when Pods lists every local pod with an address; a
	// renderer then forgets the pods it knows that are not listed.
	Resync bool
	Pods   []PodRules
}

// Renderer installs rules into one network stack. Render must leave the
// stack enforcing, for every pod, the last rules it received for that pod
// (docs/background.md#policy-layers). It is called from one goroutine at a
// time.
type Renderer interface {
	Render(ctx context.Context, txn Txn) error
}

// TableID names a rule table. Local tables get IDs that the renderer cache
// never reuses for other contents in the same transaction; the global table
// is GlobalTableID.
type TableID string

// GlobalTableID is the ID of the node's one global table.
const GlobalTableID TableID = "global"

// Table is an ordered list of rules applied together with first-match
// semantics, as the renderer cache returns it
// (docs/background.md#the-renderer-cache). A table that is not empty ends
// with a rule matching all traffic.
type Table struct {
	ID    TableID
	Rules []Rule
	// Origins, when the cache tracks them (tables.Ordered), say where
	// each rule comes from, for counting what the rules deny; nil
	// otherwise. Equal origins are one pointer.
	Origins []*Origin
}

// ValidateRuleList checks that rules is a rule list as PodRules describes it
// for direction d. Renderers and the renderer cache use it to reject input
// whose meaning would depend on an ordering they do not keep.
func ValidateRuleList(d Direction, rules []Rule) error {
	if len(rules) == 0 {
		return nil
	}
	for i, r := range rules {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("%s rule %d: %w", d, i, err)
		}
		if d == Egress && r.SrcNetwork.IsValid() {
			return fmt.Errorf("%s rule %d (%v): the source of traffic from the pod is the pod itself", d, i, r)
		}
		if d == Ingress && r.DstNetwork.IsValid() {
			return fmt.Errorf("%s rule %d (%v): the destination of traffic to the pod is the pod itself", d, i, r)
		}
		last := i == len(rules)-1
		if last && !r.MatchesAll() {
			return fmt.Errorf("%s rule %d (%v): the last rule must match all traffic", d, i, r)
		}
		if !last && r.Action != ActionPermit {
			return fmt.Errorf("%s rule %d (%v): only the last rule may deny", d, i, r)
		}
		if i > 0 && rules[i-1].Compare(r) >= 0 {
			return fmt.Errorf("%s rule %d (%v): rules are not sorted or not unique", d, i, r)
		}
	}
	return nil
}

// ValidateTier checks the rules of a tier named name of direction d: valid
// matches that leave the pod's own end of the traffic unrestricted, and
// known actions.
func ValidateTier(d Direction, name string, rules []TierRule) error {
	for i, r := range rules {
		m := r.Match
		m.Action = ActionPermit
		if err := m.Validate(); err != nil {
			return fmt.Errorf("%s %s rule %d: %w", d, name, i, err)
		}
		if r.Action > TierPass {
			return fmt.Errorf("%s %s rule %d (%v): unknown action %d", d, name, i, m, r.Action)
		}
		if d == Egress && m.SrcNetwork.IsValid() {
			return fmt.Errorf("%s %s rule %d (%v): the source of traffic from the pod is the pod itself", d, name, i, m)
		}
		if d == Ingress && m.DstNetwork.IsValid() {
			return fmt.Errorf("%s %s rule %d (%v): the destination of traffic to the pod is the pod itself", d, name, i, m)
		}
	}
	return nil
}

// Denied is a count of packets a renderer's rules denied: for Tier "admin"
// or "baseline", those of one ClusterNetworkPolicy (Policy; "" for the
// rules vcoild adds) in one direction; for Tier "networkpolicy", either
// those no NetworkPolicy of the pods of a group (Group) permitted, or
// those of the pods one NetworkPolicy (Policy, "namespace/name") isolates
// that no NetworkPolicy of theirs permitted: a packet denied to a pod
// isolated by two policies counts for both, since neither admitted it.
type Denied struct {
	Tier, Policy, Group string
	Direction           Direction
	Packets             uint64
}
