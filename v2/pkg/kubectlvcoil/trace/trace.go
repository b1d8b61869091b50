// Package trace decides what vcoil's model does with one flow: the service
// translation at the source's node, the source pod's egress rules on its
// node and the destination pod's ingress rules on its node, each read from
// the state the nodes' vcoild serve (package nodestate). It is the logic of
// `kubectl vcoil trace`.
//
// It is pure: it takes the flow, the nodes' states and where pods and nodes
// are, and returns the verdict with the steps that led to it. It does not
// send packets and it knows only what the states hold: routing, MTU, a
// broken dataplane or a rule that differs in the kernel or VPP from what
// vcoild believes it rendered are outside its view.
package trace

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// Verdicts of a flow or of one path of it.
const (
	// Allowed: every check passed.
	Allowed = "allowed"
	// Denied: a policy rule denied the flow.
	Denied = "denied"
	// Rejected and Dropped: the flow went to a Service frontend without
	// backends (nodestate.Frontend.NoBackends), or to a Service address on
	// a port it does not serve.
	Rejected = "rejected"
	Dropped  = "dropped"
	// PartlyAllowed: a flow through a Service some of whose backends are
	// allowed and others denied; which one a connection reaches is the
	// load balancer's choice.
	PartlyAllowed = "partly-allowed"
	// Unknown: a state needed to decide was missing.
	Unknown = "unknown"
)

// Results of one step.
const (
	StepPass    = "pass"
	StepDeny    = "deny"
	StepSkipped = "skipped"
	StepUnknown = "unknown"
)

// Checks a step makes.
const (
	CheckService = "service"
	CheckEgress  = "egress"
	CheckIngress = "ingress"
)

// Flow is one flow to trace. Src and Dst are resolved by the caller: a pod
// by its namespace and name (the Locator gives its addresses and node), a
// Service by its cluster IP, anything else by its address.
type Flow struct {
	Src Endpoint `json:"src"`
	Dst Endpoint `json:"dst"`
	// Port is the destination port; Protocol is "tcp", "udp" or "sctp".
	Port     uint16 `json:"port"`
	Protocol string `json:"protocol"`
	// SrcPort is the source port, 0 when unknown (an ephemeral port): a
	// rule that names source ports does not match an unknown one.
	SrcPort uint16 `json:"srcPort,omitempty"`
	// Backend, when valid, traces only that backend of a Service.
	Backend netip.Addr `json:"backend,omitzero"`
	// EntryNode is the node whose Service frontends translate a flow from
	// outside the cluster (a NodePort or LoadBalancer reached through that
	// node); empty: the first node, by name, that has a matching frontend.
	EntryNode string `json:"entryNode,omitempty"`
}

// Endpoint is one end of a flow: a pod (Namespace and Name) or an address.
type Endpoint struct {
	Namespace string     `json:"namespace,omitempty"`
	Name      string     `json:"name,omitempty"`
	Addr      netip.Addr `json:"addr,omitzero"`
	// Service names the Service ("namespace/name") whose address Addr is,
	// for the output only.
	Service string `json:"service,omitempty"`
}

// IsPod says whether the endpoint names a pod.
func (e Endpoint) IsPod() bool { return e.Name != "" }

func (e Endpoint) String() string {
	switch {
	case e.IsPod():
		return e.Namespace + "/" + e.Name
	case e.Service != "":
		return "svc/" + e.Service + " (" + e.Addr.String() + ")"
	default:
		return e.Addr.String()
	}
}

// PodLocation is where a pod runs and its addresses.
type PodLocation struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Node      string       `json:"node"`
	IPs       []netip.Addr `json:"ips"`
	// HostNetwork pods have their node's addresses: no pod rules apply to
	// them.
	HostNetwork bool `json:"hostNetwork,omitempty"`
}

// NodeLocation is a node's addresses.
type NodeLocation struct {
	Name  string       `json:"name"`
	Addrs []netip.Addr `json:"addrs"`
}

// Locator knows the cluster's pods and nodes (from the apiserver).
type Locator struct {
	Pods  []PodLocation
	Nodes []NodeLocation
}

// Pod finds a pod by namespace and name.
func (l Locator) Pod(namespace, name string) (PodLocation, bool) {
	for _, p := range l.Pods {
		if p.Namespace == namespace && p.Name == name {
			return p, true
		}
	}
	return PodLocation{}, false
}

// PodByAddr finds the pod (not hostNetwork) that has a.
func (l Locator) PodByAddr(a netip.Addr) (PodLocation, bool) {
	for _, p := range l.Pods {
		if !p.HostNetwork && slices.Contains(p.IPs, a) {
			return p, true
		}
	}
	return PodLocation{}, false
}

// NodeByAddr finds the node that has a.
func (l Locator) NodeByAddr(a netip.Addr) (NodeLocation, bool) {
	for _, n := range l.Nodes {
		if slices.Contains(n.Addrs, a) {
			return n, true
		}
	}
	return NodeLocation{}, false
}

// Party is one end of a flow as the trace found it.
type Party struct {
	// Kind is "pod", "node", "service" or "external".
	Kind string `json:"kind"`
	Pod  string `json:"pod,omitempty"` // namespace/name
	// Service is the Service ("namespace/name") of a service address.
	Service string     `json:"service,omitempty"`
	Node    string     `json:"node,omitempty"`
	Addr    netip.Addr `json:"addr"`
}

func (p Party) String() string {
	switch p.Kind {
	case "pod":
		return fmt.Sprintf("pod %s (%s on %s)", p.Pod, p.Addr, p.Node)
	case "node":
		return fmt.Sprintf("node %s (%s)", p.Node, p.Addr)
	case "service":
		return fmt.Sprintf("service %s (%s)", p.Service, p.Addr)
	default:
		return fmt.Sprintf("external %s", p.Addr)
	}
}

// Step is one check of a path.
type Step struct {
	// Check is CheckService, CheckEgress or CheckIngress.
	Check string `json:"check"`
	Node  string `json:"node,omitempty"`
	Pod   string `json:"pod,omitempty"`
	// Result is StepPass, StepDeny, StepSkipped or StepUnknown.
	Result string `json:"result"`
	// RuleIndex is the index, from 0, of the rule that decided in the
	// pod's list; nil when no rule did.
	RuleIndex *int   `json:"ruleIndex,omitempty"`
	Rule      string `json:"rule,omitempty"`
	// Tier is the tier whose rule decided: "admin", "networkpolicy" or
	// "baseline"; Policy the ClusterNetworkPolicy of an Admin or Baseline
	// rule. Passed lists the Admin Pass rules the connection took on its
	// way ("policy/rule").
	Tier   string   `json:"tier,omitempty"`
	Policy string   `json:"policy,omitempty"`
	Passed []string `json:"passed,omitempty"`
	// Why says, in words, why the step ended so.
	Why string `json:"why"`
}

// ServiceStep is the service translation at a node.
type ServiceStep struct {
	Node     string             `json:"node"`
	Frontend nodestate.Frontend `json:"frontend"`
	// Candidates are the backends the frontend spreads this flow over.
	Candidates []nodestate.Backend `json:"candidates"`
	Why        string              `json:"why"`
}

// Path is the flow to one destination (one backend of a Service, or the
// destination itself).
type Path struct {
	// Dst is the destination after the service translation, and Port its
	// port.
	Dst  Party  `json:"dst"`
	Port uint16 `json:"port"`
	// Source is the source address as the destination sees it.
	Source  netip.Addr `json:"source"`
	Steps   []Step     `json:"steps"`
	Verdict string     `json:"verdict"`
}

// Result is the verdict on a flow and how it was reached.
type Result struct {
	Flow     Flow         `json:"flow"`
	Src      Party        `json:"src"`
	Dst      Party        `json:"dst"`
	Service  *ServiceStep `json:"service,omitempty"`
	Paths    []Path       `json:"paths,omitempty"`
	Verdict  string       `json:"verdict"`
	Reason   string       `json:"reason"`
	Warnings []string     `json:"warnings,omitempty"`
}

// Trace decides the flow from the nodes' states (by node name; a node
// whose state could not be read is absent) and the locator.
func Trace(f Flow, states map[string]*nodestate.State, loc Locator) (Result, error) {
	f.Protocol = strings.ToLower(f.Protocol)
	if f.Protocol == "" {
		f.Protocol = "tcp"
	}
	if !slices.Contains([]string{"tcp", "udp", "sctp"}, f.Protocol) {
		return Result{}, fmt.Errorf("protocol %q: want tcp, udp or sctp", f.Protocol)
	}
	r := Result{Flow: f}
	dst, err := resolveDst(f.Dst, loc)
	if err != nil {
		return Result{}, err
	}
	src, err := resolveSrc(f.Src, dst.Addr, loc)
	if err != nil {
		return Result{}, err
	}
	r.Src, r.Dst = src, dst

	// 1. The service translation, at the source's node (or, from outside,
	// at the node the flow enters).
	type target struct {
		addr    netip.Addr
		port    uint16
		service bool
	}
	targets := []target{{addr: dst.Addr, port: f.Port}}
	if node, fe, why := frontendFor(f, src, states); fe != nil {
		step := &ServiceStep{Node: node, Frontend: *fe}
		r.Service = step
		r.Dst = Party{Kind: "service", Service: fe.Service, Addr: dst.Addr}
		cands, noBackends, candWhy := candidates(*fe, src, node)
		step.Why = candWhy
		if f.Backend.IsValid() {
			var picked []nodestate.Backend
			for _, b := range cands {
				if b.Address == f.Backend {
					picked = append(picked, b)
				}
			}
			if len(picked) == 0 {
				return Result{}, fmt.Errorf("backend %s is not one of the backends of %s %s:%d/%s on node %s for this flow", f.Backend, fe.Service, fe.Address, fe.Port, fe.Protocol, node)
			}
			cands = picked
		}
		step.Candidates = cands
		if len(cands) == 0 {
			r.Verdict = Dropped
			if noBackends == "reject" {
				r.Verdict = Rejected
			}
			r.Reason = fmt.Sprintf("node %s: %s", node, candWhy)
			return r, nil
		}
		targets = targets[:0]
		for _, b := range cands {
			targets = append(targets, target{addr: b.Address, port: b.Port, service: true})
		}
		if len(fe.SourceRanges) > 0 && !slices.ContainsFunc(fe.SourceRanges, func(p netip.Prefix) bool { return p.Contains(src.Addr) }) {
			r.Verdict = Dropped
			r.Reason = fmt.Sprintf("node %s: %s %s:%d accepts only sources in %v", node, fe.Service, fe.Address, fe.Port, fe.SourceRanges)
			return r, nil
		}
	} else if why != "" {
		r.Warnings = append(r.Warnings, why)
		if strings.HasPrefix(why, noPortPrefix) {
			r.Verdict = Rejected
			r.Reason = why
			return r, nil
		}
	}

	// 2. Policies, for each destination.
	for _, t := range targets {
		p := Path{Port: t.port}
		p.Dst = party(t.addr, loc)
		if f.Dst.IsPod() && !t.service {
			p.Dst = dst
		}
		p.Source = src.Addr
		// A pod that reaches itself through a Service arrives from its
		// node's NAT loopback, so that the reply comes back through the
		// translation.
		if t.service && src.Kind == "pod" && p.Dst.Kind == "pod" && p.Dst.Pod == src.Pod {
			if st := states[src.Node]; st != nil {
				if lb, ok := sameFamily(st.NATLoopback, t.addr); ok {
					p.Source = lb
				}
			} else {
				p.Steps = append(p.Steps, Step{Check: CheckIngress, Node: src.Node, Result: StepUnknown, Why: "hairpin: the NAT loopback of node " + src.Node + " is unknown: its state could not be read"})
			}
		}
		if src.Kind == "pod" && p.Dst.Kind == "pod" && p.Dst.Pod == src.Pod {
			// Local delivery, or a hairpin the policy renderers let
			// through in both directions.
			why := "a pod reaching itself is always allowed"
			if t.service {
				why = "a pod reaching itself through a Service is always allowed (it arrives from its node's NAT loopback)"
			}
			p.Steps = append(p.Steps,
				Step{Check: CheckEgress, Node: src.Node, Pod: src.Pod, Result: StepPass, Why: why},
				Step{Check: CheckIngress, Node: src.Node, Pod: src.Pod, Result: StepPass, Why: why})
		} else {
			p.Steps = append(p.Steps, egressStep(f, src, t.addr, t.port, states))
			p.Steps = append(p.Steps, ingressStep(f, p.Source, p.Dst, t.port, states))
		}
		p.Verdict = pathVerdict(p.Steps)
		r.Paths = append(r.Paths, p)
	}
	r.Verdict, r.Reason = verdict(r.Paths)
	return r, nil
}

const noPortPrefix = "no frontend"

func resolveDst(e Endpoint, loc Locator) (Party, error) {
	if e.IsPod() {
		p, ok := loc.Pod(e.Namespace, e.Name)
		if !ok {
			return Party{}, fmt.Errorf("pod %s/%s not found", e.Namespace, e.Name)
		}
		if len(p.IPs) == 0 {
			return Party{}, fmt.Errorf("pod %s/%s has no address", e.Namespace, e.Name)
		}
		a := p.IPs[0]
		if e.Addr.IsValid() {
			a = e.Addr
		}
		kind := "pod"
		if p.HostNetwork {
			kind = "node"
		}
		return Party{Kind: kind, Pod: e.Namespace + "/" + e.Name, Node: p.Node, Addr: a}, nil
	}
	if !e.Addr.IsValid() {
		return Party{}, fmt.Errorf("destination %v has no address", e)
	}
	return party(e.Addr, loc), nil
}

// resolveSrc finds the source, with its address in the destination's
// family.
func resolveSrc(e Endpoint, dst netip.Addr, loc Locator) (Party, error) {
	if e.IsPod() {
		p, ok := loc.Pod(e.Namespace, e.Name)
		if !ok {
			return Party{}, fmt.Errorf("pod %s/%s not found", e.Namespace, e.Name)
		}
		a, ok := sameFamily(p.IPs, dst)
		if !ok {
			return Party{}, fmt.Errorf("pod %s/%s has no address of the family of %s", e.Namespace, e.Name, dst)
		}
		if p.HostNetwork {
			return Party{Kind: "node", Pod: e.Namespace + "/" + e.Name, Node: p.Node, Addr: a}, nil
		}
		return Party{Kind: "pod", Pod: e.Namespace + "/" + e.Name, Node: p.Node, Addr: a}, nil
	}
	if !e.Addr.IsValid() {
		return Party{}, fmt.Errorf("source %v has no address", e)
	}
	if e.Addr.Is4() != dst.Is4() {
		return Party{}, fmt.Errorf("source %s and destination %s are of different families", e.Addr, dst)
	}
	return party(e.Addr, loc), nil
}

func party(a netip.Addr, loc Locator) Party {
	if p, ok := loc.PodByAddr(a); ok {
		return Party{Kind: "pod", Pod: p.Namespace + "/" + p.Name, Node: p.Node, Addr: a}
	}
	if n, ok := loc.NodeByAddr(a); ok {
		return Party{Kind: "node", Node: n.Name, Addr: a}
	}
	return Party{Kind: "external", Addr: a}
}

func sameFamily(addrs []netip.Addr, like netip.Addr) (netip.Addr, bool) {
	for _, a := range addrs {
		if a.Is4() == like.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// frontendFor finds the frontend the flow's destination matches at the
// node that translates it. Without one, why says what was looked at (empty
// when the destination is no Service address at all).
func frontendFor(f Flow, src Party, states map[string]*nodestate.State) (node string, fe *nodestate.Frontend, why string) {
	if f.Dst.IsPod() {
		// A pod's own address is no Service's.
		return "", nil, ""
	}
	var nodes []string
	switch {
	case src.Node != "":
		nodes = []string{src.Node}
	case f.EntryNode != "":
		nodes = []string{f.EntryNode}
	default:
		for n := range states {
			nodes = append(nodes, n)
		}
		slices.Sort(nodes)
	}
	addrKnown := false
	for _, n := range nodes {
		st := states[n]
		if st == nil {
			why = fmt.Sprintf("node %s: its state could not be read: no service translation was checked there", n)
			continue
		}
		if st.Services == nil {
			why = fmt.Sprintf("node %s: vcoil's service proxy does not run there: no service translation was checked", n)
			continue
		}
		for i := range st.Services.Frontends {
			x := &st.Services.Frontends[i]
			if x.Address != f.Dst.Addr {
				continue
			}
			addrKnown = true
			if x.Port == f.Port && strings.EqualFold(x.Protocol, f.Protocol) {
				return n, x, ""
			}
		}
		if addrKnown {
			return n, nil, fmt.Sprintf("%s on node %s for %s port %d/%s: the address is a Service's, the port is not", noPortPrefix, n, f.Dst.Addr, f.Port, f.Protocol)
		}
	}
	return "", nil, why
}

// candidates are the backends the frontend spreads the flow over, as the
// service renderers choose them, and what the frontend does without any:
// for the node's own traffic to an external frontend of a Local policy,
// the frontend's FromNode when the renderer has one (the cluster's
// endpoints, as kube-proxy does); else its backends, of which only the
// node's own with a Local policy; ready ones, else terminating ones.
func candidates(fe nodestate.Frontend, src Party, node string) ([]nodestate.Backend, string, string) {
	backends, noBackends := fe.Backends, fe.NoBackends
	local := fe.Local
	fromNode := ""
	if fe.FromNode != nil && src.Node == node {
		backends, noBackends, local = fe.FromNode.Backends, fe.FromNode.NoBackends, false
		fromNode = ", as for traffic from the node and its pods (the cluster's endpoints)"
	}
	var ready, terminating []nodestate.Backend
	for _, b := range backends {
		if local && !b.Local {
			continue
		}
		if b.Terminating {
			terminating = append(terminating, b)
		} else {
			ready = append(ready, b)
		}
	}
	what := fmt.Sprintf("%s %s %s:%d/%s", fe.Kind, fe.Service, fe.Address, fe.Port, fe.Protocol)
	switch {
	case len(ready) > 0:
		return ready, "", fmt.Sprintf("%s: %d backend(s)%s%s", what, len(ready), localNote(local), fromNode)
	case len(terminating) > 0:
		return terminating, "", fmt.Sprintf("%s: no ready backend, %d terminating one(s)%s%s", what, len(terminating), localNote(local), fromNode)
	case local && len(backends) > 0:
		return nil, "drop", fmt.Sprintf("%s: traffic policy Local and no endpoint on node %s (%d elsewhere): drop", what, node, len(backends))
	case local && noBackends != "reject":
		return nil, "drop", fmt.Sprintf("%s: traffic policy Local and no endpoint on node %s: drop", what, node)
	default:
		return nil, orDrop(noBackends), fmt.Sprintf("%s: no endpoints%s: %s", what, fromNode, orDrop(noBackends))
	}
}

func localNote(local bool) string {
	if local {
		return ", the node's own (traffic policy Local)"
	}
	return ""
}

func orDrop(s string) string {
	if s == "" {
		return "drop"
	}
	return s
}

// egressStep is the source pod's Egress list on its node.
func egressStep(f Flow, src Party, dst netip.Addr, port uint16, states map[string]*nodestate.State) Step {
	s := Step{Check: CheckEgress, Node: src.Node, Pod: src.Pod}
	if src.Kind != "pod" {
		s.Result, s.Why = StepSkipped, "the source is not a pod of the cluster: no egress rules"
		return s
	}
	rules, why, ok := podRules(states, src.Node, src.Pod)
	if !ok {
		s.Result, s.Why = why.result, why.text
		return s
	}
	if len(rules.Egress)+len(rules.AdminEgress)+len(rules.BaselineEgress) > 0 && slices.Contains(states[src.Node].Policies.AlwaysAllowed, dst) {
		s.Result, s.Why = StepPass, fmt.Sprintf("%s is always allowed from pods of node %s (its own address or NAT loopback)", dst, src.Node)
		return s
	}
	return decideTiers(s, rules.AdminEgress, rules.Egress, rules.BaselineEgress, packet{src: src.Addr, dst: dst, proto: f.Protocol, srcPort: f.SrcPort, dstPort: port}, "egress")
}

// ingressStep is the destination pod's Ingress list on its node, for the
// source as the pod sees it.
func ingressStep(f Flow, source netip.Addr, dst Party, port uint16, states map[string]*nodestate.State) Step {
	s := Step{Check: CheckIngress, Node: dst.Node, Pod: dst.Pod}
	if dst.Kind != "pod" {
		s.Result, s.Why = StepSkipped, "the destination is not a pod of the cluster: no ingress rules"
		return s
	}
	rules, why, ok := podRules(states, dst.Node, dst.Pod)
	if !ok {
		s.Result, s.Why = why.result, why.text
		return s
	}
	if len(rules.Ingress)+len(rules.AdminIngress)+len(rules.BaselineIngress) > 0 && slices.Contains(states[dst.Node].Policies.AlwaysAllowed, source) {
		s.Result, s.Why = StepPass, fmt.Sprintf("%s is always allowed on node %s (a node address or the NAT loopback)", source, dst.Node)
		return s
	}
	return decideTiers(s, rules.AdminIngress, rules.Ingress, rules.BaselineIngress, packet{src: source, dst: dst.Addr, proto: f.Protocol, srcPort: f.SrcPort, dstPort: port}, "ingress")
}

type reason struct{ result, text string }

func podRules(states map[string]*nodestate.State, node, pod string) (nodestate.PodRules, reason, bool) {
	st := states[node]
	if st == nil {
		return nodestate.PodRules{}, reason{StepUnknown, "the state of node " + node + " could not be read"}, false
	}
	if st.Policies == nil {
		return nodestate.PodRules{}, reason{StepSkipped, "vcoil's network policies do not run on node " + node}, false
	}
	for _, p := range st.Policies.Pods {
		if p.Namespace+"/"+p.Name == pod {
			return p, reason{}, true
		}
	}
	// The policy state lists every pod with an address; one missing is
	// not (yet) known to the node's policy agent.
	return nodestate.PodRules{}, reason{StepUnknown, "pod " + pod + " is not in the policy state of node " + node}, false
}

type packet struct {
	src, dst         netip.Addr
	proto            string
	srcPort, dstPort uint16
}

// decideTiers follows a direction's tiers: the Admin rules (the first
// that matches decides; Pass goes on), then the NetworkPolicy list of an
// isolated pod (final), then the Baseline rules (Deny denies; Accept, Pass
// and no match allow).
func decideTiers(s Step, admin []nodestate.TierRule, np []nodestate.Rule, baseline []nodestate.TierRule, pk packet, dir string) Step {
	first := func(rules []nodestate.TierRule) (int, bool) {
		for i, r := range rules {
			if Matches(r.Rule, pk.src, pk.dst, pk.proto, pk.srcPort, pk.dstPort) {
				return i, true
			}
		}
		return 0, false
	}
	tierStep := func(tier string, i int, r nodestate.TierRule, result, verb string) Step {
		s.RuleIndex, s.Rule, s.Tier, s.Policy, s.Result = &i, TierRuleString(r), tier, r.Policy, result
		s.Why = fmt.Sprintf("%s %s rule %d of pod %s on node %s (%s) %s it", tier, dir, i, s.Pod, s.Node, origin(r), verb)
		return s
	}
	if i, ok := first(admin); ok {
		r := admin[i]
		switch r.Action {
		case "accept":
			return tierStep("admin", i, r, StepPass, "accepts")
		case "deny":
			return tierStep("admin", i, r, StepDeny, "denies")
		}
		s.Passed = append(s.Passed, origin(r))
	}
	passed := ""
	if len(s.Passed) > 0 {
		passed = " after the Admin Pass of " + strings.Join(s.Passed, ", ")
	}
	if len(np) > 0 {
		s = decide(s, np, pk, dir)
		s.Tier = "networkpolicy"
		s.Why += passed
		return s
	}
	if i, ok := first(baseline); ok {
		r := baseline[i]
		if r.Action == "deny" {
			s = tierStep("baseline", i, r, StepDeny, "denies")
		} else {
			s = tierStep("baseline", i, r, StepPass, map[string]string{"accept": "accepts", "pass": "passes (nothing is left to ask: allowed)"}[r.Action])
		}
		s.Why += passed
		return s
	}
	s.Result = StepPass
	if len(admin)+len(baseline) == 0 {
		s.Why = fmt.Sprintf("pod %s is not isolated for %s on node %s", s.Pod, dir, s.Node)
	} else {
		s.Why = fmt.Sprintf("no ClusterNetworkPolicy rule decides and no NetworkPolicy isolates pod %s for %s on node %s: allowed%s", s.Pod, dir, s.Node, passed)
	}
	return s
}

// origin names where a tier rule comes from.
func origin(r nodestate.TierRule) string {
	if r.Policy == "" {
		return "always allowed"
	}
	return "ClusterNetworkPolicy " + r.Policy + " rule " + r.RuleName
}

// TierRuleString writes a ClusterNetworkPolicy rule as one line, with its
// origin: "deny tcp src any dst 10.0.0.0/8 (ClusterNetworkPolicy p rule 0)".
func TierRuleString(r nodestate.TierRule) string {
	return RuleString(r.Rule) + " (" + origin(r) + ")"
}

func decide(s Step, rules []nodestate.Rule, pk packet, dir string) Step {
	if len(rules) == 0 {
		s.Result, s.Why = StepPass, fmt.Sprintf("pod %s is not isolated for %s on node %s", s.Pod, dir, s.Node)
		return s
	}
	for i, r := range rules {
		if !Matches(r, pk.src, pk.dst, pk.proto, pk.srcPort, pk.dstPort) {
			continue
		}
		s.RuleIndex = &i
		s.Rule = RuleString(r)
		if r.Action == "permit" {
			s.Result, s.Why = StepPass, fmt.Sprintf("%s rule %d of pod %s on node %s permits it", dir, i, s.Pod, s.Node)
		} else {
			s.Result, s.Why = StepDeny, fmt.Sprintf("%s rule %d of pod %s on node %s denies it", dir, i, s.Pod, s.Node)
		}
		return s
	}
	// The lists end with a rule matching everything; a list that does not
	// is taken as denying what it does not permit, as an isolated pod does.
	s.Result, s.Why = StepDeny, fmt.Sprintf("no %s rule of pod %s on node %s matches: an isolated pod denies it", dir, s.Pod, s.Node)
	return s
}

// Matches says whether the rule matches a packet. A rule that names source
// ports does not match an unknown (0) source port.
func Matches(r nodestate.Rule, src, dst netip.Addr, proto string, srcPort, dstPort uint16) bool {
	if r.Protocol != "" && r.Protocol != "any" && !strings.EqualFold(r.Protocol, proto) {
		return false
	}
	if r.Src.IsValid() && !r.Src.Contains(src) {
		return false
	}
	if r.Dst.IsValid() && !r.Dst.Contains(dst) {
		return false
	}
	if r.SrcPorts != nil && (srcPort == 0 || srcPort < r.SrcPorts.First || srcPort > r.SrcPorts.Last) {
		return false
	}
	if r.DstPorts != nil && (dstPort < r.DstPorts.First || dstPort > r.DstPorts.Last) {
		return false
	}
	return true
}

// RuleString writes a rule as one line: "deny tcp src 10.0.0.0/24 dst any
// dport 80-81".
func RuleString(r nodestate.Rule) string {
	var b strings.Builder
	b.WriteString(r.Action)
	proto := r.Protocol
	if proto == "" {
		proto = "any"
	}
	b.WriteString(" " + proto)
	addr := func(p netip.Prefix) string {
		if !p.IsValid() {
			return "any"
		}
		return p.String()
	}
	b.WriteString(" src " + addr(r.Src))
	if r.SrcPorts != nil {
		b.WriteString(" sport " + ports(*r.SrcPorts))
	}
	b.WriteString(" dst " + addr(r.Dst))
	if r.DstPorts != nil {
		b.WriteString(" dport " + ports(*r.DstPorts))
	}
	return b.String()
}

func ports(p nodestate.PortRange) string {
	if p.First == p.Last {
		return fmt.Sprint(p.First)
	}
	return fmt.Sprintf("%d-%d", p.First, p.Last)
}

func pathVerdict(steps []Step) string {
	unknown := false
	for _, s := range steps {
		switch s.Result {
		case StepDeny:
			return Denied
		case StepUnknown:
			unknown = true
		}
	}
	if unknown {
		return Unknown
	}
	return Allowed
}

func verdict(paths []Path) (string, string) {
	var allowed, denied, unknown int
	var first string
	for _, p := range paths {
		switch p.Verdict {
		case Allowed:
			allowed++
		case Denied:
			denied++
			if first == "" {
				first = decidingWhy(p)
			}
		default:
			unknown++
			if first == "" {
				first = decidingWhy(p)
			}
		}
	}
	switch {
	case allowed == len(paths):
		return Allowed, "every check passed"
	case denied == len(paths):
		return Denied, first
	case unknown > 0 && allowed == 0 && denied == 0:
		return Unknown, first
	case allowed > 0 && unknown == 0:
		return PartlyAllowed, fmt.Sprintf("%d of %d backends allowed; %s", allowed, len(paths), first)
	default:
		return Unknown, fmt.Sprintf("%d of %d backends allowed, %d denied, %d unknown; %s", allowed, len(paths), denied, unknown, first)
	}
}

func decidingWhy(p Path) string {
	for _, s := range p.Steps {
		if s.Result == StepDeny || s.Result == StepUnknown {
			if s.Rule != "" {
				return s.Why + ": " + s.Rule
			}
			return s.Why
		}
	}
	return ""
}
