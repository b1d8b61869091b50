package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// TestNetworkPoliciesHoldFromTheFirstPacket runs vcoild with its policy
// stack and no kubelet: no pod ever gets status.podIPs, so the policies can
// only work with the addresses vcoild's CNI ADD gave the policy cache, and
// a pod's rules are in before ADD returns (the first connection attempt is
// already filtered, with no waiting).
func TestNetworkPoliciesHoldFromTheFirstPacket(t *testing.T) {
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 31)
	policiesHold(t, n, "pol", false)
}

// TestVPPNetworkPoliciesHoldFromTheFirstPacket is the same on the VPP
// dataplane, where the ACL renderer enforces the policies.
func TestVPPNetworkPoliciesHoldFromTheFirstPacket(t *testing.T) {
	netnstest.RequireRoot(t)
	vpptest.Binary(t) // skips without a VPP
	defaultPool(t)
	f := newFabric(t)
	n, _ := newVPPNode(t, f, 43, "")
	policiesHold(t, n, "polvpp", true)
}

// policiesHold runs the policy checks on node n in namespace nsName; with
// onVPP, those that read the nftables table are left out.
func policiesHold(t *testing.T, n *node, nsName string, onVPP bool) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsName, Name: "server"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "server"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Port: ptr.To(intstr.FromString("web"))}},
			}},
		},
	}
	if err := env.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	mk := func(name, role string) *pod {
		p := newPod(t, name)
		p.namespace, p.labels = nsName, map[string]string{"role": role}
		return p
	}
	client1, other, server := mk("client", "client"), mk("other", "other"), mk("server", "server")
	server.ports = []corev1.ContainerPort{{Name: "web", ContainerPort: 8080}}
	for _, p := range []*pod{client1, other, server} {
		n.mustAdd(p)
	}
	srv := server.ipv4()
	serve(t, server.ns, hostPort(srv, 8080))
	serve(t, server.ns, hostPort(srv, 9090))

	// Immediately after ADD: the allowed flow passes, the others are
	// dropped.
	if err := talk(client1.ns, hostPort(srv, 8080)); err != nil {
		t.Fatalf("the client to the server's named port: %v", err)
	}
	if err := talk(other.ns, hostPort(srv, 8080)); err == nil {
		t.Fatal("a pod that no policy admits reached the isolated server")
	}
	if err := talk(client1.ns, hostPort(srv, 9090)); err == nil {
		t.Fatal("the client reached a port the policy does not open")
	}
	if err := talk(server.ns, hostPort(client1.ipv4(), 8080)); err != nil && !strings.Contains(err.Error(), "refused") {
		t.Fatalf("the server's egress is not isolated, its connection must reach the client (refused): %v", err)
	}

	// A label change makes "other" a client: an element change.
	p := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: nsName, Name: "other"}, p); err != nil {
		t.Fatal(err)
	}
	p.Labels["role"] = "client"
	if err := env.Client.Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error { return talk(other.ns, hostPort(srv, 8080)) })

	if onVPP {
		// A restarted vcoild resyncs the ACLs; the rules hold.
		n.kill()
		n.start()
		if err := talk(client1.ns, hostPort(srv, 9090)); err == nil {
			t.Fatal("after a restart, the client reached a port the policy does not open")
		}
		if err := talk(other.ns, hostPort(srv, 8080)); err != nil {
			t.Fatalf("after a restart: %v", err)
		}
		return
	}
	// The table holds one group per distinct rule list, and counts drops.
	table := n.ns.Exec("nft", "list", "table", "inet", "vcoil-policy")
	m := regexp.MustCompile(regexp.QuoteMeta(srv.String()) + ` : jump (g[0-9]+)`).FindStringSubmatch(table)
	if m == nil {
		t.Fatalf("the server's address is not dispatched to a group:\n%s", table)
	}
	group := m[1]
	if got := n.metric(`vcoil_policy_nftables_isolated_addresses{direction="ingress"}`); got != "2" {
		t.Fatalf("isolated ingress addresses: %q, want 2 (the server's two)", got)
	}
	if m := n.metric(`vcoil_policy_denied_packets_total{direction="ingress",group="` + group + `"}`); m == "" || m == "0" {
		t.Fatalf("the denied packets counter of %s is %q", group, m)
	}

	// A restarted vcoild adopts the table (the chains keep their handles:
	// nothing was rewritten) and the rules hold throughout.
	before := n.ns.Exec("nft", "-a", "list", "chain", "inet", "vcoil-policy", group)
	n.kill()
	n.start()
	if after := n.ns.Exec("nft", "-a", "list", "chain", "inet", "vcoil-policy", group); after != before {
		t.Fatalf("a restart rewrote the group chain:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if err := talk(client1.ns, hostPort(srv, 9090)); err == nil {
		t.Fatal("after a restart, the client reached a port the policy does not open")
	}
	if err := talk(other.ns, hostPort(srv, 8080)); err != nil {
		t.Fatalf("after a restart: %v", err)
	}

	// DEL takes the server's address out of the table before it can be
	// given to another pod.
	if err := n.del(server); err != nil {
		t.Fatal(err)
	}
	if table := n.ns.Exec("nft", "list", "table", "inet", "vcoil-policy"); strings.Contains(table, srv.String()) {
		t.Fatalf("the released address %s is still in the table:\n%s", srv, table)
	}

	// A vcoild told to leave policies to another agent removes the table.
	n.kill()
	n.args = append(n.args, "--network-policies=false")
	n.start()
	if out := n.ns.Exec("nft", "list", "tables"); strings.Contains(out, "vcoil-policy") {
		t.Fatalf("--network-policies=false left the table:\n%s", out)
	}
}
