package suite

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

const groupPolicy6 = "NetworkPolicy (IPv6)"

// TestNetworkPolicyIPv6 runs policies with IPv6 peers in a dual-stack
// cluster: pod selectors that must admit a pod over both families, ipBlocks
// of IPv6 that must admit only IPv6, an IPv6 ClusterIP, and an egress rule
// to the external host's IPv6 address. In a namespace of its own: a server
// on node A, a client on each node.
func TestNetworkPolicyIPv6(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	names := []string{
		"a pod selector admits its pod over IPv6 and IPv4; another pod is denied over both",
		"an IPv6 ipBlock admits its addresses over IPv6 only, less its except",
		"through the server's IPv6 ClusterIP: the policy judges the backend",
		"egress to an IPv6 ipBlock: the external host over IPv6 only, no other pod",
		"policies deleted: every IPv6 flow passes again",
	}
	if !slices.Contains(w.families(), ipv6) {
		for _, n := range names {
			listed(groupPolicy6, n, statusNotApplicable, "the cluster's pods or nodes have no IPv6 addresses")
		}
		return
	}
	c := ctx(t, 8*time.Minute)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vcoil-e2e-pol6-"}}
	if err := k.c.Create(c, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.c.Delete(context.Background(), ns) })
	server := k.agentPod(t, ns.Name, "server", w.nodeA.Name, false, nil)
	near := k.agentPod(t, ns.Name, "client-near", w.nodeA.Name, false, nil)
	far := k.agentPod(t, ns.Name, "client-far", w.nodeB.Name, false, nil)
	for _, p := range []*corev1.Pod{server, near, far} {
		k.waitRunning(t, p)
	}
	at := func(f family, p *corev1.Pod) string { return hostPortAddr(f.podIP(p), portTCP) }
	svc := k.serviceOf(t, &ipv6, ns.Name, "server", map[string]string{"name": "server"}, 80, portTCP, corev1.ServiceTypeClusterIP, false)
	if err := poll.Until(c, time.Minute, pollInterval, func(c context.Context) error { return k.readyEndpoints(c, svc) }); err != nil {
		t.Fatal(err)
	}
	vip := hostPortAddr(mustAddr(svc.Spec.ClusterIP), 80)
	pe := &policyEnv{k: k, t: t, c: c, ns: ns.Name}
	allowed, denied := pe.allowed, pe.denied
	server6, far6, near6 := at(ipv6, server), at(ipv6, far), ipv6.podIP(near)
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(portTCP)
	ingress := func(name string, peer networkingv1.NetworkPolicyPeer) *networkingv1.NetworkPolicy {
		return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"name": "server"}},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{peer},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				}}}}
	}

	record(t, groupPolicy6, names[0], byVcoil, func(t *testing.T) error {
		if err := all(
			func() error { return allowed(far, "tcp", server6) },
			func() error { return allowed(near, "tcp", server6) },
		); err != nil {
			return err
		}
		if err := pe.apply(ingress("by-label", networkingv1.NetworkPolicyPeer{
			PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "client-far"}}})); err != nil {
			return err
		}
		return all(
			func() error { return allowed(far, "tcp", server6) },
			func() error { return allowed(far, "tcp", at(ipv4, server)) },
			func() error { return denied(near, "tcp", server6) },
			func() error { return denied(near, "tcp", at(ipv4, server)) },
		)
	})
	record(t, groupPolicy6, names[1], byVcoil, func(t *testing.T) error {
		if err := pe.remove("by-label"); err != nil {
			return err
		}
		// The pods' /112 (both clients are in it), less the near client.
		cidr := netip.PrefixFrom(ipv6.podIP(far), 112).Masked()
		if err := pe.apply(ingress("by-block", networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{
			CIDR: cidr.String(), Except: []string{netip.PrefixFrom(near6, 128).String()}}})); err != nil {
			return err
		}
		return all(
			func() error { return allowed(far, "tcp", server6) },
			func() error { return denied(near, "tcp", server6) },
			// An IPv6 block says nothing about the pod's IPv4 address.
			func() error { return denied(far, "tcp", at(ipv4, server)) },
		)
	})
	unserved := k.noServicesOf(t, w, ipv6)
	if unserved != "" {
		listed(groupPolicy6, names[2], statusNotImplemented, unserved)
	} else {
		record(t, groupPolicy6, names[2], byVcoil, func(t *testing.T) error {
			return all(
				func() error { return allowed(far, "tcp", vip) },
				func() error { return denied(near, "tcp", vip) },
			)
		})
	}
	if k.settings.external6 == "" {
		listed(groupPolicy6, names[3], statusNotApplicable, "no IPv6 external host given (VCOIL_E2E_EXTERNAL6)")
	} else {
		record(t, groupPolicy6, names[3], byVcoil, func(t *testing.T) error {
			ext6, err := netip.ParseAddrPort(k.settings.external6)
			if err != nil {
				return err
			}
			if err := pe.apply(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "near-out"},
				Spec: networkingv1.NetworkPolicySpec{
					PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"name": "client-near"}},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
					Egress: []networkingv1.NetworkPolicyEgressRule{{
						To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(ext6.Addr(), 128).String()}}},
					}}}}); err != nil {
				return err
			}
			checks := []func() error{
				func() error { return allowed(near, "tcp", k.settings.external6) },
				func() error { return denied(near, "tcp", far6) },
			}
			if k.settings.external != "" {
				checks = append(checks, func() error { return denied(near, "tcp", k.settings.external) })
			}
			return all(checks...)
		})
	}
	record(t, groupPolicy6, names[4], byVcoil, func(t *testing.T) error {
		made := []string{"by-block"}
		if k.settings.external6 != "" {
			made = append(made, "near-out")
		}
		for _, n := range made {
			if err := pe.remove(n); err != nil {
				return err
			}
		}
		checks := []func() error{
			func() error { return allowed(near, "tcp", server6) },
			func() error { return allowed(near, "tcp", far6) },
		}
		if unserved == "" {
			checks = append(checks, func() error { return allowed(near, "tcp", vip) })
		}
		return all(checks...)
	})
}
