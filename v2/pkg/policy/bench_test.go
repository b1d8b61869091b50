package policy_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/policyoracle"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"

	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl/tables"

	"github.com/go-logr/logr"
)

// benchCluster builds the benchmark's cluster: 1,000 pods in 20 namespaces
// of 50 pods, every pod on this node (the worst case for CombineRules, which
// pairs every two local pods), and 500 policies, 25 per namespace:
//
//   - 10 select one app (5 pods) and admit another app of the namespace on
//     TCP 8080 and the named port "http";
//   - 5 select a tier (about 17 pods) and admit that tier's clients from the
//     namespaces of a team on TCP 443;
//   - 5 select one app for egress too: to another app on TCP 5432, to
//     10.96.0.0/12 except 10.100.0.0/16 on TCP 443, to kube-dns on UDP 53;
//   - 5 select one app and admit 172.16.0.0/16 except 172.16.1.0/24 on
//     TCP 8000-8100.
func benchCluster() *policyoracle.Cluster {
	c := &policyoracle.Cluster{
		Node:          "node-a",
		NodeAddresses: []netip.Addr{netip.MustParseAddr("192.168.0.1")},
		NATLoopback:   []netip.Addr{netip.MustParseAddr("10.1.255.254")},
	}
	tiers := []string{"frontend", "backend", "db"}
	for n := range 20 {
		ns := fmt.Sprintf("ns%02d", n)
		c.Namespaces = append(c.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{
			"kubernetes.io/metadata.name": ns, "team": fmt.Sprintf("t%d", n%5), "env": []string{"prod", "dev"}[n%2],
		}}})
		for i := range 50 {
			k := n*50 + i
			c.Pods = append(c.Pods, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("pod%02d", i), Labels: map[string]string{
					"app": fmt.Sprintf("app%d", i%10), "tier": tiers[i%3],
				}},
				Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{
					{Name: "http", ContainerPort: 8000 + int32(i%10), Protocol: corev1.ProtocolTCP},
					{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP},
				}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.1.%d.%d", k/250, k%250+1)}}},
			})
		}
		tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
		port := func(p int32) *intstr.IntOrString { v := intstr.FromInt32(p); return &v }
		named := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
		app := func(i int) *metav1.LabelSelector {
			return &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app%d", i%10)}}
		}
		add := func(name string, spec networkingv1.NetworkPolicySpec) {
			c.Policies = append(c.Policies, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})
		}
		for i := range 10 {
			add(fmt.Sprintf("app%d", i), networkingv1.NetworkPolicySpec{
				PodSelector: *app(i),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: app(i + 1)}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(8080)}, {Protocol: &tcp, Port: named("http")}},
				}},
			})
		}
		for i := range 5 {
			add(fmt.Sprintf("tier%d", i), networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": tiers[i%3]}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", (n+i)%5)}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"tier": tiers[(i+2)%3]}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)}},
				}},
			})
		}
		for i := range 5 {
			add(fmt.Sprintf("egress%d", i), networkingv1.NetworkPolicySpec{
				PodSelector: *app(i * 2),
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: app(i*2 + 3)}}}},
				Egress: []networkingv1.NetworkPolicyEgressRule{
					{To: []networkingv1.NetworkPolicyPeer{{PodSelector: app(i*2 + 5)}}, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(5432)}}},
					{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.96.0.0/12", Except: []string{"10.100.0.0/16"}}}}, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)}}},
					{To: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ns00"}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "app0"}},
					}}, Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: port(53)}}},
				},
			})
		}
		for i := range 5 {
			end := int32(8100)
			add(fmt.Sprintf("external%d", i), networkingv1.NetworkPolicySpec{
				PodSelector: *app(i*2 + 1),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "172.16.0.0/16", Except: []string{"172.16.1.0/24"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(8000), EndPort: &end}},
				}},
			})
		}
	}
	return c
}

// benchPipeline is the stack of one node with one renderer cache (tables
// on the pods' Ingress, as the VPP ACL renderer uses).
func benchPipeline(b *testing.B, c *policyoracle.Cluster) (*pcache.Cache, *cacheOnly) {
	conf, err := configurator.New(configurator.Config{NATLoopback: c.NATLoopback, NodeAddresses: c.NodeAddresses})
	if err != nil {
		b.Fatal(err)
	}
	r := &cacheOnly{cache: tables.New(renderer.Ingress)}
	conf.Register("acl", r)
	pc := pcache.New()
	pc.Watch(processor.New(c.Node, pc, conf, logr.Discard()))
	if err := pc.Replace(context.Background(), c.Pods, c.Namespaces, c.Policies); err != nil {
		b.Fatal(err)
	}
	return pc, r
}

// cacheOnly is a renderer that only keeps the renderer cache up to date.
type cacheOnly struct {
	cache *tables.Cache
	last  tables.Changes
	pods  int
}

func (r *cacheOnly) Render(_ context.Context, txn renderer.Txn) error {
	ch, err := r.cache.Apply(txn)
	r.last, r.pods = ch, len(txn.Pods)
	return err
}

// BenchmarkFullRender1000Pods500Policies measures a resync from nothing:
// cache, processor, configurator and renderer cache for the whole cluster.
// Target: under 1 s.
func BenchmarkFullRender1000Pods500Policies(b *testing.B) {
	c := benchCluster()
	b.ReportAllocs()
	var r *cacheOnly
	for b.Loop() {
		_, r = benchPipeline(b, c)
	}
	reportTables(b, r)
}

// BenchmarkIncrementalPodLabelChange measures one pod's labels changing
// back and forth (app0 <-> app5: the policies selecting it and referencing
// it change). Target: under 10 ms.
func BenchmarkIncrementalPodLabelChange(b *testing.B) {
	c := benchCluster()
	pc, r := benchPipeline(b, c)
	orig := c.Pods[120]
	other := orig.DeepCopy()
	other.Labels = map[string]string{"app": "app5", "tier": "db"}
	versions := []*corev1.Pod{other, orig}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := pc.SetPod(ctx, versions[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(r.pods), "pods/txn")
	reportTables(b, r)
}

// BenchmarkIncrementalPolicyChange measures one policy changing back and
// forth (its port, and which app it admits). Target: under 10 ms.
func BenchmarkIncrementalPolicyChange(b *testing.B) {
	c := benchCluster()
	pc, r := benchPipeline(b, c)
	orig := c.Policies[3]
	other := orig.DeepCopy()
	other.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app"] = "app7"
	p := intstr.FromInt32(8443)
	other.Spec.Ingress[0].Ports[0].Port = &p
	versions := []*networkingv1.NetworkPolicy{other, orig}
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := pc.SetPolicy(ctx, versions[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(r.pods), "pods/txn")
	reportTables(b, r)
}

func reportTables(b *testing.B, r *cacheOnly) {
	b.Helper()
	n := 0
	for _, t := range r.cache.LocalTables() {
		n += len(t.Rules)
	}
	b.ReportMetric(float64(len(r.cache.LocalTables())), "tables")
	b.ReportMetric(float64(n), "table-rules")
	b.ReportMetric(float64(len(r.cache.GlobalTable().Rules)), "global-rules")
}

// benchClusterWithTiers is benchCluster with 100 ClusterNetworkPolicies: 50
// Admin and 50 Baseline, of every action, with namespace and pod subjects
// and peers and CIDRs, as an administrator writes them (deny the metadata
// service, always allow monitoring, hand tenants' traffic to their own
// NetworkPolicies, default-deny between teams).
func benchClusterWithTiers() *policyoracle.Cluster {
	c := benchCluster()
	tcp := func(port int32) []cnp.ClusterNetworkPolicyProtocol {
		return []cnp.ClusterNetworkPolicyProtocol{{TCP: &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnp.Port{Number: port}}}}
	}
	team := func(i int) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i%5)}}
	}
	env := func(e string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"env": e}}
	}
	app := func(i int) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app%d", i%10)}}
	}
	for i := range 50 {
		pol := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("admin%02d", i)}}
		pol.Spec.Tier, pol.Spec.Priority = cnp.AdminTier, int32(i)
		if i%2 == 0 {
			pol.Spec.Subject.Namespaces = team(i)
		} else {
			pol.Spec.Subject.Pods = &cnp.NamespacedPod{NamespaceSelector: *env([]string{"prod", "dev"}[i%4/2]), PodSelector: app(i)}
		}
		switch i % 5 {
		case 0: // the metadata service and the carrier-grade NAT range, denied
			pol.Spec.Egress = []cnp.ClusterNetworkPolicyEgressRule{{Name: "metadata", Action: cnp.ClusterNetworkPolicyRuleActionDeny,
				To: []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"169.254.169.254/32", "100.64.0.0/10"}}}}}
		case 1: // monitoring scrapes, always
			pol.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Name: "scrape", Action: cnp.ClusterNetworkPolicyRuleActionAccept,
				From: []cnp.ClusterNetworkPolicyIngressPeer{{Pods: &cnp.NamespacedPod{NamespaceSelector: *team(i + 1), PodSelector: app(0)}}}, Protocols: tcp(9090)}}
		case 2: // the dev frontends' traffic is the tenants' to decide
			pol.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Name: "tenants", Action: cnp.ClusterNetworkPolicyRuleActionPass,
				From: []cnp.ClusterNetworkPolicyIngressPeer{{Pods: &cnp.NamespacedPod{NamespaceSelector: *env("dev"),
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"tier": "frontend"}}}}}}}
		case 3: // no database traffic from another team
			pol.Spec.Egress = []cnp.ClusterNetworkPolicyEgressRule{{Name: "db", Action: cnp.ClusterNetworkPolicyRuleActionDeny,
				To: []cnp.ClusterNetworkPolicyEgressPeer{{Namespaces: team(i + 2)}}, Protocols: tcp(5432)}}
		case 4: // DNS only from the cluster's resolvers' range
			pol.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Name: "dns", Action: cnp.ClusterNetworkPolicyRuleActionDeny,
				From:      []cnp.ClusterNetworkPolicyIngressPeer{{Namespaces: env("dev")}},
				Protocols: []cnp.ClusterNetworkPolicyProtocol{{UDP: &cnp.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnp.Port{Range: &cnp.PortRange{Start: 53, End: 54}}}}}}}
		}
		c.ClusterPolicies = append(c.ClusterPolicies, pol)
	}
	for i := range 50 {
		pol := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("baseline%02d", i)}}
		pol.Spec.Tier, pol.Spec.Priority = cnp.BaselineTier, int32(i)
		pol.Spec.Subject.Namespaces = team(i)
		switch i % 3 {
		case 0: // default deny from other teams
			pol.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Name: "same-team", Action: cnp.ClusterNetworkPolicyRuleActionAccept,
				From: []cnp.ClusterNetworkPolicyIngressPeer{{Namespaces: team(i)}}},
				{Name: "others", Action: cnp.ClusterNetworkPolicyRuleActionDeny, From: []cnp.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{}}}}}
		case 1: // egress to the cluster's networks only
			pol.Spec.Egress = []cnp.ClusterNetworkPolicyEgressRule{{Name: "cluster", Action: cnp.ClusterNetworkPolicyRuleActionAccept,
				To: []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"10.0.0.0/8", "192.168.0.0/16"}}}},
				{Name: "internet", Action: cnp.ClusterNetworkPolicyRuleActionDeny, To: []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"0.0.0.0/0"}}}}}
		case 2: // metrics from one app of every team
			pol.Spec.Ingress = []cnp.ClusterNetworkPolicyIngressRule{{Name: "metrics", Action: cnp.ClusterNetworkPolicyRuleActionAccept,
				From: []cnp.ClusterNetworkPolicyIngressPeer{{Pods: &cnp.NamespacedPod{PodSelector: app(i)}}}, Protocols: tcp(9090)}}
		}
		c.ClusterPolicies = append(c.ClusterPolicies, pol)
	}
	return c
}

// BenchmarkPeerPodHeap measures what the policy stack of one node retains
// per pod of another node: 10,000 PodEndpoints, as the informer holds them,
// fed through the feed into the cache and its processor. The endpoints
// exist before the first measurement (the informer holds them whatever the
// policy stack does), so retained-B/peer is the stack's own cost of a peer
// pod: its cache entry and the processor's podInfo.
func BenchmarkPeerPodHeap(b *testing.B) {
	const n, node = 10_000, "node-a"
	var namespaces []*corev1.Namespace
	for i := range 20 {
		ns := fmt.Sprintf("ns%02d", i)
		namespaces = append(namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}})
	}
	tiers := []string{"frontend", "backend", "db"}
	endpoints := make([]*vcoilv2.PodEndpoint, n)
	for k := range endpoints {
		ns, name := fmt.Sprintf("ns%02d", k%20), fmt.Sprintf("pod%05d", k)
		ep := &vcoilv2.PodEndpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(fmt.Sprintf("ep-%d", k)),
				Labels: map[string]string{vcoilv2.LabelNode: fmt.Sprintf("node-%d", 1+k%100)}},
			Spec: vcoilv2.PodEndpointSpec{
				PodUID: types.UID(fmt.Sprintf("pod-%d", k)), NodeName: fmt.Sprintf("node-%d", 1+k%100),
				PodLabels: map[string]string{"app": fmt.Sprintf("app%d", k%10), "tier": tiers[k%3]},
				Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 1+k/62500, k/250%250, k%250+1)},
			},
		}
		if k%2 == 0 { // half the pods name their ports
			ep.Spec.NamedPorts = []vcoilv2.NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}, {Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9090}}
		}
		if k%100 == 0 { // a few route other addresses
			ep.Spec.SourcePrefixes = []string{"198.51.100.0/24"}
		}
		endpoints[k] = ep
	}
	ctx := context.Background()
	conf, err := configurator.New(configurator.Config{})
	if err != nil {
		b.Fatal(err)
	}
	conf.Register("acl", &cacheOnly{cache: tables.New(renderer.Ingress)})
	var perPeer float64
	b.ReportAllocs()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		pc := pcache.New()
		pc.Watch(processor.New(node, pc, conf, logr.Discard()))
		feed := pcache.NewFeed(ctx, pc, logr.Discard())
		nsHandler, peers := feed.NamespaceHandler(), feed.PeerHandler(node)
		for _, ns := range namespaces {
			nsHandler.OnAdd(ns, true)
		}
		for _, ep := range endpoints {
			peers.OnAdd(ep, true)
		}
		if err := feed.Synced(); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPeer = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
		runtime.KeepAlive(pc)
		runtime.KeepAlive(feed)
	}
	runtime.KeepAlive(endpoints)
	b.ReportMetric(perPeer, "retained-B/peer")
}

// BenchmarkPeerLabelChange2000Policies measures what a label change of
// another node's pod costs the policy stack in a cluster of the scale
// benchmark's shape: 2,000 policies spread over 100 namespaces, each
// admitting one app of its own namespace, and one policy of the node's
// namespace admitting labelled pods of every namespace. The peer's change
// turns it in and out of that policy and of its namespace's policies.
func BenchmarkPeerLabelChange2000Policies(b *testing.B) {
	const node, namespaces, policies, apps = "node-a", 100, 2000, 10
	ctx := context.Background()
	conf, err := configurator.New(configurator.Config{})
	if err != nil {
		b.Fatal(err)
	}
	r := &cacheOnly{cache: tables.New(renderer.Ingress)}
	conf.Register("acl", r)
	pc := pcache.New()
	pc.Watch(processor.New(node, pc, conf, logr.Discard()))
	feed := pcache.NewFeed(ctx, pc, logr.Discard())
	nsHandler, peers, pods, pols := feed.NamespaceHandler(), feed.PeerHandler(node), feed.PodHandler(), feed.PolicyHandler()
	tcp := corev1.ProtocolTCP
	for n := range namespaces {
		ns := fmt.Sprintf("ns%03d", n)
		nsHandler.OnAdd(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}}, true)
		for i := range 10 {
			k := n*10 + i
			peers.OnAdd(&vcoilv2.PodEndpoint{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("peer%02d", i)},
				Spec: vcoilv2.PodEndpointSpec{PodUID: types.UID(fmt.Sprintf("peer-%d", k)), NodeName: "node-b",
					PodLabels: map[string]string{"app": fmt.Sprintf("a%d", i%apps)},
					Addresses: []string{fmt.Sprintf("10.2.%d.%d", k/250, k%250+1)}},
			}, true)
		}
	}
	for i := range policies {
		ns := fmt.Sprintf("ns%03d", i%namespaces)
		pols.OnAdd(&networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("np-%05d", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", i%apps)}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", (i+1)%apps)}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr.To(intstr.FromInt32(8080))}},
				}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			},
		}, true)
	}
	// The node's own pod, isolated by a policy that admits labelled pods
	// of any namespace.
	pods.OnAdd(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns000", Name: "target", Labels: map[string]string{"role": "target"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.1.0.1"}}},
	}, true)
	pols.OnAdd(&networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns000", Name: "probe"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "target"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"probe": "yes"}},
			}}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}, true)
	if err := feed.Synced(); err != nil {
		b.Fatal(err)
	}
	base := &vcoilv2.PodEndpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns050", Name: "peer03"},
		Spec: vcoilv2.PodEndpointSpec{PodUID: "peer-503", NodeName: "node-b",
			PodLabels: map[string]string{"app": "a3"}, Addresses: []string{"10.2.2.4"}},
	}
	labelled := base.DeepCopy()
	labelled.Spec.PodLabels = map[string]string{"app": "a4", "probe": "yes"}
	versions := []*vcoilv2.PodEndpoint{labelled, base}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		peers.OnUpdate(nil, versions[i%2])
		i++
	}
	if r.pods != 1 {
		b.Fatalf("the last change configured %d pods, want the node's one", r.pods)
	}
}
