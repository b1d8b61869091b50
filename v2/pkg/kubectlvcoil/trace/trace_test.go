package trace

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

var (
	a = netip.MustParseAddr
	p = netip.MustParsePrefix
)

// The fixture cluster: node1 (198.18.0.1) runs client, blocked, other and
// web2; node2 (198.18.0.2) runs server. server admits client on TCP 8080
// only; blocked may only speak DNS.
func fixture() (map[string]*nodestate.State, Locator) {
	denyAll := nodestate.Rule{Action: "deny", Protocol: "any"}
	svc := nodestate.Frontend{Service: "shop/web", Kind: nodestate.FrontendClusterIP, Address: a("10.96.0.10"), Port: 80, Protocol: "TCP",
		Backends: []nodestate.Backend{
			{Address: a("10.0.1.5"), Port: 8080, Node: "node2"},
			{Address: a("10.0.0.7"), Port: 8080, Node: "node1"},
		}}
	empty := nodestate.Frontend{Service: "shop/empty", Kind: nodestate.FrontendClusterIP, Address: a("10.96.0.11"), Port: 80, Protocol: "TCP", NoBackends: "reject"}
	local := nodestate.Frontend{Service: "shop/local", Kind: nodestate.FrontendClusterIP, Address: a("10.96.0.12"), Port: 80, Protocol: "TCP", Local: true, NoBackends: "drop",
		Backends: []nodestate.Backend{{Address: a("10.0.1.5"), Port: 8080, Node: "node2"}}}
	withLocal := func(node string, fs ...nodestate.Frontend) []nodestate.Frontend {
		var out []nodestate.Frontend
		for _, f := range fs {
			f.Backends = append([]nodestate.Backend(nil), f.Backends...)
			for i := range f.Backends {
				f.Backends[i].Local = f.Backends[i].Node == node
			}
			out = append(out, f)
		}
		return out
	}
	node1 := &nodestate.State{
		APIVersion: nodestate.APIVersion, Node: "node1", Dataplane: "linux",
		NATLoopback: []netip.Addr{a("10.0.0.31")},
		Services:    &nodestate.Services{Renderer: "nftables", Frontends: withLocal("node1", svc, empty, local)},
		Policies: &nodestate.Policies{Renderer: "nftables", AlwaysAllowed: []netip.Addr{a("198.18.0.1"), a("10.0.0.31")},
			Pods: []nodestate.PodRules{
				{Namespace: "shop", Name: "blocked", IPs: []netip.Addr{a("10.0.0.6")}, Egress: []nodestate.Rule{
					{Action: "permit", Protocol: "udp", DstPorts: &nodestate.PortRange{First: 53, Last: 53}},
					denyAll,
				}},
				{Namespace: "shop", Name: "client", IPs: []netip.Addr{a("10.0.0.5")}},
				{Namespace: "shop", Name: "other", IPs: []netip.Addr{a("10.0.0.8")}},
				{Namespace: "shop", Name: "web2", IPs: []netip.Addr{a("10.0.0.7")}},
			}},
	}
	node2 := &nodestate.State{
		APIVersion: nodestate.APIVersion, Node: "node2", Dataplane: "vpp",
		NATLoopback: []netip.Addr{a("10.0.1.31")},
		Services:    &nodestate.Services{Renderer: "nat44", Frontends: withLocal("node2", svc, empty, local)},
		Policies: &nodestate.Policies{Renderer: "vpp-acl", AlwaysAllowed: []netip.Addr{a("198.18.0.2"), a("10.0.1.31")},
			Pods: []nodestate.PodRules{
				{Namespace: "shop", Name: "server", IPs: []netip.Addr{a("10.0.1.5")}, Ingress: []nodestate.Rule{
					{Action: "permit", Protocol: "tcp", Src: p("10.0.0.5/32"), DstPorts: &nodestate.PortRange{First: 8080, Last: 8080}},
					denyAll,
				}},
			}},
	}
	loc := Locator{
		Pods: []PodLocation{
			{Namespace: "shop", Name: "client", Node: "node1", IPs: []netip.Addr{a("10.0.0.5")}},
			{Namespace: "shop", Name: "blocked", Node: "node1", IPs: []netip.Addr{a("10.0.0.6")}},
			{Namespace: "shop", Name: "web2", Node: "node1", IPs: []netip.Addr{a("10.0.0.7")}},
			{Namespace: "shop", Name: "other", Node: "node1", IPs: []netip.Addr{a("10.0.0.8")}},
			{Namespace: "shop", Name: "server", Node: "node2", IPs: []netip.Addr{a("10.0.1.5")}},
			{Namespace: "kube-system", Name: "vcoild-x", Node: "node1", IPs: []netip.Addr{a("198.18.0.1")}, HostNetwork: true},
		},
		Nodes: []NodeLocation{
			{Name: "node1", Addrs: []netip.Addr{a("198.18.0.1")}},
			{Name: "node2", Addrs: []netip.Addr{a("198.18.0.2")}},
		},
	}
	return map[string]*nodestate.State{"node1": node1, "node2": node2}, loc
}

// addBackend adds a backend on node to the frontends of vip on every node.
func addBackend(states map[string]*nodestate.State, vip string, b netip.Addr, node string) {
	for n, st := range states {
		for i := range st.Services.Frontends {
			f := &st.Services.Frontends[i]
			if f.Address == a(vip) {
				f.Backends = append(f.Backends, nodestate.Backend{Address: b, Port: 8080, Node: node, Local: n == node})
			}
		}
	}
}

// lbLocal adds a LoadBalancer of externalTrafficPolicy Local with its only
// endpoint on node2, as the nftables renderer shows it: the external
// clients get the node's own endpoints, the node's own traffic (FromNode)
// the cluster's.
func lbLocal(states map[string]*nodestate.State) {
	server := nodestate.Backend{Address: a("10.0.1.5"), Port: 8080, Node: "node2"}
	for n, st := range states {
		f := nodestate.Frontend{Service: "shop/lb", Kind: nodestate.FrontendLoadBalancer, Address: a("203.0.113.20"), Port: 80, Protocol: "TCP", Local: true,
			FromNode: &nodestate.NodeTraffic{Backends: []nodestate.Backend{server}}}
		if n == "node2" {
			local := server
			local.Local = true
			f.Backends = []nodestate.Backend{local}
			f.FromNode.Backends = []nodestate.Backend{local}
		} else {
			f.NoBackends = "drop"
		}
		st.Services.Frontends = append(st.Services.Frontends, f)
	}
}

func pod(ns, name string) Endpoint { return Endpoint{Namespace: ns, Name: name} }
func ip(s string) Endpoint         { return Endpoint{Addr: a(s)} }

// decided is what a test expects of one path: its destination, the source
// the destination sees, and the verdict with the step and rule that
// decided it.
type decided struct {
	dst     string
	source  string
	verdict string
	// check, node, pod and rule name the deciding step (a deny), or are
	// empty for an allowed path.
	check, node, pod string
	rule             int
}

func TestTrace(t *testing.T) {
	_, loc := fixture()
	tests := []struct {
		name    string
		flow    Flow
		states  func(map[string]*nodestate.State)
		verdict string
		reason  string
		paths   []decided
	}{
		{
			name:    "a client the server's ingress rules permit is allowed",
			flow:    Flow{Src: pod("shop", "client"), Dst: pod("shop", "server"), Port: 8080},
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.0.5", verdict: Allowed}},
		},
		{
			name:    "a pod whose egress rules permit only DNS is denied by its egress rule 1 on its node",
			flow:    Flow{Src: pod("shop", "blocked"), Dst: pod("shop", "server"), Port: 8080},
			verdict: Denied,
			reason:  "egress rule 1 of pod shop/blocked on node node1 denies it: deny any src any dst any",
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.0.6", verdict: Denied, check: CheckEgress, node: "node1", pod: "shop/blocked", rule: 1}},
		},
		{
			name:    "a pod the server does not admit is denied by the server's ingress rule 1 on the server's node",
			flow:    Flow{Src: pod("shop", "other"), Dst: pod("shop", "server"), Port: 8080},
			verdict: Denied,
			reason:  "ingress rule 1 of pod shop/server on node node2 denies it",
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.0.8", verdict: Denied, check: CheckIngress, node: "node2", pod: "shop/server", rule: 1}},
		},
		{
			name:    "the admitted client on another port is denied: the permit names TCP 8080",
			flow:    Flow{Src: pod("shop", "client"), Dst: pod("shop", "server"), Port: 9090},
			verdict: Denied,
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.0.5", verdict: Denied, check: CheckIngress, node: "node2", pod: "shop/server", rule: 1}},
		},
		{
			name:    "a ClusterIP is translated at the source's node and every backend is traced: both allowed for the client",
			flow:    Flow{Src: pod("shop", "client"), Dst: Endpoint{Addr: a("10.96.0.10"), Service: "shop/web"}, Port: 80},
			verdict: Allowed,
			paths: []decided{
				{dst: "10.0.1.5", source: "10.0.0.5", verdict: Allowed},
				{dst: "10.0.0.7", source: "10.0.0.5", verdict: Allowed},
			},
		},
		{
			name:    "a ClusterIP one of whose backends denies the source is partly allowed",
			flow:    Flow{Src: pod("shop", "other"), Dst: ip("10.96.0.10"), Port: 80},
			verdict: PartlyAllowed,
			reason:  "1 of 2 backends allowed",
			paths: []decided{
				{dst: "10.0.1.5", source: "10.0.0.8", verdict: Denied, check: CheckIngress, node: "node2", pod: "shop/server", rule: 1},
				{dst: "10.0.0.7", source: "10.0.0.8", verdict: Allowed},
			},
		},
		{
			name:    "--backend traces only the backend given",
			flow:    Flow{Src: pod("shop", "other"), Dst: ip("10.96.0.10"), Port: 80, Backend: a("10.0.0.7")},
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.0.7", source: "10.0.0.8", verdict: Allowed}},
		},
		{
			name:    "a Service without endpoints rejects, as its frontend says",
			flow:    Flow{Src: pod("shop", "client"), Dst: ip("10.96.0.11"), Port: 80},
			verdict: Rejected,
			reason:  "node node1: ClusterIP shop/empty 10.96.0.11:80/TCP: no endpoints: reject",
		},
		{
			name:    "a Service's address on a port it does not serve is rejected",
			flow:    Flow{Src: pod("shop", "client"), Dst: ip("10.96.0.10"), Port: 81},
			verdict: Rejected,
			reason:  "no frontend on node node1 for 10.96.0.10 port 81/tcp",
		},
		{
			name:    "a Local ClusterIP without an endpoint on the source's node drops, though another node has one",
			flow:    Flow{Src: pod("shop", "client"), Dst: ip("10.96.0.12"), Port: 80},
			verdict: Dropped,
			reason:  "traffic policy Local and no endpoint on node node1 (1 elsewhere): drop",
		},
		{
			name:    "a Local ClusterIP with an endpoint on the source's node uses it",
			flow:    Flow{Src: pod("shop", "server"), Dst: ip("10.96.0.12"), Port: 80},
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.1.31", verdict: Allowed}},
		},
		{
			name:    "a pod reaches a LoadBalancer of traffic policy Local through the cluster's endpoints, as the node's own traffic",
			flow:    Flow{Src: pod("shop", "client"), Dst: ip("203.0.113.20"), Port: 80},
			states:  lbLocal,
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.0.5", verdict: Allowed}},
		},
		{
			name:    "a client outside the cluster entering a node without a local endpoint of a LoadBalancer of traffic policy Local is dropped",
			flow:    Flow{Src: ip("198.51.100.9"), Dst: ip("203.0.113.20"), Port: 80, EntryNode: "node1"},
			states:  lbLocal,
			verdict: Dropped,
			reason:  "node node1: LoadBalancer shop/lb 203.0.113.20:80/TCP: traffic policy Local and no endpoint on node node1: drop",
		},
		{
			name:    "a client outside the cluster entering the node of the local endpoint reaches it, and the server's rules deny it",
			flow:    Flow{Src: ip("198.51.100.9"), Dst: ip("203.0.113.20"), Port: 80, EntryNode: "node2"},
			states:  lbLocal,
			verdict: Denied,
			paths:   []decided{{dst: "10.0.1.5", source: "198.51.100.9", verdict: Denied, check: CheckIngress, node: "node2", pod: "shop/server", rule: 1}},
		},
		{
			name:    "the address of the destination's node is always allowed, even into a pod whose rules deny it",
			flow:    Flow{Src: ip("198.18.0.2"), Dst: pod("shop", "server"), Port: 9090},
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.1.5", source: "198.18.0.2", verdict: Allowed}},
		},
		{
			name:    "another node's address is judged by the pod's ingress rules",
			flow:    Flow{Src: ip("198.18.0.1"), Dst: pod("shop", "server"), Port: 9090},
			verdict: Denied,
			paths:   []decided{{dst: "10.0.1.5", source: "198.18.0.1", verdict: Denied, check: CheckIngress, node: "node2", pod: "shop/server", rule: 1}},
		},
		{
			name:    "a hostNetwork pod has no egress rules and arrives from its node's address",
			flow:    Flow{Src: pod("kube-system", "vcoild-x"), Dst: pod("shop", "server"), Port: 8080},
			verdict: Denied,
			paths:   []decided{{dst: "10.0.1.5", source: "198.18.0.1", verdict: Denied, check: CheckIngress, node: "node2", pod: "shop/server", rule: 1}},
		},
		{
			name:    "a pod reaching itself through a Service arrives from its node's NAT loopback, which is always allowed",
			flow:    Flow{Src: pod("shop", "server"), Dst: ip("10.96.0.10"), Port: 80, Backend: a("10.0.1.5")},
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.1.31", verdict: Allowed}},
		},
		{
			name:    "a pod reaching itself directly is allowed, though its ingress list denies the others",
			flow:    Flow{Src: pod("shop", "server"), Dst: pod("shop", "server"), Port: 9090},
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.1.5", source: "10.0.1.5", verdict: Allowed}},
		},
		{
			name:    "an egress-isolated pod reaching itself through a Service is allowed",
			flow:    Flow{Src: pod("shop", "blocked"), Dst: ip("10.96.0.10"), Port: 80, Backend: a("10.0.0.6")},
			states:  func(s map[string]*nodestate.State) { addBackend(s, "10.96.0.10", a("10.0.0.6"), "node1") },
			verdict: Allowed,
			paths:   []decided{{dst: "10.0.0.6", source: "10.0.0.31", verdict: Allowed}},
		},
		{
			name:    "an egress-isolated pod reaches its own node's address",
			flow:    Flow{Src: pod("shop", "blocked"), Dst: ip("198.18.0.1"), Port: 10250},
			verdict: Allowed,
			paths:   []decided{{dst: "198.18.0.1", source: "10.0.0.6", verdict: Allowed}},
		},
		{
			name:    "an egress-isolated pod is denied another node's address",
			flow:    Flow{Src: pod("shop", "blocked"), Dst: ip("198.18.0.2"), Port: 10250},
			verdict: Denied,
			paths:   []decided{{dst: "198.18.0.2", source: "10.0.0.6", verdict: Denied, check: CheckEgress, node: "node1", pod: "shop/blocked", rule: 1}},
		},
		{
			name:    "an external destination has no ingress check: a pod not isolated reaches it",
			flow:    Flow{Src: pod("shop", "client"), Dst: ip("203.0.113.10"), Port: 443},
			verdict: Allowed,
			paths:   []decided{{dst: "203.0.113.10", source: "10.0.0.5", verdict: Allowed}},
		},
		{
			name:    "an external destination is denied by the source's egress rules",
			flow:    Flow{Src: pod("shop", "blocked"), Dst: ip("203.0.113.10"), Port: 443},
			verdict: Denied,
			paths:   []decided{{dst: "203.0.113.10", source: "10.0.0.6", verdict: Denied, check: CheckEgress, node: "node1", pod: "shop/blocked", rule: 1}},
		},
		{
			name:    "an external destination on UDP 53 is permitted by the egress rule 0",
			flow:    Flow{Src: pod("shop", "blocked"), Dst: ip("203.0.113.10"), Port: 53, Protocol: "UDP"},
			verdict: Allowed,
			paths:   []decided{{dst: "203.0.113.10", source: "10.0.0.6", verdict: Allowed}},
		},
		{
			name:    "an external source has no egress check and is judged by the destination's ingress rules",
			flow:    Flow{Src: ip("203.0.113.9"), Dst: pod("shop", "server"), Port: 8080},
			verdict: Denied,
			paths:   []decided{{dst: "10.0.1.5", source: "203.0.113.9", verdict: Denied, check: CheckIngress, node: "node2", pod: "shop/server", rule: 1}},
		},
		{
			name:    "a destination node whose state could not be read leaves the verdict unknown",
			flow:    Flow{Src: pod("shop", "client"), Dst: pod("shop", "server"), Port: 8080},
			states:  func(s map[string]*nodestate.State) { delete(s, "node2") },
			verdict: Unknown,
			reason:  "the state of node node2 could not be read",
		},
		{
			name:    "a node without vcoil's policies lets everything through",
			flow:    Flow{Src: pod("shop", "other"), Dst: pod("shop", "server"), Port: 8080},
			states:  func(s map[string]*nodestate.State) { s["node2"].Policies = nil },
			verdict: Allowed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := fixture()
			if tt.states != nil {
				tt.states(st)
			}
			r, err := Trace(tt.flow, st, loc)
			if err != nil {
				t.Fatal(err)
			}
			if r.Verdict != tt.verdict {
				t.Fatalf("verdict %s (%s), want %s", r.Verdict, r.Reason, tt.verdict)
			}
			if !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", r.Reason, tt.reason)
			}
			if tt.paths == nil {
				return
			}
			var got []decided
			for _, p := range r.Paths {
				d := decided{dst: p.Dst.Addr.String(), source: p.Source.String(), verdict: p.Verdict}
				for _, s := range p.Steps {
					if s.Result == StepDeny {
						d.check, d.node, d.pod = s.Check, s.Node, s.Pod
						if s.RuleIndex != nil {
							d.rule = *s.RuleIndex
						}
						break
					}
				}
				got = append(got, d)
			}
			if !reflect.DeepEqual(got, tt.paths) {
				t.Errorf("paths\n got %+v\nwant %+v", got, tt.paths)
			}
		})
	}
}

func TestTraceRefusesWhatItCannotTrace(t *testing.T) {
	states, loc := fixture()
	for _, tt := range []struct {
		name string
		flow Flow
		want string
	}{
		{"an unknown protocol", Flow{Src: pod("shop", "client"), Dst: pod("shop", "server"), Port: 1, Protocol: "icmp"}, `protocol "icmp"`},
		{"a pod that does not exist", Flow{Src: pod("shop", "nobody"), Dst: pod("shop", "server"), Port: 1}, "pod shop/nobody not found"},
		{"a backend the Service does not have", Flow{Src: pod("shop", "client"), Dst: ip("10.96.0.10"), Port: 80, Backend: a("10.0.9.9")}, "backend 10.0.9.9 is not one of the backends of shop/web"},
		{"families that differ", Flow{Src: ip("2001:db8::1"), Dst: pod("shop", "server"), Port: 1}, "different families"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Trace(tt.flow, states, loc)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestRuleMatchesAndPrints(t *testing.T) {
	r := nodestate.Rule{Action: "permit", Protocol: "tcp", Src: p("10.0.0.0/24"), DstPorts: &nodestate.PortRange{First: 80, Last: 81}}
	if got, want := RuleString(r), "permit tcp src 10.0.0.0/24 dst any dport 80-81"; got != want {
		t.Errorf("RuleString = %q, want %q", got, want)
	}
	for _, tt := range []struct {
		name  string
		src   string
		proto string
		sport uint16
		dport uint16
		want  bool
	}{
		{"inside the source network and port range", "10.0.0.9", "tcp", 0, 81, true},
		{"outside the source network", "10.0.1.9", "tcp", 0, 80, false},
		{"another protocol", "10.0.0.9", "udp", 0, 80, false},
		{"a port past the range", "10.0.0.9", "tcp", 0, 82, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Matches(r, a(tt.src), a("10.0.1.5"), tt.proto, tt.sport, tt.dport); got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
	withSport := nodestate.Rule{Action: "deny", Protocol: "any", SrcPorts: &nodestate.PortRange{First: 1000, Last: 2000}}
	if Matches(withSport, a("10.0.0.1"), a("10.0.0.2"), "tcp", 0, 80) {
		t.Error("a rule naming source ports matched an unknown source port")
	}
	if !Matches(withSport, a("10.0.0.1"), a("10.0.0.2"), "tcp", 1500, 80) {
		t.Error("a rule naming source ports 1000-2000 did not match source port 1500")
	}
}

// TestTraceFollowsTheTiers: Admin rules decide first (Accept beats a
// NetworkPolicy's deny, Deny beats its permit), a Pass goes on to the
// NetworkPolicy list of an isolated pod or to the Baseline rules of one
// that is not, and the step names the tier, the policy and the rule.
func TestTraceFollowsTheTiers(t *testing.T) {
	tierRule := func(action, policy, name, src string) nodestate.TierRule {
		r := nodestate.TierRule{Rule: nodestate.Rule{Action: action, Protocol: "any"}, Policy: policy, RuleName: name}
		if src != "" {
			r.Src = p(src)
		}
		return r
	}
	server := func(states map[string]*nodestate.State) *nodestate.PodRules {
		return &states["node2"].Policies.Pods[0]
	}
	tests := []struct {
		name         string
		set          func(*nodestate.PodRules)
		src          string
		verdict      string
		tier, policy string
		why          string
	}{
		{
			name: "an Admin Accept beats the NetworkPolicy's deny",
			set: func(pr *nodestate.PodRules) {
				pr.AdminIngress = []nodestate.TierRule{tierRule("accept", "monitoring", "scrape", "10.0.0.8/32")}
			},
			src: "other", verdict: Allowed, tier: "admin", policy: "monitoring",
			why: "admin ingress rule 0 of pod shop/server on node node2 (ClusterNetworkPolicy monitoring rule scrape) accepts it",
		},
		{
			name: "an Admin Deny beats the NetworkPolicy's permit",
			set: func(pr *nodestate.PodRules) {
				pr.AdminIngress = []nodestate.TierRule{tierRule("deny", "quarantine", "0", "")}
			},
			src: "client", verdict: Denied, tier: "admin", policy: "quarantine",
		},
		{
			name: "an Admin Pass goes to the NetworkPolicies, which deny",
			set: func(pr *nodestate.PodRules) {
				pr.AdminIngress = []nodestate.TierRule{tierRule("pass", "delegate", "tenants", "10.0.0.0/24")}
			},
			src: "other", verdict: Denied, tier: "networkpolicy",
			why: "ingress rule 1 of pod shop/server on node node2 denies it after the Admin Pass of ClusterNetworkPolicy delegate rule tenants",
		},
		{
			name: "an Admin Pass to a pod no NetworkPolicy isolates goes to the Baseline, which denies",
			set: func(pr *nodestate.PodRules) {
				pr.Ingress = nil
				pr.AdminIngress = []nodestate.TierRule{tierRule("pass", "delegate", "tenants", "10.0.0.0/24")}
				pr.BaselineIngress = []nodestate.TierRule{tierRule("deny", "default-deny", "all", "")}
			},
			src: "client", verdict: Denied, tier: "baseline", policy: "default-deny",
		},
		{
			name: "no rule of any tier: allowed",
			set: func(pr *nodestate.PodRules) {
				pr.Ingress = nil
				pr.BaselineIngress = []nodestate.TierRule{tierRule("deny", "default-deny", "far", "192.168.0.0/16")}
			},
			src: "client", verdict: Allowed,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			states, loc := fixture()
			tc.set(server(states))
			res, err := Trace(Flow{Src: pod("shop", tc.src), Dst: pod("shop", "server"), Port: 8080, Protocol: "TCP"}, states, loc)
			if err != nil {
				t.Fatal(err)
			}
			if res.Verdict != tc.verdict {
				t.Fatalf("verdict %s (%s), want %s", res.Verdict, res.Reason, tc.verdict)
			}
			var step Step
			for _, s := range res.Paths[0].Steps {
				if s.Check == CheckIngress {
					step = s
				}
			}
			if step.Tier != tc.tier || step.Policy != tc.policy {
				t.Errorf("the ingress step's tier and policy: %q %q, want %q %q (%s)", step.Tier, step.Policy, tc.tier, tc.policy, step.Why)
			}
			if tc.why != "" && step.Why != tc.why {
				t.Errorf("why: %q\nwant %q", step.Why, tc.why)
			}
		})
	}
}
