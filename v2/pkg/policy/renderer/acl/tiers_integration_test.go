package acl

import (
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// TestRealVPPClusterPolicyTiers runs the renderer against a real VPP
// (VCOIL_VPP_BIN) with ClusterNetworkPolicy tiers and checks real traffic:
// an Admin Pass hands a connection to the NetworkPolicy tier, which refuses
// it for a pod a NetworkPolicy isolates, and to the Baseline tier's default,
// which admits it for one none isolates; an Admin Deny beats a
// NetworkPolicy permit; an Admin Deny on a pod's egress is enforced in the
// destination's table (the ordered CombineRules) and on the outside
// interfaces; and when the last tier goes the renderer goes back to its
// NetworkPolicy tables. The packets refused are counted for the policy
// that refused them, from the ACLs' per-rule counters.
func TestRealVPPClusterPolicyTiers(t *testing.T) {
	e := newITEnv(t, "a", "b", "s")
	a, b, s := e.pods["a"], e.pods["b"], e.pods["s"]
	from := func(p *itPod, action renderer.TierAction) renderer.TierRule {
		return renderer.TierRule{Action: action, Policy: "test-" + action.String() + "-" + p.name, Match: renderer.Rule{
			SrcNetwork: renderer.HostNetwork(p.ip), SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}}
	}
	// denied is what the renderer counts for a policy of a tier and
	// direction.
	denied := func(tier, policy string, d renderer.Direction) uint64 {
		t.Helper()
		ds, err := e.r.Denied(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, x := range ds {
			if x.Tier == tier && x.Policy == policy && x.Direction == d {
				n += x.Packets
			}
		}
		return n
	}
	if err := e.r.Render(e.ctx, renderer.Txn{Resync: true, Pods: []renderer.PodRules{unrestricted(a), unrestricted(b), unrestricted(s)}}); err != nil {
		t.Fatal(err)
	}
	e.reaches(a, s)
	e.reaches(b, s)

	t.Run("Admin Pass to a pod a NetworkPolicy isolates: refused", func(t *testing.T) {
		// s admits TCP from a and b by NetworkPolicy; Admin passes a and
		// denies b.
		pr := admits(s, a, b)
		pr.NetworkPolicies[renderer.Ingress] = []string{"ns/s-admits"}
		pr.Admin[renderer.Ingress] = []renderer.TierRule{from(a, renderer.TierPass), from(b, renderer.TierDeny)}
		e.render(pr)
		if !e.r.ordered {
			t.Fatal("the renderer did not switch to the ordered tables")
		}
		e.reaches(a, s) // Pass: the NetworkPolicy permits a
		e.refused(b, s) // Admin Deny beats the NetworkPolicy's permit
		if n := denied("admin", "test-deny-b", renderer.Ingress); n == 0 {
			t.Error("no packet counted for the Admin Deny that refused b")
		}
		pr = admits(s, b)
		pr.NetworkPolicies[renderer.Ingress] = []string{"ns/s-admits"}
		pr.Admin[renderer.Ingress] = []renderer.TierRule{from(a, renderer.TierPass)}
		e.render(pr)
		e.refused(a, s) // Pass: the NetworkPolicy isolates s and permits only b
		e.reaches(b, s)
		if n := denied("networkpolicy", "ns/s-admits", renderer.Ingress); n == 0 {
			t.Error("no packet counted for the NetworkPolicy that refused a after the Pass")
		}
		if n := denied("admin", "test-pass-a", renderer.Ingress); n != 0 {
			t.Errorf("%d packets counted for the Admin Pass, which denies nothing", n)
		}
	})
	t.Run("Admin Pass to a pod no NetworkPolicy isolates: admitted by the Baseline default", func(t *testing.T) {
		pr := unrestricted(s)
		pr.Admin[renderer.Ingress] = []renderer.TierRule{from(a, renderer.TierPass), {Action: renderer.TierDeny, Match: renderer.Rule{SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}}}
		e.render(pr)
		e.reaches(a, s)
		e.refused(b, s)
		// With a Baseline Deny of a, the Pass reaches it.
		pr.Baseline[renderer.Ingress] = []renderer.TierRule{from(a, renderer.TierDeny)}
		e.render(pr)
		e.refused(a, s)
		e.refused(b, s)
		if n := denied("baseline", "test-deny-a", renderer.Ingress); n == 0 {
			t.Error("no packet counted for the Baseline Deny that refused a")
		}
	})
	t.Run("Admin Deny on a pod's egress", func(t *testing.T) {
		pa := unrestricted(a)
		pa.Admin[renderer.Egress] = []renderer.TierRule{{Action: renderer.TierDeny, Policy: "a-not-to-s", Match: renderer.Rule{
			DstNetwork: renderer.HostNetwork(s.ip), SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}}}
		e.render(pa, unrestricted(s))
		e.refused(a, s)
		e.reaches(a, b)
		e.reaches(b, s)
		e.reaches(s, a)
		if g := e.r.cache.GlobalTable(); len(g.Rules) == 0 {
			t.Fatal("a's egress tier is not in the global table")
		}
		if n := denied("admin", "a-not-to-s", renderer.Egress); n == 0 {
			t.Error("no packet counted for the egress Admin Deny")
		}
		if n := e.metricSum("vcoil_policy_cluster_network_policy_denied_packets_total", "policy", "a-not-to-s"); n == 0 {
			t.Error("vcoil_policy_cluster_network_policy_denied_packets_total{policy=a-not-to-s} is 0")
		}
	})
	t.Run("without tiers, back to the NetworkPolicy tables", func(t *testing.T) {
		e.render(unrestricted(a), admits(s, b))
		if e.r.ordered {
			t.Fatal("the renderer still uses the ordered tables")
		}
		e.reaches(b, s)
		e.refused(a, s)
		e.reaches(a, b)
	})
}
