package suite

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

const groupPolicy = "NetworkPolicy"

// TestNetworkPolicy runs policies in a namespace of its own: a server on
// node A, a client on each node, and a pod no policy admits on node B.
// Every denied flow is checked as a timeout after the allowed ones pass,
// so that a slow rendering cannot pass for a denial.
func TestNetworkPolicy(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	c := ctx(t, 8*time.Minute)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vcoil-e2e-pol-", Labels: map[string]string{"vcoil-e2e": "policy"}}}
	if err := k.c.Create(c, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.c.Delete(context.Background(), ns) })
	server := k.agentPod(t, ns.Name, "server", w.nodeA.Name, false, nil)
	near := k.agentPod(t, ns.Name, "client-near", w.nodeA.Name, false, nil)
	far := k.agentPod(t, ns.Name, "client-far", w.nodeB.Name, false, nil)
	other := k.agentPod(t, ns.Name, "other", w.nodeB.Name, false, nil)
	for _, p := range []*corev1.Pod{server, near, far, other} {
		k.waitRunning(t, p)
	}
	srvTCP, srvUDP := hostPortAddr(podIP(server), portTCP), hostPortAddr(podIP(server), portUDP)
	svc := k.service(t, ns.Name, "server", map[string]string{"name": "server"}, 80, portTCP, corev1.ServiceTypeClusterIP, false)
	if err := poll.Until(c, time.Minute, pollInterval, func(c context.Context) error { return k.readyEndpoints(c, svc) }); err != nil {
		t.Fatal(err)
	}
	vip := hostPortAddr(mustAddr(svc.Spec.ClusterIP), 80)

	pe := &policyEnv{k: k, t: t, c: c, ns: ns.Name}
	allowed, denied, apply, remove := pe.allowed, pe.denied, pe.apply, pe.remove
	selector := func(name string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchLabels: map[string]string{"name": name}}
	}
	tcp := corev1.ProtocolTCP

	record(t, groupPolicy, "without policies every pod reaches the server", byVcoil, func(t *testing.T) error {
		return all(
			func() error { return allowed(near, "tcp", srvTCP) },
			func() error { return allowed(far, "tcp", srvTCP) },
			func() error { return allowed(other, "udp", srvUDP) },
		)
	})
	record(t, groupPolicy, "default deny: the server is isolated from pods of both nodes", byVcoil, func(t *testing.T) error {
		if err := apply(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "deny"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: selector("server"), PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}); err != nil {
			return err
		}
		return all(
			func() error { return denied(near, "tcp", srvTCP) },
			func() error { return denied(far, "tcp", srvTCP) },
			func() error { return denied(other, "udp", srvUDP) },
			// The server's own egress is not isolated.
			func() error { return allowed(server, "tcp", hostPortAddr(podIP(far), portTCP)) },
		)
	})
	record(t, groupPolicy, "clients admitted by label on TCP, from both nodes; UDP and other pods still denied", byVcoil, func(t *testing.T) error {
		p := intstr.FromInt32(portTCP)
		if err := apply(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "clients"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: selector("server"),
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
						{Key: "name", Operator: metav1.LabelSelectorOpIn, Values: []string{"client-near", "client-far"}}}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p}},
				}}}}); err != nil {
			return err
		}
		return all(
			func() error { return allowed(near, "tcp", srvTCP) },
			func() error { return allowed(far, "tcp", srvTCP) },
			func() error { return denied(far, "udp", srvUDP) },
			func() error { return denied(other, "tcp", srvTCP) },
		)
	})
	record(t, groupPolicy, "through the server's Service: the policy judges the backend's port", byVcoil, func(t *testing.T) error {
		return all(
			func() error { return allowed(far, "tcp", vip) },
			func() error { return denied(other, "tcp", vip) },
		)
	})
	record(t, groupPolicy, "egress: client-near may reach the server only", byVcoil, func(t *testing.T) error {
		if err := apply(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "near-out"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: selector("client-near"),
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To: []networkingv1.NetworkPolicyPeer{{PodSelector: ptr.To(selector("server"))}},
				}}}}); err != nil {
			return err
		}
		return all(
			func() error { return allowed(near, "tcp", srvTCP) },
			func() error { return denied(near, "tcp", hostPortAddr(podIP(far), portTCP)) },
		)
	})
	record(t, groupPolicy, "policies deleted: every flow passes again", byVcoil, func(t *testing.T) error {
		for _, n := range []string{"deny", "clients", "near-out"} {
			if err := remove(n); err != nil {
				return err
			}
		}
		return all(
			func() error { return allowed(other, "tcp", srvTCP) },
			func() error { return allowed(other, "udp", srvUDP) },
			func() error { return allowed(near, "tcp", hostPortAddr(podIP(far), portTCP)) },
		)
	})
}

// policyEnv holds what the policy cases share: their namespace, and the
// checks of flows allowed and denied.
type policyEnv struct {
	k  *cluster
	t  *testing.T
	c  context.Context
	ns string
}

func (e *policyEnv) allowed(from *corev1.Pod, proto, addr string) error {
	if err := e.k.connect(e.t, from, proto, addr); err != nil {
		return fmt.Errorf("%s -> %s %s should pass: %w", from.Name, proto, addr, err)
	}
	return nil
}

// denied waits until a connection times out (the policy may take a moment
// to reach a node), then checks twice more that it does.
func (e *policyEnv) denied(from *corev1.Pod, proto, addr string) error {
	n := 0
	return poll.Until(e.c, 20*time.Second, pollInterval, func(c context.Context) error {
		if _, err := e.k.exec(c, from, "/agent", "connect", proto, addr, "--timeout", "2s"); err == nil {
			n = 0
			return fmt.Errorf("%s -> %s %s passed, should be denied", from.Name, proto, addr)
		}
		if n++; n < 3 {
			return fmt.Errorf("denied %d times", n)
		}
		return nil
	})
}

func (e *policyEnv) apply(np *networkingv1.NetworkPolicy) error {
	np.Namespace = e.ns
	return e.k.c.Create(e.c, np)
}

func (e *policyEnv) remove(name string) error {
	return e.k.c.Delete(e.c, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}})
}

// all runs the checks in turn and stops at the first failure.
func all(checks ...func() error) error {
	for _, f := range checks {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}
