package policyoracle

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// The tier semantics, case by case, each with the API's documentation
// sentence it checks in its name.
func TestClusterNetworkPolicyTiers(t *testing.T) {
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	pod := func(namespace, name, ip string, labels map[string]string, hostNetwork bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
			Spec:   corev1.PodSpec{NodeName: "n1", HostNetwork: hostNetwork},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	web := pod("prod", "web", "10.0.0.1", map[string]string{"app": "web"}, false)
	client := pod("dev", "client", "10.0.0.2", nil, false)
	mon := pod("monitoring", "prom", "10.0.0.3", nil, false)
	host := pod("prod", "host", "198.18.0.9", map[string]string{"app": "web"}, true)
	outside := netip.MustParseAddr("203.0.113.7")
	base := &Cluster{Node: "n1", NodeAddresses: []netip.Addr{netip.MustParseAddr("198.18.0.1")},
		Namespaces: []*corev1.Namespace{ns("prod", map[string]string{"env": "prod"}), ns("dev", map[string]string{"env": "dev"}), ns("monitoring", map[string]string{"role": "monitoring"})},
		Pods:       []*corev1.Pod{web, client, mon, host}}
	nsSel := func(l map[string]string) *metav1.LabelSelector { return &metav1.LabelSelector{MatchLabels: l} }
	all := &metav1.LabelSelector{}
	ingress := func(action cnp.ClusterNetworkPolicyRuleAction, from ...cnp.ClusterNetworkPolicyIngressPeer) cnp.ClusterNetworkPolicyIngressRule {
		return cnp.ClusterNetworkPolicyIngressRule{Action: action, From: from}
	}
	fromNS := func(l map[string]string) cnp.ClusterNetworkPolicyIngressPeer {
		return cnp.ClusterNetworkPolicyIngressPeer{Namespaces: nsSel(l)}
	}
	policy := func(name string, tier cnp.Tier, prio int32, subject cnp.ClusterNetworkPolicySubject, in []cnp.ClusterNetworkPolicyIngressRule, eg []cnp.ClusterNetworkPolicyEgressRule) *cnp.ClusterNetworkPolicy {
		return &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: cnp.ClusterNetworkPolicySpec{Tier: tier, Priority: prio, Subject: subject, Ingress: in, Egress: eg}}
	}
	prodPods := cnp.ClusterNetworkPolicySubject{Namespaces: nsSel(map[string]string{"env": "prod"})}
	const (
		acc  = cnp.ClusterNetworkPolicyRuleActionAccept
		den  = cnp.ClusterNetworkPolicyRuleActionDeny
		pas  = cnp.ClusterNetworkPolicyRuleActionPass
		http = 80
	)
	isolateWeb := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "isolate"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	conn := func(src *corev1.Pod, dst netip.Addr) Connection {
		return Connection{Src: PodAddresses(src)[0], Dst: dst, Protocol: TCP, SrcPort: 40000, DstPort: http}
	}
	webAddr := PodAddresses(web)[0]
	cases := []struct {
		name     string
		policies []*networkingv1.NetworkPolicy
		cluster  []*cnp.ClusterNetworkPolicy
		c        Connection
		want     bool
	}{
		{"no policy: every pod talks to every pod", nil, nil, conn(client, webAddr), true},
		{"Admin Deny drops, and no NetworkPolicy can admit it", nil,
			[]*cnp.ClusterNetworkPolicy{policy("deny-dev", cnp.AdminTier, 10, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(den, fromNS(map[string]string{"env": "dev"}))}, nil)},
			conn(client, webAddr), false},
		{"Admin Accept admits a connection a NetworkPolicy isolating the pod would drop", []*networkingv1.NetworkPolicy{isolateWeb},
			[]*cnp.ClusterNetworkPolicy{policy("monitoring", cnp.AdminTier, 5, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(acc, fromNS(map[string]string{"role": "monitoring"}))}, nil)},
			conn(mon, webAddr), true},
		{"lower priority value first: Accept at 5 beats Deny at 10", nil,
			[]*cnp.ClusterNetworkPolicy{
				policy("deny-all", cnp.AdminTier, 10, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(den, cnp.ClusterNetworkPolicyIngressPeer{Namespaces: all})}, nil),
				policy("allow-mon", cnp.AdminTier, 5, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(acc, fromNS(map[string]string{"role": "monitoring"}))}, nil)},
			conn(mon, webAddr), true},
		{"rules of one policy in their order: Pass before Deny hands the connection to NetworkPolicy, which isolates", []*networkingv1.NetworkPolicy{isolateWeb},
			[]*cnp.ClusterNetworkPolicy{policy("pass", cnp.AdminTier, 1, prodPods, []cnp.ClusterNetworkPolicyIngressRule{
				ingress(pas, fromNS(map[string]string{"role": "monitoring"})), ingress(acc, cnp.ClusterNetworkPolicyIngressPeer{Namespaces: all})}, nil)},
			conn(mon, webAddr), false},
		{"Admin Pass on a pod no NetworkPolicy isolates reaches Baseline, whose Deny drops", nil,
			[]*cnp.ClusterNetworkPolicy{
				policy("pass", cnp.AdminTier, 1, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(pas, cnp.ClusterNetworkPolicyIngressPeer{Namespaces: all})}, nil),
				policy("baseline", cnp.BaselineTier, 1, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(den, fromNS(map[string]string{"env": "dev"}))}, nil)},
			conn(client, webAddr), false},
		{"Baseline is overridden by a NetworkPolicy that selects the pod", []*networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "allow-dev"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{}, Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsSel(map[string]string{"env": "dev"})}}}}}}},
			[]*cnp.ClusterNetworkPolicy{policy("baseline", cnp.BaselineTier, 1, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(den, fromNS(map[string]string{"env": "dev"}))}, nil)},
			conn(client, webAddr), true},
		{"Baseline Pass admits (Kubernetes' default)", nil,
			[]*cnp.ClusterNetworkPolicy{policy("baseline", cnp.BaselineTier, 1, prodPods, []cnp.ClusterNetworkPolicyIngressRule{
				ingress(pas, fromNS(map[string]string{"env": "dev"})), ingress(den, cnp.ClusterNetworkPolicyIngressPeer{Namespaces: all})}, nil)},
			conn(client, webAddr), true},
		{"egress networks: Deny to 203.0.113.0/24", nil,
			[]*cnp.ClusterNetworkPolicy{policy("no-out", cnp.AdminTier, 1, cnp.ClusterNetworkPolicySubject{Namespaces: all}, nil,
				[]cnp.ClusterNetworkPolicyEgressRule{{Action: den, To: []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"203.0.113.0/24"}}}}})},
			conn(web, outside), false},
		{"protocols: a Deny of UDP does not touch TCP", nil,
			[]*cnp.ClusterNetworkPolicy{policy("no-udp", cnp.AdminTier, 1, cnp.ClusterNetworkPolicySubject{Namespaces: all}, nil,
				[]cnp.ClusterNetworkPolicyEgressRule{{Action: den, To: []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"0.0.0.0/0"}}},
					Protocols: []cnp.ClusterNetworkPolicyProtocol{{UDP: &cnp.ClusterNetworkPolicyProtocolUDP{DestinationPort: &cnp.Port{Range: &cnp.PortRange{Start: 1, End: 65535}}}}}}})},
			conn(web, outside), true},
		{"fail closed: a Deny to domain names denies all of its direction", nil,
			[]*cnp.ClusterNetworkPolicy{policy("domains", cnp.AdminTier, 1, cnp.ClusterNetworkPolicySubject{Namespaces: all}, nil,
				[]cnp.ClusterNetworkPolicyEgressRule{{Action: den, To: []cnp.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnp.DomainName{"example.com"}}}}})},
			conn(web, outside), false},
		{"fail closed: an Accept to domain names matches nothing, and a NetworkPolicy decides", []*networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "no-egress"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}}},
			[]*cnp.ClusterNetworkPolicy{policy("domains", cnp.AdminTier, 1, cnp.ClusterNetworkPolicySubject{Namespaces: all}, nil,
				[]cnp.ClusterNetworkPolicyEgressRule{{Action: acc, To: []cnp.ClusterNetworkPolicyEgressPeer{{DomainNames: []cnp.DomainName{"example.com"}}}}})},
			conn(web, outside), false},
		{"host-network pods are not subjects", nil,
			[]*cnp.ClusterNetworkPolicy{policy("deny-dev", cnp.AdminTier, 1, prodPods, []cnp.ClusterNetworkPolicyIngressRule{ingress(den, cnp.ClusterNetworkPolicyIngressPeer{Namespaces: all})}, nil)},
			conn(client, netip.MustParseAddr("198.18.0.9")), true},
		{"a pod and its own node: no tier blocks it", nil,
			[]*cnp.ClusterNetworkPolicy{policy("deny-all", cnp.AdminTier, 1, prodPods, nil, []cnp.ClusterNetworkPolicyEgressRule{{Action: den, To: []cnp.ClusterNetworkPolicyEgressPeer{{Networks: []cnp.CIDR{"0.0.0.0/0"}}}}})},
			conn(web, netip.MustParseAddr("198.18.0.1")), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base.Clone()
			c.Policies, c.ClusterPolicies = tc.policies, tc.cluster
			if got := NewKubernetes(c).Allowed(tc.c); got != tc.want {
				t.Errorf("%v: allowed=%v, want %v", tc.c, got, tc.want)
			}
		})
	}
}
