package nftables

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// TestClusterNetworkPoliciesFilterRealTraffic: ClusterNetworkPolicies
// through the whole stack into the kernel, checked with real connections
// in the traffic lab: an Admin Deny beats a NetworkPolicy's permit, an
// Admin Pass hands the connection to the NetworkPolicy of an isolated pod
// and to the Baseline of one that is not, a Baseline Deny applies only to
// pods no NetworkPolicy isolates, an Admin Accept beats a NetworkPolicy's
// isolation; and the drops are counted per ClusterNetworkPolicy.
func TestClusterNetworkPoliciesFilterRealTraffic(t *testing.T) {
	l := newTrafficLab(t)
	r := l.r
	fromNS := func(name, team string, action cnp.ClusterNetworkPolicyRuleAction) cnp.ClusterNetworkPolicyIngressRule {
		return cnp.ClusterNetworkPolicyIngressRule{Name: name, Action: action,
			From: []cnp.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}}}}
	}
	set := func(name string, tier cnp.Tier, prio int32, subjectApp string, in ...cnp.ClusterNetworkPolicyIngressRule) {
		t.Helper()
		pol := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
		pol.Spec.Tier, pol.Spec.Priority, pol.Spec.Ingress = tier, prio, in
		pol.Spec.Subject.Pods = &cnp.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": subjectApp}}}
		if err := l.cache.SetClusterPolicy(t.Context(), pol); err != nil {
			t.Fatal(err)
		}
	}
	// b admits a and c by NetworkPolicy.
	l.setPolicy(t, policy("ns1", "b-admits", map[string]string{"app": "b"}, nil, nil))
	l.expect(t, false, "a", "b", 8080)

	t.Run("Admin Deny beats a NetworkPolicy's permit; Admin Accept beats its isolation", func(t *testing.T) {
		set("deny-team-a", cnp.AdminTier, 10, "b", fromNS("team-a", "a", cnp.ClusterNetworkPolicyRuleActionDeny))
		set("accept-team-b", cnp.AdminTier, 20, "b", fromNS("team-b", "b", cnp.ClusterNetworkPolicyRuleActionAccept))
		l.expect(t, false, "a", "b", 8080)
		l.expect(t, true, "c", "b", 8080)
		l.expect(t, true, "r", "b", 8080)
	})
	t.Run("Admin Pass goes to the NetworkPolicy of an isolated pod", func(t *testing.T) {
		set("deny-team-a", cnp.AdminTier, 10, "b", fromNS("team-a", "a", cnp.ClusterNetworkPolicyRuleActionPass))
		l.expect(t, false, "a", "b", 8080) // b-admits isolates b and admits nobody
	})
	t.Run("Admin Pass goes to the Baseline of a pod no NetworkPolicy isolates", func(t *testing.T) {
		l.deletePolicy(t, "ns1", "b-admits")
		l.expect(t, true, "a", "b", 8080)
		set("baseline-deny", cnp.BaselineTier, 10, "b", fromNS("all", "a", cnp.ClusterNetworkPolicyRuleActionDeny))
		l.expect(t, false, "a", "b", 8080)
		l.expect(t, true, "c", "b", 8080) // Admin Accept
		// a NetworkPolicy isolating b again: the Baseline no longer applies.
		l.setPolicy(t, policy("ns1", "b-admits-a", map[string]string{"app": "b"}, []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: labels("app", "a")}}}}, nil))
		l.expect(t, true, "a", "b", 8080)
		l.deletePolicy(t, "ns1", "b-admits-a")
	})
	t.Run("drops are counted per ClusterNetworkPolicy", func(t *testing.T) {
		before := deniedBy(t, r, "baseline-deny")
		for range 3 {
			l.expect(t, false, "a", "b", 8080)
		}
		if after := deniedBy(t, r, "baseline-deny"); after <= before {
			t.Fatalf("packets denied by ClusterNetworkPolicy baseline-deny: %d, then %d after three refused connections", before, after)
		}
		if n := l.metricSum(t, "vcoil_policy_cluster_network_policy_denied_packets_total", "policy", "baseline-deny"); n == 0 {
			t.Fatal("vcoil_policy_cluster_network_policy_denied_packets_total{policy=baseline-deny} is 0")
		}
	})
}

func deniedBy(t *testing.T, r *Renderer, policy string) uint64 {
	t.Helper()
	ds, err := r.Denied(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, d := range ds {
		if d.Policy == policy && d.Direction == renderer.Ingress {
			n += d.Packets
		}
	}
	return n
}

// TestNetworkPolicyDropsAreCountedPerPolicy: the packets no NetworkPolicy
// permitted are counted for the policies isolating the pod they were
// going to or coming from, not for every policy of its group: a and b
// are isolated by two default-deny policies of equal rules (one group),
// and what b refuses counts for b's policy only. A pod that stops being
// isolated takes its count with it.
func TestNetworkPolicyDropsAreCountedPerPolicy(t *testing.T) {
	l := newTrafficLab(t)
	r := l.r
	ingress := networkingv1.PolicyTypeIngress
	egress := networkingv1.PolicyTypeEgress
	l.setPolicy(t, policy("ns1", "b-deny", map[string]string{"app": "b"}, nil, nil, ingress))
	l.setPolicy(t, policy("ns1", "a-deny", map[string]string{"app": "a"}, nil, nil, ingress))
	l.setPolicy(t, policy("ns2", "c-out", map[string]string{"app": "c"}, nil, nil, egress))
	if n := groupsOf(r, renderer.Ingress); n != 1 {
		t.Fatalf("the two default-deny policies give %d ingress groups, want one shared", n)
	}
	for range 3 {
		l.expect(t, false, "c", "b", 8080) // c's egress refuses it first
		l.expect(t, false, "r", "b", 8080)
	}
	in, out := npDenied(t, r, renderer.Ingress), npDenied(t, r, renderer.Egress)
	if in["ns1/b-deny"] == 0 || in["ns1/a-deny"] != 0 {
		t.Fatalf("ingress drops per NetworkPolicy %v: want some for ns1/b-deny, none for ns1/a-deny", in)
	}
	if out["ns2/c-out"] == 0 || len(out) != 1 {
		t.Fatalf("egress drops per NetworkPolicy %v: want some for ns2/c-out only", out)
	}
	if n := l.metricSum(t, "vcoil_policy_network_policy_denied_packets_total", "policy", "b-deny"); n != float64(in["ns1/b-deny"]) {
		t.Fatalf("vcoil_policy_network_policy_denied_packets_total{policy=b-deny} = %v, want %d", n, in["ns1/b-deny"])
	}
	// b's policy goes, and comes back: b's count starts again.
	l.deletePolicy(t, "ns1", "b-deny")
	l.expect(t, true, "r", "b", 8080)
	l.setPolicy(t, policy("ns1", "b-deny", map[string]string{"app": "b"}, nil, nil, ingress))
	if in := npDenied(t, r, renderer.Ingress); in["ns1/b-deny"] != 0 {
		t.Fatalf("ns1/b-deny isolating b again counts %d packets from before", in["ns1/b-deny"])
	}
	l.expect(t, false, "r", "b", 8080)
	if in := npDenied(t, r, renderer.Ingress); in["ns1/b-deny"] == 0 {
		t.Fatal("ns1/b-deny counts no packet after a refused connection")
	}
}

func groupsOf(r *Renderer, d renderer.Direction) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, g := range r.groups {
		if g.kind == kindNetworkPolicy && g.dir == d && g.refs > 0 {
			n++
		}
	}
	return n
}

// npDenied is the renderer's denied counts per NetworkPolicy.
func npDenied(t *testing.T, r *Renderer, d renderer.Direction) map[string]uint64 {
	t.Helper()
	ds, err := r.Denied(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, x := range ds {
		if x.Tier == kindNetworkPolicy.String() && x.Group == "" && x.Direction == d {
			out[x.Policy] += x.Packets
		}
	}
	return out
}
