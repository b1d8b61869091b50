package processor_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/podendpoint"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// The pods of other nodes reach the cache as their PodEndpoints
// (SetEndpoint), not as Pods. Policies must see them exactly as they
// would see the pods themselves: the same transactions, at the first sync
// and after each change, whether the peers are given to the cache as Pods
// or as the endpoints their nodes publish (podendpoint.For; a pod with no
// endpoint is absent). The policies read every field of a peer: labels
// (pod and namespace selectors, of NetworkPolicies and
// ClusterNetworkPolicies), addresses (ipBlocks with named ports), named
// ports (egress to named ports).
func TestAPeerReadsTheSameAsItsPodOrItsEndpoint(t *testing.T) {
	const here = "node-a"
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			gen := &peerGen{rng: rng}
			namespaces := []*corev1.Namespace{namespace("ns0", map[string]string{"team": "a"}), namespace("ns1", map[string]string{"team": "b"})}
			var locals, peers []*corev1.Pod
			for i := range 6 {
				p := gen.pod(fmt.Sprint("ns", i%2), fmt.Sprint("local", i), here)
				p.Spec.HostNetwork, p.Status.Phase = false, corev1.PodRunning
				p.Status.PodIPs = []corev1.PodIP{{IP: fmt.Sprintf("10.0.0.%d", i+1)}}
				locals = append(locals, p)
			}
			for i := range 40 {
				peers = append(peers, gen.pod(fmt.Sprint("ns", i%2), fmt.Sprint("peer", i), gen.pick("node-b", "node-c")))
			}
			asPods, asEndpoints := newPeerStack(here), newPeerStack(here)
			must(t, asPods.cache.ReplaceAll(context.Background(), pcache.Contents{
				Pods: append(append([]*corev1.Pod(nil), locals...), peers...), Namespaces: namespaces,
				Policies: peerPolicies(), ClusterPolicies: peerClusterPolicies(),
			}))
			var endpoints []*vcoilv2.PodEndpoint
			for _, p := range peers {
				if ep := podendpoint.For(p); ep != nil {
					endpoints = append(endpoints, ep)
				}
			}
			must(t, asEndpoints.cache.ReplaceAll(context.Background(), pcache.Contents{
				Pods: locals, Endpoints: endpoints, Namespaces: namespaces,
				Policies: peerPolicies(), ClusterPolicies: peerClusterPolicies(),
			}))
			sameTxns(t, "the first sync", asPods, asEndpoints)
			if seen := peersIn(asPods.r.txns); seen < 5 {
				t.Fatalf("the policies reference %d peers: too few to tell anything", seen)
			}

			// Peers change (any field, or gone) one at a time.
			ctx := context.Background()
			for step := range 60 {
				old := peers[rng.IntN(len(peers))]
				if rng.IntN(6) == 0 {
					must(t, asPods.cache.DeletePod(ctx, old.Namespace, old.Name))
					must(t, asEndpoints.cache.DeletePod(ctx, old.Namespace, old.Name))
				} else {
					p := gen.pod(old.Namespace, old.Name, gen.pick("node-b", "node-c"))
					must(t, asPods.cache.SetPod(ctx, p))
					if ep := podendpoint.For(p); ep != nil {
						must(t, asEndpoints.cache.SetEndpoint(ctx, ep))
					} else {
						must(t, asEndpoints.cache.DeletePod(ctx, p.Namespace, p.Name))
					}
				}
				sameTxns(t, fmt.Sprintf("change %d (%s/%s)", step, old.Namespace, old.Name), asPods, asEndpoints)
			}
			if len(asPods.r.txns) < 10 {
				t.Fatalf("only %d transactions: the changes tested little", len(asPods.r.txns))
			}
		})
	}
}

type peerStack struct {
	cache *pcache.Cache
	r     *recordingConfigurator
}

func newPeerStack(node string) *peerStack {
	s := &peerStack{cache: pcache.New(), r: &recordingConfigurator{}}
	s.cache.Watch(processor.New(node, s.cache, s.r, logr.Discard()))
	return s
}

func sameTxns(t *testing.T, what string, a, b *peerStack) {
	t.Helper()
	if !reflect.DeepEqual(a.r.txns, b.r.txns) {
		t.Fatalf("%s: with the peers as pods:\n%s\nas endpoints:\n%s", what, dumpTxns(a.r.txns), dumpTxns(b.r.txns))
	}
}

func dumpTxns(txns []configurator.Txn) string {
	s := ""
	for _, txn := range txns {
		s += fmt.Sprintf("txn resync=%v\n", txn.Resync)
		for _, p := range txn.Pods {
			s += fmt.Sprintf("  %s %v removed=%v sources=%v\n", p.ID, p.IPs, p.Removed, p.SourcePrefixes)
			for _, pol := range p.Policies {
				s += fmt.Sprintf("    %s in=%+v out=%+v\n", pol.ID, pol.Ingress, pol.Egress)
			}
			for _, pol := range append(append([]*configurator.ClusterPolicy(nil), p.Admin...), p.Baseline...) {
				s += fmt.Sprintf("    %s in=%+v out=%+v\n", pol.Name, pol.Ingress, pol.Egress)
			}
		}
	}
	return s
}

// peersIn counts the distinct peer pods of other nodes that the
// transactions' matches name.
func peersIn(txns []configurator.Txn) int {
	seen := map[renderer.PodID]bool{}
	add := func(ms []configurator.Match) {
		for _, m := range ms {
			for _, p := range m.Pods {
				if len(p.ID.Name) > 4 && p.ID.Name[:4] == "peer" {
					seen[p.ID] = true
				}
			}
		}
	}
	for _, txn := range txns {
		for _, p := range txn.Pods {
			for _, pol := range p.Policies {
				add(pol.Ingress)
				add(pol.Egress)
			}
			for _, pol := range append(append([]*configurator.ClusterPolicy(nil), p.Admin...), p.Baseline...) {
				for _, r := range append(append([]configurator.TierRule(nil), pol.Ingress...), pol.Egress...) {
					add([]configurator.Match{r.Match})
				}
			}
		}
	}
	return len(seen)
}

// peerGen makes random pods that mix every field policies read.
type peerGen struct {
	rng *rand.Rand
	uid int
}

func (g *peerGen) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *peerGen) ports(n int) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for range n {
		out = append(out, corev1.ContainerPort{
			Name:          g.pick("", "http", "dns", "metrics", "http"),
			Protocol:      corev1.Protocol(g.pick("", "TCP", "UDP", "SCTP", "QUIC")),
			ContainerPort: []int32{0, 53, 8080, 9090, 70000}[g.rng.IntN(5)],
		})
	}
	return out
}

func (g *peerGen) pod(ns, name, node string) *corev1.Pod {
	g.uid++
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprint("uid-", g.uid)),
			Labels: map[string]string{"app": g.pick("web", "db", "client")}},
		Spec: corev1.PodSpec{
			NodeName:    node,
			HostNetwork: g.rng.IntN(12) == 0,
			Containers:  []corev1.Container{{Name: "a", Ports: g.ports(g.rng.IntN(3))}, {Name: "b", Ports: g.ports(g.rng.IntN(2))}},
			InitContainers: []corev1.Container{
				{Name: "sidecar", Ports: g.ports(g.rng.IntN(2)), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
				{Name: "init", Ports: g.ports(g.rng.IntN(2))},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPhase(g.pick("Running", "Running", "Pending", "Succeeded", "Failed"))},
	}
	if g.rng.IntN(4) == 0 {
		p.Labels = nil
	}
	k := g.rng.IntN(200)
	switch g.rng.IntN(5) {
	case 0: // no address yet
	case 1:
		p.Status.PodIP = fmt.Sprintf("10.1.%d.%d", k/100, k%100)
	case 2:
		p.Status.PodIPs = []corev1.PodIP{{IP: fmt.Sprintf("fd00::%x", k)}, {IP: fmt.Sprintf("10.1.%d.%d", k/100, k%100)}, {IP: "fd00::ffff"}}
	case 3:
		p.Status.PodIPs = []corev1.PodIP{{IP: "bad"}, {IP: fmt.Sprintf("::ffff:10.1.%d.%d", k/100, k%100)}}
	default:
		p.Status.PodIPs = []corev1.PodIP{{IP: fmt.Sprintf("10.1.%d.%d", k/100, k%100)}}
	}
	if g.rng.IntN(4) == 0 {
		p.Annotations = map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: g.pick("10.9.0.0/24", " 10.9.0.0/24 , fd00:9::/64", "junk,10.9.1.0/24")}
	}
	return p
}

// peerPolicies select the local pods and reach the peers by labels, by
// namespace, by address with named ports, and by named ports alone.
func peerPolicies() []*networkingv1.NetworkPolicy {
	udp := corev1.ProtocolUDP
	egress := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	pol := func(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	}
	return []*networkingv1.NetworkPolicy{
		pol("ns0", "from-clients", networkingv1.NetworkPolicySpec{
			PodSelector: *selector("app", "web"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "client")}, {NamespaceSelector: selector("team", "b"), PodSelector: selector("app", "db")}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: portName("http")}, {Protocol: &tcp, Port: portNumber(9090)}},
			}},
		}),
		pol("ns0", "to-named", networkingv1.NetworkPolicySpec{
			PodSelector: *selector("app", "client"),
			PolicyTypes: egress,
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{PodSelector: selector("app", "web")}}, Ports: []networkingv1.NetworkPolicyPort{{Port: portName("http")}}},
				{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/16", Except: []string{"10.1.1.0/24"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: portName("dns")}, {Port: portName("metrics")}}},
			},
		}),
		pol("ns1", "anywhere-named", networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: egress,
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: portName("http")}, {Protocol: &udp, Port: portName("dns")}}}},
		}),
	}
}

func peerClusterPolicies() []*cnp.ClusterNetworkPolicy {
	admin := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny-db"}}
	admin.Spec.Tier, admin.Spec.Priority = cnp.AdminTier, 1
	admin.Spec.Subject.Namespaces = &metav1.LabelSelector{}
	admin.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Name: "db", Action: cnp.ClusterNetworkPolicyRuleActionDeny,
		From: []cnp.ClusterNetworkPolicyIngressPeer{{Pods: &cnp.NamespacedPod{NamespaceSelector: *selector("team", "a"), PodSelector: *selector("app", "db")}}}}}
	baseline := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}
	baseline.Spec.Tier, baseline.Spec.Priority = cnp.BaselineTier, 1
	baseline.Spec.Subject.Namespaces = selector("team", "a")
	baseline.Spec.Egress = []cnp.ClusterNetworkPolicyEgressRule{{Name: "b", Action: cnp.ClusterNetworkPolicyRuleActionAccept,
		To: []cnp.ClusterNetworkPolicyEgressPeer{{Namespaces: selector("team", "b")}}}}
	return []*cnp.ClusterNetworkPolicy{admin, baseline}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
