package processor_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

type recordingConfigurator struct{ txns []configurator.Txn }

func (r *recordingConfigurator) Configure(_ context.Context, txn configurator.Txn) error {
	r.txns = append(r.txns, txn)
	return nil
}

// summary prints a transaction's pods: "ns/name" or "ns/name(removed)".
func summary(txn configurator.Txn) string {
	var out []string
	for _, p := range txn.Pods {
		s := p.ID.String()
		if p.Removed {
			s += "(removed)"
		}
		out = append(out, s)
	}
	return strings.Join(out, " ")
}

func pod(ns, name, node, ip string, l map[string]string, ports ...corev1.ContainerPort) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Ports: ports}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	return p
}

func namespace(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func selector(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func portName(n string) *intstr.IntOrString  { v := intstr.FromString(n); return &v }
func portNumber(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }

var tcp = corev1.ProtocolTCP

// webIngress admits app=client on TCP 9090 and on the named port http.
func webIngress() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web-ingress"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *selector("app", "web"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "client")}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: portNumber(9090)}, {Port: portName("http")}},
			}},
		},
	}
}

func fixture(t *testing.T) (*pcache.Cache, *recordingConfigurator) {
	t.Helper()
	c := pcache.New()
	r := &recordingConfigurator{}
	c.Watch(processor.New("node-a", c, r, logr.Discard()))
	err := c.Replace(context.Background(),
		[]*corev1.Pod{
			pod("prod", "web", "node-a", "10.0.0.1", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
			pod("prod", "client", "node-a", "10.0.0.2", map[string]string{"app": "client"}),
			pod("prod", "remote", "node-b", "10.0.0.3", map[string]string{"app": "client"}),
			pod("dev", "tool", "node-a", "10.0.0.4", map[string]string{"app": "tool"}),
			pod("prod", "pending", "node-a", "", map[string]string{"app": "web"}),
		},
		[]*corev1.Namespace{namespace("prod", map[string]string{"team": "a"}), namespace("dev", map[string]string{"team": "b"})},
		[]*networkingv1.NetworkPolicy{webIngress()},
	)
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func TestResyncConfiguresEveryLocalPodWithAnAddress(t *testing.T) {
	_, r := fixture(t)
	if len(r.txns) != 1 || !r.txns[0].Resync {
		t.Fatalf("want one resync transaction, got %+v", r.txns)
	}
	if got, want := summary(r.txns[0]), "dev/tool prod/client prod/web"; got != want {
		t.Fatalf("resync configured %q, want %q (no pending pod, no remote pod)", got, want)
	}
	web := r.txns[0].Pods[2]
	if len(web.Policies) != 1 {
		t.Fatalf("web has %d policies, want 1", len(web.Policies))
	}
	p := web.Policies[0]
	if !p.IsolatesIngress || p.IsolatesEgress || len(p.Ingress) != 1 {
		t.Fatalf("web-ingress is modelled as %+v", p)
	}
	m := p.Ingress[0]
	var peers []netip.Addr
	for _, pp := range m.Pods {
		peers = append(peers, pp.IPs...)
	}
	if !slices.Equal(peers, addrs("10.0.0.2", "10.0.0.3")) {
		t.Fatalf("the peers are %v, want the local and the remote client", peers)
	}
	wantPorts := []configurator.Port{
		{Protocol: renderer.ProtocolTCP, Ports: renderer.SinglePort(9090)},
		{Protocol: renderer.ProtocolTCP, Ports: renderer.SinglePort(8080)},
	}
	if !slices.Equal(m.Ports, wantPorts) {
		t.Fatalf("the ports are %v, want TCP 9090 and the named port resolved to TCP 8080", m.Ports)
	}
}

func TestEachChangeReconfiguresThePodsItMayAffect(t *testing.T) {
	c, r := fixture(t)
	ctx := context.Background()
	allowFromTeamA := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "dev", Name: "from-team-a"},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: selector("team", "a")}},
		}}},
	}
	steps := []struct {
		name   string
		change func() error
		want   string // pods of the transaction; empty: no transaction
	}{
		{"a peer's labels change: the pods whose policy referenced it",
			func() error {
				return c.SetPod(ctx, pod("prod", "remote", "node-b", "10.0.0.3", map[string]string{"app": "other"}))
			}, "prod/web"},
		{"a pending pod gets an address: the pod itself",
			func() error {
				return c.SetPod(ctx, pod("prod", "pending", "node-a", "10.0.0.5", map[string]string{"app": "web"}))
			}, "prod/pending"},
		{"a namespace no selector refers to changes: nothing",
			func() error { return c.SetNamespace(ctx, namespace("dev", map[string]string{"team": "z"})) }, ""},
		{"a policy is added: the pods it selects",
			func() error { return c.SetPolicy(ctx, allowFromTeamA) }, "dev/tool"},
		{"a namespace a selector referred to changes: the pods of those policies",
			func() error { return c.SetNamespace(ctx, namespace("prod", map[string]string{"team": "c"})) }, "dev/tool"},
		{"a pod's status changes in a way policies ignore: nothing",
			func() error {
				p := pod("prod", "web", "node-a", "10.0.0.1", map[string]string{"app": "web"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080})
				p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
				return c.SetPod(ctx, p)
			}, ""},
		{"a policy's metadata changes: nothing",
			func() error {
				p := webIngress()
				p.Annotations = map[string]string{"note": "x"}
				return c.SetPolicy(ctx, p)
			}, ""},
		{"a local peer is deleted: the pod itself is removed and its dependents reconfigured",
			func() error { return c.DeletePod(ctx, "prod", "client") }, "prod/client(removed) prod/pending prod/web"},
		{"a policy is deleted: the pods it selected",
			func() error { return c.DeletePolicy(ctx, "prod", "web-ingress") }, "prod/pending prod/web"},
		{"a remote pod is deleted that nothing refers to: nothing",
			func() error { return c.DeletePod(ctx, "prod", "remote") }, ""},
		{"a local pod terminates: it is removed",
			func() error {
				p := pod("dev", "tool", "node-a", "10.0.0.4", map[string]string{"app": "tool"})
				p.Status.Phase = corev1.PodSucceeded
				return c.SetPod(ctx, p)
			}, "dev/tool(removed)"},
	}
	for _, s := range steps {
		before := len(r.txns)
		if err := s.change(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var got string
		switch len(r.txns) - before {
		case 0:
		case 1:
			got = summary(r.txns[before])
		default:
			t.Fatalf("%s: %d transactions for one change", s.name, len(r.txns)-before)
		}
		if got != s.want {
			t.Fatalf("%s: configured %q, want %q", s.name, got, s.want)
		}
	}
}

func TestNamedPortsAreResolvedOnTheDestinationPod(t *testing.T) {
	c := pcache.New()
	r := &recordingConfigurator{}
	c.Watch(processor.New("node-a", c, r, logr.Discard()))
	udp := corev1.ProtocolUDP
	egress := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "to-http"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *selector("app", "client"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				// The client defines no port "metrics": this rule permits nothing.
				Ports: []networkingv1.NetworkPolicyPort{{Port: portName("metrics")}},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{Ports: []networkingv1.NetworkPolicyPort{{Port: portName("http")}}},
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.3/32"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: portName("dns")}}},
			},
		},
	}
	err := c.Replace(context.Background(),
		[]*corev1.Pod{
			pod("ns", "client", "node-a", "10.0.0.1", map[string]string{"app": "client"}),
			pod("ns", "web-a", "node-b", "10.0.0.2", nil, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
			pod("other", "web-b", "node-b", "10.0.0.3", nil,
				corev1.ContainerPort{Name: "http", ContainerPort: 80},
				corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: udp}),
			pod("other", "dns", "node-b", "10.0.0.4", nil, corev1.ContainerPort{Name: "dns", ContainerPort: 5353, Protocol: udp}),
			pod("other", "tcp-dns", "node-b", "10.0.0.5", nil, corev1.ContainerPort{Name: "dns", ContainerPort: 53}),
		},
		[]*corev1.Namespace{namespace("ns", nil), namespace("other", nil)},
		[]*networkingv1.NetworkPolicy{egress},
	)
	if err != nil {
		t.Fatal(err)
	}
	client := r.txns[0].Pods[0]
	if client.ID.Name != "client" || len(client.Policies) != 1 {
		t.Fatalf("the client is configured as %+v", client)
	}
	p := client.Policies[0]
	if !p.IsolatesIngress || len(p.Ingress) != 0 {
		t.Fatalf("an ingress rule whose only port does not resolve must permit nothing, got %+v", p.Ingress)
	}
	var got []string
	for _, m := range p.Egress {
		if m.AllPeers || len(m.Blocks) > 0 || len(m.Pods) != 1 {
			t.Fatalf("a named-port match is not per destination pod: %+v", m)
		}
		got = append(got, fmt.Sprintf("%s %v %d/%d", m.Pods[0].ID, m.Pods[0].IPs, m.Ports[0].Protocol, m.Ports[0].Ports.First))
	}
	want := []string{
		"ns/web-a [10.0.0.2] 1/8080",
		"other/web-b [10.0.0.3] 1/80",
		"other/dns [10.0.0.4] 2/5353",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("egress matches:\n%q\nwant\n%q\n(web-b's dns is excepted, tcp-dns has the name on another protocol)", got, want)
	}
}

// TestAPodsAllowedSourcePrefixesReachTheRenderers: the prefixes a pod may
// send from besides its address (its annotation) are part of its
// configuration, so that a renderer checking sources lets them pass.
func TestAPodsAllowedSourcePrefixesReachTheRenderers(t *testing.T) {
	c := pcache.New()
	r := &recordingConfigurator{}
	c.Watch(processor.New("node-a", c, r, logr.Discard()))
	router := pod("prod", "router", "node-a", "10.0.0.9", nil)
	router.Annotations = map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: "198.51.100.0/24, 2001:db8:5::/48,not-a-prefix"}
	if err := c.Replace(t.Context(), []*corev1.Pod{router}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if len(r.txns) != 1 || len(r.txns[0].Pods) != 1 {
		t.Fatalf("want one transaction with the router, got %+v", r.txns)
	}
	want := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:5::/48")}
	if got := r.txns[0].Pods[0].SourcePrefixes; !slices.Equal(got, want) {
		t.Fatalf("the router's source prefixes are %v, want %v", got, want)
	}
}
