package policyoracle

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// The oracle's own label selector matching must agree with apimachinery's,
// which the processor uses: otherwise the property test would compare two
// readings of selectors instead of checking the stack.
func TestSelectorMatchingAgreesWithApimachinery(t *testing.T) {
	g := NewGenerator(rand.New(rand.NewPCG(7, 8)))
	for range 5000 {
		s := g.selector()
		l := g.labels()
		want, err := metav1.LabelSelectorAsSelector(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := selectorMatches(s, l); got != want.Matches(labels.Set(l)) {
			t.Fatalf("selector %v on labels %v: the oracle says %v, apimachinery %v", s, l, got, !got)
		}
	}
}

func TestTablesDecideAConnectionWhereTheirDirectionSaysItIsFiltered(t *testing.T) {
	pod, peer, outside := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("8.8.8.8")
	denyFrom := func(src, dst netip.Addr) renderer.Rule {
		r := renderer.DenyAll
		if src.IsValid() {
			r.SrcNetwork = renderer.HostNetwork(src)
		}
		if dst.IsValid() {
			r.DstNetwork = renderer.HostNetwork(dst)
		}
		return r
	}
	cases := []struct {
		name    string
		tables  Tables
		conn    Connection
		allowed bool
		decided bool
	}{
		{"tables on ingress: into a local pod, its local table decides",
			Tables{Direction: renderer.Ingress, Local: map[netip.Addr][]renderer.Rule{pod: {denyFrom(outside, netip.Addr{}), renderer.PermitAll}}},
			Connection{Src: outside, Dst: pod, Protocol: TCP, DstPort: 80}, false, true},
		{"tables on ingress: out of a local pod to elsewhere, the global table decides",
			Tables{Direction: renderer.Ingress, Local: map[netip.Addr][]renderer.Rule{pod: {renderer.DenyAll}}, Global: []renderer.Rule{denyFrom(pod, outside), renderer.PermitAll}},
			Connection{Src: pod, Dst: outside, Protocol: UDP, DstPort: 53}, false, true},
		{"tables on ingress: the source's own local table does not filter what it sends",
			Tables{Direction: renderer.Ingress, Local: map[netip.Addr][]renderer.Rule{pod: {renderer.DenyAll}, peer: nil}},
			Connection{Src: pod, Dst: peer, Protocol: TCP, DstPort: 80}, true, true},
		{"tables on egress: out of a local pod, its local table decides",
			Tables{Direction: renderer.Egress, Local: map[netip.Addr][]renderer.Rule{pod: {denyFrom(netip.Addr{}, outside), renderer.PermitAll}}},
			Connection{Src: pod, Dst: outside, Protocol: ICMP}, false, true},
		{"tables on egress: into a local pod from elsewhere, the global table decides",
			Tables{Direction: renderer.Egress, Local: map[netip.Addr][]renderer.Rule{pod: nil}, Global: []renderer.Rule{denyFrom(outside, pod), renderer.PermitAll}},
			Connection{Src: outside, Dst: pod, Protocol: SCTP, DstPort: 9}, false, true},
		{"a connection between two other hosts is not this node's",
			Tables{Direction: renderer.Ingress, Local: map[netip.Addr][]renderer.Rule{pod: {renderer.DenyAll}}},
			Connection{Src: outside, Dst: peer, Protocol: TCP, DstPort: 80}, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			allowed, decided := tc.tables.Allowed(tc.conn)
			if allowed != tc.allowed || decided != tc.decided {
				t.Fatalf("Allowed = %v, %v; want %v, %v", allowed, decided, tc.allowed, tc.decided)
			}
		})
	}
}

func TestFirstMatchHonoursProtocolAndPorts(t *testing.T) {
	permit80 := renderer.Rule{Action: renderer.ActionPermit, Protocol: renderer.ProtocolTCP, SrcPort: renderer.AnyPort, DstPort: renderer.PortRange{First: 80, Last: 90}}
	table := []renderer.Rule{permit80, renderer.DenyAll}
	cases := []struct {
		conn Connection
		want bool
	}{
		{Connection{Protocol: TCP, DstPort: 80}, true},
		{Connection{Protocol: TCP, DstPort: 90}, true},
		{Connection{Protocol: TCP, DstPort: 91}, false},
		{Connection{Protocol: UDP, DstPort: 80}, false},
		{Connection{Protocol: ICMP}, false},
	}
	for _, tc := range cases {
		if got := firstMatch(table, tc.conn); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.conn, got, tc.want)
		}
	}
}
