package processor

import (
	"fmt"
	"math/rand/v2"

	"github.com/go-logr/logr"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vcoil/vcoil/v2/pkg/policy/cache"
)

// A pod's change asks only the policies of its namespace and those that
// cross namespaces (mayReference): every policy that references a pod must
// be among them, for random policies of every peer form and random pods.
func TestEveryPolicyThatReferencesAPodIsAskedOnItsChange(t *testing.T) {
	namespaces := []string{"a", "b", "c"}
	rng := rand.New(rand.NewPCG(7, 33))
	labelsOf := func() map[string]string {
		return map[string]string{"app": fmt.Sprint("x", rng.IntN(3)), "team": fmt.Sprint("t", rng.IntN(2))}
	}
	selector := func() *metav1.LabelSelector {
		if rng.IntN(4) == 0 {
			return &metav1.LabelSelector{}
		}
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint("x", rng.IntN(3))}}
	}
	peer := func() networkingv1.NetworkPolicyPeer {
		switch rng.IntN(4) {
		case 0:
			return networkingv1.NetworkPolicyPeer{PodSelector: selector()}
		case 1:
			return networkingv1.NetworkPolicyPeer{NamespaceSelector: selector()}
		case 2:
			return networkingv1.NetworkPolicyPeer{NamespaceSelector: selector(), PodSelector: selector()}
		default:
			return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: fmt.Sprintf("10.0.%d.0/24", rng.IntN(3))}}
		}
	}
	ports := func() []networkingv1.NetworkPolicyPort {
		switch rng.IntN(3) {
		case 0:
			return nil
		case 1:
			return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(80))}}
		default:
			return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString("http"))}}
		}
	}
	peers := func() []networkingv1.NetworkPolicyPeer {
		var out []networkingv1.NetworkPolicyPeer
		for range rng.IntN(3) { // none: every address
			out = append(out, peer())
		}
		return out
	}

	p := New("node-a", nil, nil, logr.Discard())
	var crossing int
	for i := range 300 {
		np := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[rng.IntN(len(namespaces))], Name: fmt.Sprint("np", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: *selector(),
				Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: peers(), Ports: ports()}},
				Egress:      []networkingv1.NetworkPolicyEgressRule{{To: peers(), Ports: ports()}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			},
		}
		if p.addPolicy(np).crossesNamespaces() {
			crossing++
		}
	}
	if crossing == 0 || crossing == len(p.policies) {
		t.Fatalf("%d of %d policies cross namespaces: the test shows nothing", crossing, len(p.policies))
	}

	var referenced, outside int
	for i := range 300 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[rng.IntN(len(namespaces))], Name: fmt.Sprint("pod", i), Labels: labelsOf()},
			Spec: corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.0.%d.%d", rng.IntN(4), 1+rng.IntN(250))}}},
		}
		x := newPodInfo(cache.ViewPod(pod))
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: pod.Namespace, Labels: labelsOf()}}
		asked := map[*parsedPolicy]int{}
		for pp := range p.mayReference(pod.Namespace) {
			asked[pp]++
		}
		for _, pp := range p.policies {
			if asked[pp] > 1 {
				t.Errorf("policy %s asked %d times about pod %s", pp.id, asked[pp], x.id)
			}
			if !pp.references(x, ns) {
				continue
			}
			referenced++
			if pp.id.Namespace != pod.Namespace {
				outside++
			}
			if asked[pp] == 0 {
				t.Errorf("policy %s references pod %s (labels %v, address %v, namespace labels %v) but is not asked on its change",
					pp.id, x.id, x.labels, x.ips, ns.Labels)
			}
		}
	}
	if referenced == 0 || outside == 0 {
		t.Fatalf("%d references, %d across namespaces: the test shows nothing", referenced, outside)
	}
}
