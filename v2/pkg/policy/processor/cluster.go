package processor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// parsedCluster is a ClusterNetworkPolicy with its selectors, networks and
// ports parsed (docs/policy.md, "ClusterNetworkPolicy").
type parsedCluster struct {
	name     string
	tier     cnp.Tier
	priority int32
	subject  podSelection
	ingress  []parsedTierRule
	egress   []parsedTierRule
	// model is the policy with its peers resolved; nil until needed and
	// after something it references changed.
	model *configurator.ClusterPolicy
}

// podSelection is a subject or pod peer: the pods of the namespaces that
// namespaces selects, those pods restricts to the pods that pods selects
// (nil: all of them). A selection whose selectors did not parse selects
// nothing (never: the apiserver validates them).
type podSelection struct {
	namespaces labels.Selector
	pods       labels.Selector
}

type parsedTierRule struct {
	name   string
	action renderer.TierAction
	// failClosed: the rule has a peer or protocol vcoil does not implement
	// and is a Deny or Pass: it matches every connection of its direction.
	// An Accept rule with one is left out (it accepts nothing), as is a
	// rule of an unknown action.
	failClosed, leftOut bool
	peers               []podSelection
	networks            []netip.Prefix
	// ports is empty for every protocol and port.
	ports []configurator.Port
}

func parseCluster(pol *cnp.ClusterNetworkPolicy) (*parsedCluster, []error) {
	pc := &parsedCluster{name: pol.Name, tier: pol.Spec.Tier, priority: pol.Spec.Priority}
	var problems []error
	s := pol.Spec.Subject
	var err error
	switch {
	case s.Namespaces != nil:
		pc.subject, err = selection(s.Namespaces, nil)
	case s.Pods != nil:
		pc.subject, err = selection(&s.Pods.NamespaceSelector, &s.Pods.PodSelector)
	default:
		err = errors.New("the subject selects neither namespaces nor pods")
	}
	if err != nil {
		problems = append(problems, fmt.Errorf("subject: %w (it selects no pod)", err))
	}
	for i, r := range pol.Spec.Ingress {
		var peers []peerFields
		for _, p := range r.From {
			peers = append(peers, peerFields{namespaces: p.Namespaces, pods: p.Pods})
		}
		tr, err := parseTierRule(r.Name, i, r.Action, peers, r.Protocols)
		if err != nil {
			problems = append(problems, fmt.Errorf("ingress rule %s: %w", tr.name, err))
		}
		pc.ingress = append(pc.ingress, tr)
	}
	for i, r := range pol.Spec.Egress {
		var peers []peerFields
		for _, p := range r.To {
			f := peerFields{namespaces: p.Namespaces, pods: p.Pods, networks: p.Networks}
			f.unknown = p.Nodes != nil || len(p.DomainNames) > 0
			peers = append(peers, f)
		}
		tr, err := parseTierRule(r.Name, i, r.Action, peers, r.Protocols)
		if err != nil {
			problems = append(problems, fmt.Errorf("egress rule %s: %w", tr.name, err))
		}
		pc.egress = append(pc.egress, tr)
	}
	return pc, problems
}

// peerFields are the fields of an ingress or egress peer.
type peerFields struct {
	namespaces *metav1.LabelSelector
	pods       *cnp.NamespacedPod
	networks   []cnp.CIDR
	// unknown: a field vcoil does not implement (node peers, domain names).
	unknown bool
}

func selection(namespaces, pods *metav1.LabelSelector) (podSelection, error) {
	var s podSelection
	var err error
	if s.namespaces, err = metav1.LabelSelectorAsSelector(namespaces); err != nil {
		return podSelection{}, fmt.Errorf("namespace selector: %w", err)
	}
	if pods != nil {
		if s.pods, err = metav1.LabelSelectorAsSelector(pods); err != nil {
			return podSelection{}, fmt.Errorf("pod selector: %w", err)
		}
	}
	return s, nil
}

// parseTierRule parses rule number i; the error says what made it fail
// closed, or why it is left out.
func parseTierRule(name string, i int, action cnp.ClusterNetworkPolicyRuleAction, peers []peerFields, protocols []cnp.ClusterNetworkPolicyProtocol) (parsedTierRule, error) {
	tr := parsedTierRule{name: cmp.Or(name, strconv.Itoa(i))}
	switch action {
	case cnp.ClusterNetworkPolicyRuleActionAccept:
		tr.action = renderer.TierAccept
	case cnp.ClusterNetworkPolicyRuleActionDeny:
		tr.action = renderer.TierDeny
	case cnp.ClusterNetworkPolicyRuleActionPass:
		tr.action = renderer.TierPass
	default:
		// Unknown to the API's validation too: the rule is left out.
		tr.leftOut = true
		return tr, fmt.Errorf("unknown action %q: the rule is left out", action)
	}
	var unknown []string
	for _, p := range peers {
		switch {
		case p.namespaces != nil:
			s, err := selection(p.namespaces, nil)
			if err != nil {
				unknown = append(unknown, err.Error())
				continue
			}
			tr.peers = append(tr.peers, s)
		case p.pods != nil:
			s, err := selection(&p.pods.NamespaceSelector, &p.pods.PodSelector)
			if err != nil {
				unknown = append(unknown, err.Error())
				continue
			}
			tr.peers = append(tr.peers, s)
		case len(p.networks) > 0:
			for _, n := range p.networks {
				pfx, err := netip.ParsePrefix(string(n))
				if err != nil {
					unknown = append(unknown, fmt.Sprintf("network %q", n))
					continue
				}
				tr.networks = append(tr.networks, unmapPrefix(pfx))
			}
		case p.unknown:
			unknown = append(unknown, "a node or domain-name peer")
		default:
			unknown = append(unknown, "a peer of no field vcoil knows")
		}
	}
	for _, p := range protocols {
		var proto renderer.Protocol
		var port *cnp.Port
		switch {
		case p.TCP != nil:
			proto, port = renderer.ProtocolTCP, p.TCP.DestinationPort
		case p.UDP != nil:
			proto, port = renderer.ProtocolUDP, p.UDP.DestinationPort
		case p.SCTP != nil:
			proto, port = renderer.ProtocolSCTP, p.SCTP.DestinationPort
		case p.DestinationNamedPort != "":
			unknown = append(unknown, fmt.Sprintf("named port %q", p.DestinationNamedPort))
			continue
		default:
			unknown = append(unknown, "a protocol of no field vcoil knows")
			continue
		}
		pr := renderer.AnyPort
		switch {
		case port == nil:
		case port.Range != nil && port.Range.Start >= 1 && port.Range.Start <= port.Range.End && port.Range.End <= 65535:
			pr = renderer.PortRange{First: uint16(port.Range.Start), Last: uint16(port.Range.End)}
		case port.Range == nil && port.Number >= 1 && port.Number <= 65535:
			pr = renderer.SinglePort(uint16(port.Number))
		default:
			unknown = append(unknown, fmt.Sprintf("port %+v", *port))
			continue
		}
		tr.ports = append(tr.ports, configurator.Port{Protocol: proto, Ports: pr})
	}
	if len(unknown) == 0 {
		return tr, nil
	}
	if tr.action == renderer.TierAccept {
		tr.leftOut = true
		return tr, fmt.Errorf("%s: not implemented, so this Accept rule accepts nothing", unknown[0])
	}
	tr.failClosed = true
	return tr, fmt.Errorf("%s: not implemented, so this %s rule fails closed and matches every connection", unknown[0], tr.action)
}

// selects reports whether selection s selects a pod with these labels in
// namespace ns (nil: unknown, selected by nothing).
func (s *podSelection) selects(podLabels map[string]string, ns *corev1.Namespace) bool {
	if s.namespaces == nil || ns == nil || !s.namespaces.Matches(labels.Set(ns.Labels)) {
		return false
	}
	return s.pods == nil || s.pods.Matches(labels.Set(podLabels))
}

// ClusterPolicyChanged reconfigures the local pods the policy selected
// before and selects after the change.
func (p *Processor) ClusterPolicyChanged(ctx context.Context, before, after *cnp.ClusterNetworkPolicy) error {
	if before != nil && after != nil && equality.Semantic.DeepEqual(before.Spec, after.Spec) {
		return nil
	}
	affected := make(map[renderer.PodID]struct{})
	if before != nil {
		if old := p.clusters[before.Name]; old != nil {
			p.addLocalSubjects(affected, old)
			delete(p.clusters, before.Name)
		}
	}
	if after != nil {
		p.addLocalSubjects(affected, p.addCluster(after))
	}
	p.sortClusters()
	return p.configure(ctx, affected, false)
}

func (p *Processor) addCluster(pol *cnp.ClusterNetworkPolicy) *parsedCluster {
	pc, problems := parseCluster(pol)
	for _, err := range problems {
		p.log.Info("part of a ClusterNetworkPolicy is not implemented", "policy", pc.name, "reason", err.Error())
	}
	p.clusters[pc.name] = pc
	return pc
}

// sortClusters orders the policies of each tier for evaluation: by
// priority, then by name (the API leaves equal priorities' order open).
func (p *Processor) sortClusters() {
	p.tiers = [2][]*parsedCluster{}
	for _, pc := range p.clusters {
		if i, ok := tierIndex(pc.tier); ok {
			p.tiers[i] = append(p.tiers[i], pc)
		}
	}
	for i := range p.tiers {
		slices.SortFunc(p.tiers[i], func(a, b *parsedCluster) int {
			return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.name, b.name))
		})
	}
}

// tierIndex: 0 for Admin, 1 for Baseline.
func tierIndex(t cnp.Tier) (int, bool) {
	switch t {
	case cnp.AdminTier:
		return 0, true
	case cnp.BaselineTier:
		return 1, true
	}
	return 0, false
}

// addLocalSubjects adds the local pods that pc's subject selects.
func (p *Processor) addLocalSubjects(affected map[renderer.PodID]struct{}, pc *parsedCluster) {
	if pc.subject.namespaces == nil {
		return
	}
	sel := pc.subject.pods
	if sel == nil {
		sel = labels.Everything()
	}
	for _, ns := range p.lookup.Namespaces(pc.subject.namespaces) {
		for _, pod := range p.lookup.PodsInNamespace(ns.Name, sel) {
			if pod.NodeName() == p.node {
				affected[renderer.PodID{Namespace: pod.Namespace(), Name: pod.Name()}] = struct{}{}
			}
		}
	}
}

// clustersFor returns the models of the ClusterNetworkPolicies whose
// subject selects pod t, per tier, in evaluation order.
func (p *Processor) clustersFor(t *podInfo) (admin, baseline []*configurator.ClusterPolicy) {
	ns := p.lookup.Namespace(t.id.Namespace)
	for i, pcs := range p.tiers {
		for _, pc := range pcs {
			if !pc.subject.selects(t.labels, ns) {
				continue
			}
			if pc.model == nil {
				pc.model = p.resolveCluster(pc)
			}
			if i == 0 {
				admin = append(admin, pc.model)
			} else {
				baseline = append(baseline, pc.model)
			}
		}
	}
	return admin, baseline
}

// resolveCluster resolves the peers of pc to the addresses of the pods
// they select now.
func (p *Processor) resolveCluster(pc *parsedCluster) *configurator.ClusterPolicy {
	m := &configurator.ClusterPolicy{Name: pc.name}
	for d, rules := range [2][]parsedTierRule{pc.ingress, pc.egress} {
		var out []configurator.TierRule
		for i := range rules {
			r := &rules[i]
			if r.leftOut {
				continue
			}
			tr := configurator.TierRule{Name: r.name, Action: r.action}
			if r.failClosed {
				tr.Match = configurator.Match{AllPeers: true}
				out = append(out, tr)
				continue
			}
			tr.Match.Ports = r.ports
			for _, n := range r.networks {
				tr.Match.Blocks = append(tr.Match.Blocks, configurator.IPBlock{Network: n})
			}
			seen := map[renderer.PodID]bool{}
			for _, s := range r.peers {
				sel := s.pods
				if sel == nil {
					sel = labels.Everything()
				}
				for _, ns := range p.lookup.Namespaces(s.namespaces) {
					for _, pod := range p.lookup.PodsInNamespace(ns.Name, sel) {
						i := p.info(pod)
						if !i.endpoint() || seen[i.id] {
							continue
						}
						seen[i.id] = true
						tr.Match.Pods = append(tr.Match.Pods, configurator.PeerPod{ID: i.id, IPs: i.ips})
					}
				}
			}
			if len(tr.Match.Pods)+len(tr.Match.Blocks) == 0 {
				continue // no peer: the rule matches nothing now
			}
			out = append(out, tr)
		}
		if renderer.Direction(d) == renderer.Ingress {
			m.Ingress = out
		} else {
			m.Egress = out
		}
	}
	return m
}

// clustersReferencing invalidates the models of the policies whose
// resolved peers a pod's change (b before, a after; either nil) changes,
// and adds their local subjects: those whose peers select the pod before
// or after but not both, or both with other addresses. A policy that
// selects the pod either way with the same addresses keeps its model, so a
// label change that a broad peer (every namespace) does not see costs
// nothing there.
func (p *Processor) clustersReferencing(affected map[renderer.PodID]struct{}, b, a *podInfo) {
	sel := func(x *podInfo, pc *parsedCluster) []bool {
		if !x.endpoint() {
			return nil
		}
		return pc.peersSelecting(x.labels, p.lookup.Namespace(x.id.Namespace))
	}
	for _, pc := range p.clusters {
		before, after := sel(b, pc), sel(a, pc)
		if before == nil && after == nil {
			continue
		}
		if slices.Equal(before, after) && slices.Equal(b.ips, a.ips) {
			continue
		}
		pc.model = nil
		p.addLocalSubjects(affected, pc)
	}
}

// peersSelecting says, peer by peer of every rule in order, which select a
// pod with these labels in namespace ns; nil when none does.
func (pc *parsedCluster) peersSelecting(podLabels map[string]string, ns *corev1.Namespace) []bool {
	var out []bool
	selected := false
	for _, rules := range [2][]parsedTierRule{pc.ingress, pc.egress} {
		for i := range rules {
			for j := range rules[i].peers {
				s := rules[i].peers[j].selects(podLabels, ns)
				out = append(out, s)
				selected = selected || s
			}
		}
	}
	if !selected {
		return nil
	}
	return out
}

// clustersOfNamespace invalidates the models of the policies whose
// namespace selectors (of subjects or peers) match a namespace with these
// labels, and adds their local subjects and the local pods of the
// namespace.
func (p *Processor) clustersOfNamespace(affected map[renderer.PodID]struct{}, name string, nsLabels map[string]string) {
	matches := func(s *podSelection) bool {
		return s.namespaces != nil && s.namespaces.Matches(labels.Set(nsLabels))
	}
	touched := false
	for _, pc := range p.clusters {
		referenced := false
		for _, rules := range [2][]parsedTierRule{pc.ingress, pc.egress} {
			for i := range rules {
				for j := range rules[i].peers {
					referenced = referenced || matches(&rules[i].peers[j])
				}
			}
		}
		if referenced {
			pc.model = nil
			p.addLocalSubjects(affected, pc)
		}
		touched = touched || referenced || matches(&pc.subject)
	}
	if touched {
		// Its pods may have become or stopped being subjects.
		for _, pod := range p.lookup.PodsInNamespace(name, labels.Everything()) {
			if pod.NodeName() == p.node {
				affected[renderer.PodID{Namespace: pod.Namespace(), Name: pod.Name()}] = struct{}{}
			}
		}
	}
}
