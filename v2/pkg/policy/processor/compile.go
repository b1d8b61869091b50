package processor

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// compiledPolicy is a policy with its peers resolved against the current
// pods and namespaces. It stays valid until a pod or namespace it references
// changes (see references), and is shared by every pod the policy selects.
type compiledPolicy struct {
	// shared is the model for every selected pod, unless perPod.
	shared *configurator.Policy
	// perPod is set when ingress rules have named ports: they are resolved
	// on each selected pod (the destination), so the model differs per pod.
	perPod  bool
	ingress []compiledRule
	// models remembers the per-pod models, so that a pod keeps getting the
	// same *configurator.Policy (and the configurator its generated rules)
	// while neither the policy nor the pod changes.
	models map[renderer.PodID]podModel
}

type podModel struct {
	pod   *podInfo
	model *configurator.Policy
}

type compiledRule struct {
	peers configurator.Match // peers only, no ports
	rule  *parsedRule
}

// compile resolves pp's peers: label selectors to pods and their addresses,
// namespace selectors to the pods of those namespaces, and egress named
// ports to numbers per destination pod.
func (p *Processor) compile(pp *parsedPolicy) *compiledPolicy {
	cp := &compiledPolicy{}
	model := &configurator.Policy{
		ID:              pp.id,
		IsolatesIngress: pp.isolatesIngress,
		IsolatesEgress:  pp.isolatesEgress,
	}
	for i := range pp.ingress {
		r := &pp.ingress[i]
		peers, _ := p.resolvePeers(pp, r)
		cp.ingress = append(cp.ingress, compiledRule{peers: peers, rule: r})
		if len(r.named) > 0 {
			cp.perPod = true
		}
	}
	if !cp.perPod {
		model.Ingress = cp.ingressMatches(nil)
	}
	for i := range pp.egress {
		model.Egress = p.appendEgressMatches(model.Egress, pp, &pp.egress[i])
	}
	cp.shared = model
	return cp
}

// forPod returns the model of the policy for the selected pod t.
func (cp *compiledPolicy) forPod(t *podInfo) *configurator.Policy {
	if !cp.perPod {
		return cp.shared
	}
	if pm, ok := cp.models[t.id]; ok && pm.pod == t {
		return pm.model
	}
	m := &configurator.Policy{
		ID:              cp.shared.ID,
		IsolatesIngress: cp.shared.IsolatesIngress,
		IsolatesEgress:  cp.shared.IsolatesEgress,
		Ingress:         cp.ingressMatches(t),
		Egress:          cp.shared.Egress,
	}
	if cp.models == nil {
		cp.models = make(map[renderer.PodID]podModel)
	}
	cp.models[t.id] = podModel{pod: t, model: m}
	return m
}

// ingressMatches builds the ingress matches, resolving named ports on the
// destination pod t (nil when no rule has named ports). A rule that selects
// no peer, or whose ports all fail to resolve, permits nothing and is left
// out.
func (cp *compiledPolicy) ingressMatches(t *podInfo) []configurator.Match {
	var out []configurator.Match
	for _, cr := range cp.ingress {
		if emptyPeers(&cr.peers) {
			continue
		}
		m := cr.peers
		if !cr.rule.allPorts {
			m.Ports = resolvePorts(cr.rule, t)
			if len(m.Ports) == 0 {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

func emptyPeers(m *configurator.Match) bool {
	return !m.AllPeers && len(m.Pods) == 0 && len(m.Blocks) == 0
}

// resolvePorts is a rule's numbered ports plus its named ports as the pod t
// (nil: none) defines them. A named port matches a container port of that
// name and of the same protocol.
func resolvePorts(r *parsedRule, t *podInfo) []configurator.Port {
	if len(r.named) == 0 {
		return r.numbered
	}
	out := slices.Clone(r.numbered)
	if t == nil {
		return out
	}
	for _, n := range r.named {
		if v, ok := t.port(n.name); ok && v.protocol == n.protocol {
			out = append(out, configurator.Port{Protocol: n.protocol, Ports: renderer.SinglePort(v.port)})
		}
	}
	return out
}

// appendEgressMatches adds the matches of one egress rule. Numbered ports
// apply to all its peers; named ports are resolved per destination pod, so
// each pod among the peers (selected, or with an address inside an ipBlock,
// or any pod when the rule has no peers) that defines them gets its own
// match. An external destination never matches a named port.
func (p *Processor) appendEgressMatches(out []configurator.Match, pp *parsedPolicy, r *parsedRule) []configurator.Match {
	peers, selected := p.resolvePeers(pp, r)
	if emptyPeers(&peers) {
		return out
	}
	if r.allPorts {
		return append(out, peers)
	}
	if len(r.numbered) > 0 {
		m := peers
		m.Ports = r.numbered
		out = append(out, m)
	}
	if len(r.named) == 0 {
		return out
	}
	for _, d := range p.namedPortDestinations(r, peers, selected) {
		ports := resolvePorts(&parsedRule{named: r.named}, d.info)
		if len(ports) == 0 {
			continue
		}
		out = append(out, configurator.Match{
			Pods:  []configurator.PeerPod{{ID: d.info.id, IPs: d.ips}},
			Ports: ports,
		})
	}
	return out
}

type destination struct {
	info *podInfo
	ips  []netip.Addr
}

// namedPortDestinations lists the pods a rule with named ports may reach,
// each with the addresses of it that the rule's peers cover, ordered by pod.
func (p *Processor) namedPortDestinations(r *parsedRule, peers configurator.Match, selected []*podInfo) []destination {
	byID := make(map[renderer.PodID]*destination)
	if peers.AllPeers {
		for _, pod := range p.lookup.Pods() {
			if i := p.info(pod); i.endpoint() {
				byID[i.id] = &destination{info: i, ips: i.ips}
			}
		}
	} else {
		for _, i := range selected {
			byID[i.id] = &destination{info: i, ips: i.ips}
		}
		if len(peers.Blocks) > 0 {
			for _, pod := range p.lookup.Pods() {
				i := p.info(pod)
				if !i.endpoint() {
					continue
				}
				for _, a := range i.ips {
					if !inAnyBlock(peers.Blocks, a) {
						continue
					}
					d := byID[i.id]
					if d == nil {
						d = &destination{info: i}
						byID[i.id] = d
					}
					if !slices.Contains(d.ips, a) {
						d.ips = append(d.ips, a)
					}
				}
			}
		}
	}
	out := make([]destination, 0, len(byID))
	for _, d := range byID {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b destination) int { return a.info.id.Compare(b.info.id) })
	return out
}

func inAnyBlock(blocks []configurator.IPBlock, a netip.Addr) bool {
	for _, b := range blocks {
		if inBlock(&b, a) {
			return true
		}
	}
	return false
}

func inBlock(b *configurator.IPBlock, a netip.Addr) bool {
	if !b.Network.Contains(a) {
		return false
	}
	for _, e := range b.Except {
		if e.Contains(a) {
			return false
		}
	}
	return true
}

// resolvePeers turns a rule's peers into a Match without ports, and returns
// the pods its selectors matched. Pods without an address are left out: they
// are added when they get one (the pod change dirties this policy).
func (p *Processor) resolvePeers(pp *parsedPolicy, r *parsedRule) (configurator.Match, []*podInfo) {
	if r.allPeers {
		return configurator.Match{AllPeers: true}, nil
	}
	var m configurator.Match
	var selected []*podInfo
	seen := make(map[renderer.PodID]bool)
	add := func(pods []cache.PodView) {
		for _, pod := range pods {
			i := p.info(pod)
			if !i.endpoint() || seen[i.id] {
				continue
			}
			seen[i.id] = true
			selected = append(selected, i)
			m.Pods = append(m.Pods, configurator.PeerPod{ID: i.id, IPs: i.ips})
		}
	}
	for _, peer := range r.peers {
		switch {
		case peer.block != nil:
			m.Blocks = append(m.Blocks, *peer.block)
		case peer.namespaceSelector == nil:
			add(p.lookup.PodsInNamespace(pp.id.Namespace, peer.podSelector))
		default:
			podSel := peer.podSelector
			if podSel == nil {
				podSel = labels.Everything()
			}
			for _, ns := range p.lookup.Namespaces(peer.namespaceSelector) {
				add(p.lookup.PodsInNamespace(ns.Name, podSel))
			}
		}
	}
	return m, selected
}

// references reports whether the compiled form of pp depends on pod x (nil
// or not an endpoint: never): a selector of a peer matches it, or an egress
// rule with named ports may reach it.
func (pp *parsedPolicy) references(x *podInfo, ns *corev1.Namespace) bool {
	if !x.endpoint() {
		return false
	}
	for _, r := range pp.ingress {
		for i := range r.peers {
			if r.peers[i].selects(pp.id.Namespace, x.id.Namespace, x.labels, ns) {
				return true
			}
		}
	}
	for _, r := range pp.egress {
		for i := range r.peers {
			if r.peers[i].selects(pp.id.Namespace, x.id.Namespace, x.labels, ns) {
				return true
			}
		}
		if len(r.named) == 0 {
			continue
		}
		if r.allPeers {
			return true
		}
		for _, peer := range r.peers {
			if peer.block == nil {
				continue
			}
			for _, a := range x.ips {
				if inBlock(peer.block, a) {
					return true
				}
			}
		}
	}
	return false
}

// crossesNamespaces reports whether pp may reference a pod outside its own
// namespace (references): a peer with a namespaceSelector, or an egress
// rule with named ports whose peers are every address or address blocks,
// which reference a pod by its addresses. Any other peer selects pods of
// pp's namespace only.
func (pp *parsedPolicy) crossesNamespaces() bool {
	for _, rules := range [][]parsedRule{pp.ingress, pp.egress} {
		for _, r := range rules {
			for _, peer := range r.peers {
				if peer.block == nil && peer.namespaceSelector != nil {
					return true
				}
			}
		}
	}
	for _, r := range pp.egress {
		if len(r.named) == 0 {
			continue
		}
		if r.allPeers || slices.ContainsFunc(r.peers, func(peer parsedPeer) bool { return peer.block != nil }) {
			return true
		}
	}
	return false
}

// referencesNamespace reports whether a namespaceSelector of pp's peers
// matches a namespace with these labels.
func (pp *parsedPolicy) referencesNamespace(nsLabels map[string]string) bool {
	for _, rules := range [][]parsedRule{pp.ingress, pp.egress} {
		for _, r := range rules {
			for _, peer := range r.peers {
				if peer.namespaceSelector != nil && peer.namespaceSelector.Matches(labels.Set(nsLabels)) {
					return true
				}
			}
		}
	}
	return false
}
