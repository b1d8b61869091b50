package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

const groupDualStack = "Dual-stack Services"

// TestDualStackServices runs Services of both families at once
// (ipFamilyPolicy RequireDualStack and PreferDualStack) in a dual-stack
// cluster: each must answer on its address of either family, from a pod and
// from outside the cluster, with backends on both nodes.
func TestDualStackServices(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	names := []string{
		"the cluster DNS answers A and AAAA for a dual-stack Service, over both of its own addresses",
		"RequireDualStack ClusterIP: a pod reaches it on both ClusterIPs",
		"PreferDualStack NodePort: a pod reaches it on both addresses of the other node",
		"PreferDualStack NodePort: a client outside the cluster reaches it on both addresses of both nodes",
		"RequireDualStack LoadBalancer: an address of each family, reached from outside the cluster on both",
	}
	if !slices.Contains(w.families(), ipv6) || !slices.Contains(w.families(), ipv4) {
		for _, n := range names {
			listed(groupDualStack, n, statusNotApplicable, "the cluster is not dual-stack (its pods or nodes lack an address of a family)")
		}
		return
	}
	if unserved := k.noServicesOf(t, w, ipv6); unserved != "" {
		for _, n := range names {
			listed(groupDualStack, n, statusNotImplemented, unserved)
		}
		return
	}
	by, why := k.serviceProxy(t, w)
	c := ctx(t, 5*time.Minute)
	mk := func(name string, typ corev1.ServiceType, policy corev1.IPFamilyPolicy) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
			Spec: corev1.ServiceSpec{
				Type: typ,
				// a1 on node A and b1 on node B (the matrix's group
				// own-other); a2, on node A, is the client.
				Selector:       map[string]string{"grp-own-other": "yes"},
				IPFamilyPolicy: ptr.To(policy),
				Ports:          []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt(portHTTP)}},
			},
		}
		if err := k.c.Create(c, s); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create service %s: %v", name, err)
		}
		return s
	}
	// The matrix labels the backends; label them here too, for a run of
	// this test alone.
	for _, p := range []*corev1.Pod{w.a1, w.b1} {
		cur := &corev1.Pod{}
		if err := k.c.Get(c, client.ObjectKeyFromObject(p), cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Labels["grp-own-other"] = "yes"
		if err := k.c.Patch(c, cur, patch); err != nil {
			t.Fatal(err)
		}
	}
	cip := mk("ds-cluster", corev1.ServiceTypeClusterIP, corev1.IPFamilyPolicyRequireDualStack)
	np := mk("ds-nodeport", corev1.ServiceTypeNodePort, corev1.IPFamilyPolicyPreferDualStack)
	lb := mk("ds-lb", corev1.ServiceTypeLoadBalancer, corev1.IPFamilyPolicyRequireDualStack)
	poll.Eventually(t, time.Minute, func() error {
		for _, s := range []*corev1.Service{cip, np, lb} {
			if err := k.c.Get(c, client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			if len(s.Spec.ClusterIPs) != 2 {
				return fmt.Errorf("service %s has ClusterIPs %v, want one of each family", s.Name, s.Spec.ClusterIPs)
			}
			if err := k.readyEndpoints(c, s); err != nil {
				return err
			}
		}
		return nil
	})
	row := func(name string, run func(t *testing.T) error) {
		record(t, groupDualStack, name, by, func(t *testing.T) error {
			if err := run(t); err != nil {
				return fmt.Errorf("%w (served by %s: %s)", err, by, why)
			}
			return nil
		})
	}
	httpTo := func(from *corev1.Pod, addr string) error {
		return poll.Until(t.Context(), 15*time.Second, time.Second, func(c context.Context) error {
			_, err := k.exec(c, from, "/agent", "connect", "http", addr, "--timeout", "3s")
			return err
		})
	}
	row(names[0], func(t *testing.T) error {
		dns := &corev1.Service{}
		if err := k.c.Get(c, client.ObjectKey{Namespace: "kube-system", Name: "kube-dns"}, dns); err != nil {
			return fmt.Errorf("the cluster DNS's Service kube-system/kube-dns: %w", err)
		}
		if len(dns.Spec.ClusterIPs) != 2 {
			return fmt.Errorf("the cluster DNS's Service kube-system/kube-dns has ClusterIPs %v, want one of each family", dns.Spec.ClusterIPs)
		}
		name := cip.Name + "." + cip.Namespace + ".svc.cluster.local."
		want := slices.Sorted(slices.Values(cip.Spec.ClusterIPs))
		for _, server := range dns.Spec.ClusterIPs {
			err := poll.Until(t.Context(), 15*time.Second, time.Second, func(c context.Context) error {
				out, err := k.exec(c, w.a2, "/agent", "resolve", name, "--server", hostPortAddr(mustAddr(server), 53))
				if err != nil {
					return err
				}
				if got := strings.Fields(out); !slices.Equal(got, want) {
					return fmt.Errorf("the cluster DNS at %s resolved %s to %v, want %v", server, name, got, want)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	row(names[1], func(t *testing.T) error {
		for _, ip := range cip.Spec.ClusterIPs {
			if err := httpTo(w.a2, hostPortAddr(mustAddr(ip), 80)); err != nil {
				return err
			}
		}
		return nil
	})
	nodePort := int(np.Spec.Ports[0].NodePort)
	row(names[2], func(t *testing.T) error {
		for _, f := range []family{ipv4, ipv6} {
			if err := httpTo(w.a2, hostPortAddr(f.nodeIP(w.nodeB), nodePort)); err != nil {
				return err
			}
		}
		return nil
	})
	if len(k.settings.externalAgent) == 0 || k.settings.external6 == "" {
		for _, n := range names[3:] {
			listed(groupDualStack, n, statusNotApplicable, "no client outside the cluster with both families given (VCOIL_E2E_EXTERNAL_AGENT, VCOIL_E2E_EXTERNAL6)")
		}
		return
	}
	row(names[3], func(t *testing.T) error {
		for _, f := range []family{ipv4, ipv6} {
			for _, n := range []*corev1.Node{w.nodeA, w.nodeB} {
				if err := k.fromOutside(t, "connect", "http", hostPortAddr(f.nodeIP(n), nodePort), "--timeout", "3s"); err != nil {
					return err
				}
			}
		}
		return nil
	})
	row(names[4], func(t *testing.T) error {
		for _, f := range []family{ipv4, ipv6} {
			ips, err := k.waitIngress(t, f, map[string]*corev1.Service{"lb": lb})
			if err != nil {
				return err
			}
			if err := k.announced(t, w, ips["lb"], true, true); err != nil {
				return err
			}
			if err := k.fromOutside(t, "connect", "http", hostPortAddr(ips["lb"], 80), "--timeout", "3s"); err != nil {
				return err
			}
		}
		return nil
	})
}
