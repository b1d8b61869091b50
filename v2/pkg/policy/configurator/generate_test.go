package configurator

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

func peerPod(name string, ips ...string) PeerPod {
	p := PeerPod{ID: renderer.PodID{Namespace: "ns", Name: name}}
	for _, ip := range ips {
		p.IPs = append(p.IPs, netip.MustParseAddr(ip))
	}
	return p
}

func tcp(first, last uint16) Port {
	return Port{Protocol: renderer.ProtocolTCP, Ports: renderer.PortRange{First: first, Last: last}}
}

// from is a Permit rule on traffic towards the pod from peer.
func from(peer string, proto renderer.Protocol, ports renderer.PortRange) renderer.Rule {
	r := renderer.Rule{Action: renderer.ActionPermit, Protocol: proto, SrcPort: renderer.AnyPort, DstPort: ports}
	if peer != "" {
		r.SrcNetwork = netip.MustParsePrefix(peer)
	}
	return r
}

// to is a Permit rule on traffic from the pod to peer.
func to(peer string, proto renderer.Protocol, ports renderer.PortRange) renderer.Rule {
	r := from("", proto, ports)
	if peer != "" {
		r.DstNetwork = netip.MustParsePrefix(peer)
	}
	return r
}

var (
	anyPort = renderer.AnyPort
	p80     = renderer.SinglePort(80)
)

func TestGenerateRules(t *testing.T) {
	loopback := []netip.Addr{netip.MustParseAddr("10.0.0.254")}
	cases := []struct {
		name     string
		dir      renderer.Direction
		policies []*Policy
		always   []netip.Addr
		want     []renderer.Rule
	}{
		{
			name: "a pod without policies is open",
			dir:  renderer.Ingress,
			want: nil,
		},
		{
			name:     "a policy of the other direction leaves the pod open",
			dir:      renderer.Ingress,
			policies: []*Policy{{IsolatesEgress: true}},
			want:     nil,
		},
		{
			name:     "a policy that isolates and permits nothing denies all but the always permitted peers",
			dir:      renderer.Ingress,
			policies: []*Policy{{IsolatesIngress: true}},
			always:   loopback,
			want:     []renderer.Rule{from("10.0.0.254/32", renderer.ProtocolAny, anyPort), renderer.DenyAll},
		},
		{
			name:     "a match of all peers and all ports permits all",
			dir:      renderer.Ingress,
			policies: []*Policy{{IsolatesIngress: true, Ingress: []Match{{AllPeers: true}}}},
			always:   loopback,
			want:     []renderer.Rule{renderer.PermitAll},
		},
		{
			name:     "a match of all peers on a port names no peer",
			dir:      renderer.Ingress,
			policies: []*Policy{{IsolatesIngress: true, Ingress: []Match{{AllPeers: true, Ports: []Port{tcp(80, 80)}}}}},
			want:     []renderer.Rule{from("", renderer.ProtocolTCP, p80), renderer.DenyAll},
		},
		{
			name: "pods and ports multiply, sorted, peers as sources",
			dir:  renderer.Ingress,
			policies: []*Policy{{IsolatesIngress: true, Ingress: []Match{{
				Pods:  []PeerPod{peerPod("b", "10.0.0.2", "fd00::2"), peerPod("a", "10.0.0.1")},
				Ports: []Port{tcp(80, 80), {Protocol: renderer.ProtocolUDP, Ports: renderer.SinglePort(53)}},
			}}}},
			want: []renderer.Rule{
				from("10.0.0.1/32", renderer.ProtocolTCP, p80), from("10.0.0.1/32", renderer.ProtocolUDP, renderer.SinglePort(53)),
				from("10.0.0.2/32", renderer.ProtocolTCP, p80), from("10.0.0.2/32", renderer.ProtocolUDP, renderer.SinglePort(53)),
				from("fd00::2/128", renderer.ProtocolTCP, p80), from("fd00::2/128", renderer.ProtocolUDP, renderer.SinglePort(53)),
				renderer.DenyAll,
			},
		},
		{
			name: "egress puts the peer in the destination",
			dir:  renderer.Egress,
			policies: []*Policy{{IsolatesEgress: true, Egress: []Match{{
				Pods: []PeerPod{peerPod("a", "10.0.0.1")},
			}}}},
			always: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
			want: []renderer.Rule{
				to("10.0.0.1/32", renderer.ProtocolAny, anyPort), to("192.168.0.1/32", renderer.ProtocolAny, anyPort), renderer.DenyAll,
			},
		},
		{
			name: "an ipBlock's excepts are subtracted",
			dir:  renderer.Ingress,
			policies: []*Policy{{IsolatesIngress: true, Ingress: []Match{{
				Blocks: []IPBlock{{Network: netip.MustParsePrefix("10.1.0.0/30"), Except: prefixes("10.1.0.1/32")}},
				Ports:  []Port{tcp(80, 80)},
			}}}},
			want: []renderer.Rule{
				from("10.1.0.0/32", renderer.ProtocolTCP, p80), from("10.1.0.2/31", renderer.ProtocolTCP, p80), renderer.DenyAll,
			},
		},
		{
			name: "an endPort range stays one rule",
			dir:  renderer.Egress,
			policies: []*Policy{{IsolatesEgress: true, Egress: []Match{{
				Blocks: []IPBlock{{Network: netip.MustParsePrefix("10.0.0.0/24")}},
				Ports:  []Port{tcp(32000, 32768)},
			}}}},
			want: []renderer.Rule{to("10.0.0.0/24", renderer.ProtocolTCP, renderer.PortRange{First: 32000, Last: 32768}), renderer.DenyAll},
		},
		{
			name: "policies are additive and duplicates collapse",
			dir:  renderer.Ingress,
			policies: []*Policy{
				{IsolatesIngress: true, Ingress: []Match{{Pods: []PeerPod{peerPod("a", "10.0.0.1")}, Ports: []Port{tcp(80, 80)}}}},
				{IsolatesIngress: true, Ingress: []Match{{Pods: []PeerPod{peerPod("a", "10.0.0.1"), peerPod("c", "10.0.0.3")}, Ports: []Port{tcp(80, 80)}}}},
			},
			want: []renderer.Rule{
				from("10.0.0.1/32", renderer.ProtocolTCP, p80), from("10.0.0.3/32", renderer.ProtocolTCP, p80), renderer.DenyAll,
			},
		},
		{
			name: "one policy permitting all overrides the rest",
			dir:  renderer.Egress,
			policies: []*Policy{
				{IsolatesEgress: true, Egress: []Match{{Pods: []PeerPod{peerPod("a", "10.0.0.1")}}}},
				{IsolatesEgress: true, Egress: []Match{{AllPeers: true}}},
			},
			want: []renderer.Rule{renderer.PermitAll},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := GenerateRules(tc.dir, tc.policies, tc.always)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("GenerateRules =\n%v\nwant\n%v", got, tc.want)
			}
			if err := renderer.ValidateRuleList(tc.dir, got); err != nil {
				t.Fatalf("the rules are not a valid %s list: %v", tc.dir, err)
			}
		})
	}
}

func TestGenerateRulesDoesNotReuseRulesOfACopiedPolicyWithOtherMatches(t *testing.T) {
	p := &Policy{IsolatesIngress: true, Ingress: []Match{{Pods: []PeerPod{peerPod("a", "10.0.0.1")}}}}
	first := GenerateRules(renderer.Ingress, []*Policy{p}, nil)
	q := *p
	q.Ingress = []Match{{Pods: []PeerPod{peerPod("b", "10.0.0.2")}}}
	second := GenerateRules(renderer.Ingress, []*Policy{&q}, nil)
	if slices.Equal(first, second) {
		t.Fatalf("the copy got the original's rules: %v", second)
	}
	if want := from("10.0.0.2/32", renderer.ProtocolAny, anyPort); second[0] != want {
		t.Fatalf("the copy's first rule is %v, want %v", second[0], want)
	}
}

type recordingRenderer struct {
	txns []renderer.Txn
	err  error
}

func (r *recordingRenderer) Render(_ context.Context, txn renderer.Txn) error {
	r.txns = append(r.txns, txn)
	return r.err
}

func TestConfigureSendsOneTransactionWithEveryPodToEveryRenderer(t *testing.T) {
	c, err := New(Config{
		NATLoopback:   []netip.Addr{netip.MustParseAddr("10.0.0.254")},
		NodeAddresses: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, b := &recordingRenderer{}, &recordingRenderer{}
	c.Register("a", a)
	c.Register("b", b)
	isolated := &Policy{ID: PolicyID{"ns", "z-both"}, IsolatesIngress: true, IsolatesEgress: true}
	inOnly := &Policy{ID: PolicyID{"ns", "a-in"}, IsolatesIngress: true}
	txn := Txn{Pods: []Pod{
		{ID: renderer.PodID{Namespace: "ns", Name: "web"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Policies: []*Policy{isolated, inOnly}},
		{ID: renderer.PodID{Namespace: "ns", Name: "open"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.2")}},
		{ID: renderer.PodID{Namespace: "ns", Name: "gone"}, Removed: true},
	}}
	if err := c.Configure(context.Background(), txn); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*recordingRenderer{a, b} {
		if len(r.txns) != 1 || len(r.txns[0].Pods) != 3 {
			t.Fatalf("a renderer got %d transactions, want one with 3 pods: %+v", len(r.txns), r.txns)
		}
		web, open, gone := r.txns[0].Pods[0], r.txns[0].Pods[1], r.txns[0].Pods[2]
		wantIngress := []renderer.Rule{from("10.0.0.254/32", renderer.ProtocolAny, anyPort), from("192.168.0.1/32", renderer.ProtocolAny, anyPort), renderer.DenyAll}
		wantEgress := []renderer.Rule{to("192.168.0.1/32", renderer.ProtocolAny, anyPort), renderer.DenyAll}
		if !slices.Equal(web.Ingress, wantIngress) || !slices.Equal(web.Egress, wantEgress) {
			t.Fatalf("an isolated pod got ingress %v, egress %v; want %v, %v", web.Ingress, web.Egress, wantIngress, wantEgress)
		}
		if want := [2][]string{{"ns/a-in", "ns/z-both"}, {"ns/z-both"}}; !slices.Equal(web.NetworkPolicies[0], want[0]) || !slices.Equal(web.NetworkPolicies[1], want[1]) {
			t.Fatalf("an isolated pod's NetworkPolicies %v, want %v by direction, sorted", web.NetworkPolicies, want)
		}
		if open.Egress != nil || open.Ingress != nil || open.NetworkPolicies[0] != nil || open.NetworkPolicies[1] != nil {
			t.Fatalf("a pod without policies got rules: %+v", open)
		}
		if !gone.Removed {
			t.Fatalf("a removed pod is not marked removed: %+v", gone)
		}
	}
}

func TestConfigureSendsTheSameSlicesWhenAPodsRulesDidNotChange(t *testing.T) {
	c, _ := New(Config{})
	r := &recordingRenderer{}
	c.Register("r", r)
	pod := func(peer string) Pod {
		return Pod{
			ID:  renderer.PodID{Namespace: "ns", Name: "web"},
			IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")},
			Policies: []*Policy{{IsolatesIngress: true, Ingress: []Match{{
				Pods: []PeerPod{peerPod("client", peer)},
			}}}},
		}
	}
	for _, p := range []Pod{pod("10.0.0.2"), pod("10.0.0.2"), pod("10.0.0.3")} {
		if err := c.Configure(context.Background(), Txn{Pods: []Pod{p}}); err != nil {
			t.Fatal(err)
		}
	}
	first, same, other := r.txns[0].Pods[0].Ingress, r.txns[1].Pods[0].Ingress, r.txns[2].Pods[0].Ingress
	if &first[0] != &same[0] {
		t.Fatalf("equal rules were sent as a new slice")
	}
	if slices.Equal(first, other) || &first[0] == &other[0] {
		t.Fatalf("changed rules were not sent: %v", other)
	}
}

func TestConfigureNamesTheRenderersThatFailed(t *testing.T) {
	c, _ := New(Config{})
	c.Register("acl", &recordingRenderer{err: errors.New("VPP is gone")})
	c.Register("nftables", &recordingRenderer{})
	err := c.Configure(context.Background(), Txn{Pods: []Pod{{ID: renderer.PodID{Namespace: "ns", Name: "a"}, IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}}})
	if err == nil || !strings.Contains(err.Error(), "renderer acl: VPP is gone") || strings.Contains(err.Error(), "nftables") {
		t.Fatalf("Configure = %v, want the acl renderer's error only", err)
	}
}

func TestConfigureRejectsAPodWithoutAddress(t *testing.T) {
	c, _ := New(Config{})
	r := &recordingRenderer{}
	c.Register("r", r)
	err := c.Configure(context.Background(), Txn{Pods: []Pod{{ID: renderer.PodID{Namespace: "ns", Name: "pending"}}}})
	if err == nil || !strings.Contains(err.Error(), "ns/pending") {
		t.Fatalf("Configure = %v, want an error naming the pod", err)
	}
	if len(r.txns) != 0 {
		t.Fatalf("a renderer got a transaction that was rejected")
	}
}

func TestNewRejectsBadConfiguration(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"two IPv4 NAT loopbacks", Config{NATLoopback: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")}}},
		{"an invalid NAT loopback", Config{NATLoopback: []netip.Addr{{}}}},
		{"an invalid node address", Config{NodeAddresses: []netip.Addr{{}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Fatalf("New accepted %+v", tc.cfg)
			}
		})
	}
}
