package policy_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vcoil/vcoil/v2/internal/policyoracle"
)

// The examples of the Kubernetes documentation ("Network Policies" and its
// walkthroughs), each with connections whose verdict the documentation
// states. Both the Kubernetes evaluator and the tables built by the stack
// must give those verdicts.

const exampleNode = "node-a"

// exampleCluster builds a cluster from compact descriptions:
// namespaces "name k=v,k=v"; pods "ns/name node ip k=v,k=v [port=name/PROTO/number]".
func exampleCluster(t *testing.T, namespaces, pods []string, policies ...*networkingv1.NetworkPolicy) *policyoracle.Cluster {
	t.Helper()
	c := &policyoracle.Cluster{
		Node:          exampleNode,
		NodeAddresses: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
		NATLoopback:   []netip.Addr{netip.MustParseAddr("10.1.255.254")},
		Policies:      policies,
	}
	for _, s := range namespaces {
		f := strings.Fields(s)
		l := kv(t, f[1:]...)
		l["kubernetes.io/metadata.name"] = f[0]
		c.Namespaces = append(c.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f[0], Labels: l}})
	}
	for _, s := range pods {
		f := strings.Fields(s)
		ns, name, _ := strings.Cut(f[0], "/")
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       corev1.PodSpec{NodeName: f[1], Containers: []corev1.Container{{Name: "c"}}},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: f[2]}}},
		}
		var rest []string
		for _, x := range f[3:] {
			if port, ok := strings.CutPrefix(x, "port="); ok {
				parts := strings.Split(port, "/")
				var n int32
				fmt.Sscan(parts[2], &n)
				p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports,
					corev1.ContainerPort{Name: parts[0], Protocol: corev1.Protocol(parts[1]), ContainerPort: n})
				continue
			}
			rest = append(rest, x)
		}
		p.Labels = kv(t, rest...)
		c.Pods = append(c.Pods, p)
	}
	return c
}

func kv(t *testing.T, fields ...string) map[string]string {
	t.Helper()
	l := make(map[string]string)
	for _, f := range fields {
		for _, pair := range strings.Split(f, ",") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok {
				t.Fatalf("bad label %q", pair)
			}
			l[k] = v
		}
	}
	return l
}

func labelSelector(pairs string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	if pairs != "" {
		s.MatchLabels = make(map[string]string)
		for _, pair := range strings.Split(pairs, ",") {
			k, v, _ := strings.Cut(pair, "=")
			s.MatchLabels[k] = v
		}
	}
	return s
}

func policy(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func protocol(p corev1.Protocol) *corev1.Protocol { return &p }
func port(n int32) *intstr.IntOrString            { v := intstr.FromInt32(n); return &v }
func namedPortRef(s string) *intstr.IntOrString   { v := intstr.FromString(s); return &v }

var (
	ingressOnly = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egressOnly  = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	bothTypes   = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
)

// verdict is "src -> dst PROTO/port allow|deny"; src and dst are pods
// (namespace/name) or addresses.
type verdict string

func (v verdict) parse(t *testing.T, c *policyoracle.Cluster) (policyoracle.Connection, bool) {
	t.Helper()
	var src, dst, arrow, protoPort, want string
	if _, err := fmt.Sscan(string(v), &src, &arrow, &dst, &protoPort, &want); err != nil {
		t.Fatalf("bad verdict %q: %v", v, err)
	}
	addr := func(s string) netip.Addr {
		if a, err := netip.ParseAddr(s); err == nil {
			return a
		}
		for _, p := range c.Pods {
			if p.Namespace+"/"+p.Name == s {
				return netip.MustParseAddr(p.Status.PodIPs[0].IP)
			}
		}
		t.Fatalf("verdict %q: no pod %s", v, s)
		return netip.Addr{}
	}
	proto, portStr, _ := strings.Cut(protoPort, "/")
	var n uint16
	fmt.Sscan(portStr, &n)
	return policyoracle.Connection{Src: addr(src), Dst: addr(dst), Protocol: policyoracle.Protocol(proto), SrcPort: 40000, DstPort: n},
		want == "allow"
}

func TestExamplesOfTheKubernetesDocumentation(t *testing.T) {
	cases := []struct {
		name     string
		cluster  *policyoracle.Cluster
		verdicts []verdict
	}{
		{
			name: "the documentation's test-network-policy",
			cluster: exampleCluster(t,
				[]string{"default", "myproject project=myproject", "other"},
				[]string{
					"default/db node-a 10.1.0.1 role=db",
					"default/frontend node-a 10.1.0.2 role=frontend",
					"default/backend node-a 10.1.0.3 role=backend",
					"myproject/anything node-a 10.1.0.4 app=x",
					"other/frontend node-a 10.1.0.5 role=frontend",
					"default/remote-frontend node-b 10.1.1.2 role=frontend",
				},
				policy("default", "test-network-policy", networkingv1.NetworkPolicySpec{
					PodSelector: *labelSelector("role=db"),
					PolicyTypes: bothTypes,
					Ingress: []networkingv1.NetworkPolicyIngressRule{{
						From: []networkingv1.NetworkPolicyPeer{
							{IPBlock: &networkingv1.IPBlock{CIDR: "172.17.0.0/16", Except: []string{"172.17.1.0/24"}}},
							{NamespaceSelector: labelSelector("project=myproject")},
							{PodSelector: labelSelector("role=frontend")},
						},
						Ports: []networkingv1.NetworkPolicyPort{{Protocol: protocol(corev1.ProtocolTCP), Port: port(6379)}},
					}},
					Egress: []networkingv1.NetworkPolicyEgressRule{{
						To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}},
						Ports: []networkingv1.NetworkPolicyPort{{Protocol: protocol(corev1.ProtocolTCP), Port: port(5978)}},
					}},
				})),
			verdicts: []verdict{
				"default/frontend -> default/db TCP/6379 allow",
				"default/remote-frontend -> default/db TCP/6379 allow",
				"default/frontend -> default/db TCP/6380 deny",
				"default/frontend -> default/db UDP/6379 deny",
				"default/backend -> default/db TCP/6379 deny",
				"myproject/anything -> default/db TCP/6379 allow",
				"other/frontend -> default/db TCP/6379 deny",
				"172.17.0.5 -> default/db TCP/6379 allow",
				"172.17.2.200 -> default/db TCP/6379 allow",
				"172.17.1.5 -> default/db TCP/6379 deny",
				"172.18.0.5 -> default/db TCP/6379 deny",
				"default/db -> 10.0.0.7 TCP/5978 allow",
				"default/db -> 10.0.0.7 TCP/5979 deny",
				"default/db -> 10.0.1.7 TCP/5978 deny",
				"default/db -> default/frontend TCP/80 deny",
				"default/db -> default/remote-frontend TCP/80 deny",
				"default/frontend -> default/backend TCP/80 allow",
				"192.168.0.1 -> default/db TCP/1234 allow",
				"default/db -> 192.168.0.1 TCP/10250 allow",
				"10.1.255.254 -> default/db TCP/9999 allow",
			},
		},
		{
			name: "default deny all ingress traffic",
			cluster: exampleCluster(t, []string{"default"},
				[]string{"default/a node-a 10.1.0.1 app=a", "default/b node-a 10.1.0.2 app=b"},
				policy("default", "default-deny-ingress", networkingv1.NetworkPolicySpec{PolicyTypes: ingressOnly})),
			verdicts: []verdict{
				"default/a -> default/b TCP/80 deny",
				"8.8.8.8 -> default/a UDP/53 deny",
				"default/a -> 8.8.8.8 UDP/53 allow",
			},
		},
		{
			name: "allow all ingress traffic",
			cluster: exampleCluster(t, []string{"default"},
				[]string{"default/a node-a 10.1.0.1 app=a", "default/b node-a 10.1.0.2 app=b"},
				policy("default", "default-deny-ingress", networkingv1.NetworkPolicySpec{PolicyTypes: ingressOnly}),
				policy("default", "allow-all-ingress", networkingv1.NetworkPolicySpec{
					PolicyTypes: ingressOnly,
					Ingress:     []networkingv1.NetworkPolicyIngressRule{{}},
				})),
			verdicts: []verdict{
				"default/a -> default/b TCP/80 allow",
				"8.8.8.8 -> default/a SCTP/9 allow",
			},
		},
		{
			name: "default deny all egress traffic",
			cluster: exampleCluster(t, []string{"default"},
				[]string{"default/a node-a 10.1.0.1 app=a", "default/b node-b 10.1.1.2 app=b"},
				policy("default", "default-deny-egress", networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly})),
			verdicts: []verdict{
				"default/a -> default/b TCP/80 deny",
				"default/a -> 8.8.8.8 UDP/53 deny",
				"8.8.8.8 -> default/a TCP/80 allow",
				"default/a -> 192.168.0.1 TCP/10250 allow",
			},
		},
		{
			name: "allow all egress traffic",
			cluster: exampleCluster(t, []string{"default"},
				[]string{"default/a node-a 10.1.0.1 app=a"},
				policy("default", "default-deny-egress", networkingv1.NetworkPolicySpec{PolicyTypes: egressOnly}),
				policy("default", "allow-all-egress", networkingv1.NetworkPolicySpec{
					PolicyTypes: egressOnly,
					Egress:      []networkingv1.NetworkPolicyEgressRule{{}},
				})),
			verdicts: []verdict{
				"default/a -> 8.8.8.8 UDP/53 allow",
			},
		},
		{
			name: "default deny all ingress and all egress traffic",
			cluster: exampleCluster(t, []string{"default"},
				[]string{"default/a node-a 10.1.0.1 app=a", "default/b node-a 10.1.0.2 app=b"},
				policy("default", "default-deny-all", networkingv1.NetworkPolicySpec{PolicyTypes: bothTypes})),
			verdicts: []verdict{
				"default/a -> default/b TCP/80 deny",
				"default/a -> 8.8.8.8 ICMP/0 deny",
				"8.8.8.8 -> default/b ICMP/0 deny",
				"192.168.0.1 -> default/b TCP/8080 allow",
			},
		},
		{
			name: "namespaceSelector and podSelector in one peer select pods of those namespaces",
			cluster: exampleCluster(t, []string{"alice user=alice", "bob user=bob", "default"},
				[]string{
					"alice/client node-a 10.1.0.1 role=client", "alice/other node-a 10.1.0.2 role=other",
					"bob/client node-a 10.1.0.3 role=client", "default/client node-a 10.1.0.4 role=client",
					"default/target node-a 10.1.0.5 app=target",
				},
				policy("default", "and", networkingv1.NetworkPolicySpec{
					PodSelector: *labelSelector("app=target"),
					Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: labelSelector("user=alice"), PodSelector: labelSelector("role=client"),
					}}}},
				})),
			verdicts: []verdict{
				"alice/client -> default/target TCP/80 allow",
				"alice/other -> default/target TCP/80 deny",
				"bob/client -> default/target TCP/80 deny",
				"default/client -> default/target TCP/80 deny",
			},
		},
		{
			name: "namespaceSelector and podSelector in two peers select either",
			cluster: exampleCluster(t, []string{"alice user=alice", "bob user=bob", "default"},
				[]string{
					"alice/client node-a 10.1.0.1 role=client", "alice/other node-a 10.1.0.2 role=other",
					"bob/client node-a 10.1.0.3 role=client", "default/client node-a 10.1.0.4 role=client",
					"default/target node-a 10.1.0.5 app=target",
				},
				policy("default", "or", networkingv1.NetworkPolicySpec{
					PodSelector: *labelSelector("app=target"),
					Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
						{NamespaceSelector: labelSelector("user=alice")},
						{PodSelector: labelSelector("role=client")},
					}}},
				})),
			verdicts: []verdict{
				"alice/client -> default/target TCP/80 allow",
				"alice/other -> default/target TCP/80 allow",
				"bob/client -> default/target TCP/80 deny",
				"default/client -> default/target TCP/80 allow",
			},
		},
		{
			name: "targeting a range of ports",
			cluster: exampleCluster(t, []string{"default"},
				[]string{"default/db node-a 10.1.0.1 role=db"},
				policy("default", "multi-port-egress", networkingv1.NetworkPolicySpec{
					PodSelector: *labelSelector("role=db"),
					PolicyTypes: egressOnly,
					Egress: []networkingv1.NetworkPolicyEgressRule{{
						To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}},
						Ports: []networkingv1.NetworkPolicyPort{{
							Protocol: protocol(corev1.ProtocolTCP), Port: port(32000), EndPort: func() *int32 { v := int32(32768); return &v }(),
						}},
					}},
				})),
			verdicts: []verdict{
				"default/db -> 10.0.0.9 TCP/32000 allow",
				"default/db -> 10.0.0.9 TCP/32768 allow",
				"default/db -> 10.0.0.9 TCP/31999 deny",
				"default/db -> 10.0.0.9 TCP/32769 deny",
				"default/db -> 10.0.0.9 UDP/32000 deny",
			},
		},
		{
			name: "a named port is the destination pod's container port",
			cluster: exampleCluster(t, []string{"default"},
				[]string{
					"default/web node-a 10.1.0.1 app=web port=http/TCP/8080",
					"default/api node-b 10.1.1.1 app=api port=http/TCP/9000",
					"default/client node-a 10.1.0.2 app=client",
				},
				policy("default", "web-http", networkingv1.NetworkPolicySpec{
					PodSelector: *labelSelector("app=web"),
					Ingress: []networkingv1.NetworkPolicyIngressRule{{
						Ports: []networkingv1.NetworkPolicyPort{{Port: namedPortRef("http")}},
					}},
				}),
				policy("default", "client-to-http", networkingv1.NetworkPolicySpec{
					PodSelector: *labelSelector("app=client"),
					PolicyTypes: egressOnly,
					Egress: []networkingv1.NetworkPolicyEgressRule{{
						Ports: []networkingv1.NetworkPolicyPort{{Port: namedPortRef("http")}},
					}},
				})),
			verdicts: []verdict{
				"default/client -> default/web TCP/8080 allow",
				"default/client -> default/web TCP/9000 deny",
				"default/client -> default/api TCP/9000 allow",
				"default/client -> default/api TCP/8080 deny",
				"default/client -> 8.8.8.8 TCP/8080 deny",
				"8.8.8.8 -> default/web TCP/8080 allow",
				"8.8.8.8 -> default/web TCP/80 deny",
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := policyoracle.NewKubernetes(tc.cluster)
			p, err := newPipeline(tc.cluster)
			if err != nil {
				t.Fatal(err)
			}
			rs := p.renderers()
			var both []*policyoracle.Tables
			for _, r := range rs {
				both = append(both, oracleTables(r.cache))
			}
			for _, v := range tc.verdicts {
				conn, want := v.parse(t, tc.cluster)
				if got := k.Allowed(conn); got != want {
					t.Errorf("%s: the Kubernetes evaluator says allowed=%v", v, got)
				}
				wantNode, responsible := k.NodeVerdict(conn)
				if !responsible {
					t.Fatalf("%s: no end is a local pod; the example is not about this node", v)
				}
				for i, s := range both {
					if got, seen := s.Allowed(conn); !seen || got != wantNode {
						t.Errorf("%s: the tables on %s (%T) say allowed=%v (seen=%v), want %v\n%s", v, s.Direction, rs[i].cache, got, seen, wantNode, describe(rs[i].cache, conn))
					}
				}
			}
		})
	}
}
