package processor

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/podendpoint"
	"github.com/vcoil/vcoil/v2/pkg/policy/cache"
)

// A pod of another node reaches the processor as its PodEndpoint
// (podendpoint.For), which the cache shows as the view of the pod it stands
// for (cache.ViewEndpoint). The processor must read the same
// from it as from the pod itself: labels, node, addresses, named ports and
// source prefixes; and a pod it does not see as an endpoint has none.
// Checked over random pods that mix every field the processor reads.
func TestAPodReadThroughItsEndpointIsTheSamePeer(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 33))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	ports := func(n int) []corev1.ContainerPort {
		var out []corev1.ContainerPort
		for range n {
			out = append(out, corev1.ContainerPort{
				Name:          pick("", "http", "dns", "metrics", "http"),
				Protocol:      corev1.Protocol(pick("", "TCP", "UDP", "SCTP", "QUIC")),
				ContainerPort: int32(pick2(rng, 0, 53, 8080, 70000)),
			})
		}
		return out
	}
	for i := range 4000 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "ns", Name: fmt.Sprint("p", i), UID: types.UID(fmt.Sprint("uid-", i)),
				Labels: map[string]string{"app": pick("web", "db")},
			},
			Spec: corev1.PodSpec{
				NodeName:    pick("node-b", "node-c"),
				HostNetwork: rng.IntN(10) == 0,
				Containers:  []corev1.Container{{Name: "a", Ports: ports(rng.IntN(3))}, {Name: "b", Ports: ports(rng.IntN(2))}},
				InitContainers: []corev1.Container{
					{Name: "sidecar", Ports: ports(rng.IntN(2)), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
					{Name: "init", Ports: ports(rng.IntN(2))},
				},
			},
			Status: corev1.PodStatus{Phase: corev1.PodPhase(pick("Running", "Pending", "Succeeded", "Failed", "Running"))},
		}
		if rng.IntN(3) == 0 {
			pod.Labels = nil
		}
		switch rng.IntN(5) {
		case 0: // no address yet
		case 1:
			pod.Status.PodIP = "10.1.0.7"
		case 2:
			pod.Status.PodIPs = []corev1.PodIP{{IP: "fd00::7"}, {IP: "10.1.0.7"}, {IP: "fd00::8"}}
		case 3:
			pod.Status.PodIPs = []corev1.PodIP{{IP: "bad"}, {IP: "::ffff:10.1.0.8"}}
		default:
			pod.Status.PodIPs = []corev1.PodIP{{IP: "10.1.0.9"}}
		}
		if rng.IntN(4) == 0 {
			pod.Annotations = map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: pick("10.9.0.0/24", " 10.9.0.0/24 , fd00:9::/64", "junk,10.9.1.0/24")}
		}

		direct := newPodInfo(cache.ViewPod(pod))
		ep := podendpoint.For(pod)
		if !direct.endpoint() {
			if ep != nil {
				t.Fatalf("pod %d: the processor sees no endpoint, but one was made: %+v", i, ep.Spec)
			}
			continue
		}
		if ep == nil {
			t.Fatalf("pod %d: the processor sees an endpoint (%v), but none was made", i, direct.ips)
		}
		via := newPodInfo(cache.ViewEndpoint(ep))
		if via.id != direct.id || via.node != direct.node || !maps.Equal(via.labels, direct.labels) ||
			!slices.Equal(via.ips, direct.ips) || !slices.Equal(via.ports, direct.ports) || !slices.Equal(via.sources, direct.sources) {
			t.Fatalf("pod %d read through its endpoint:\n%+v\nwant\n%+v", i, via, direct)
		}
		if via.pod.UID() != pod.UID {
			t.Fatalf("pod %d: UID %q through its endpoint, want %q", i, via.pod.UID(), pod.UID)
		}
	}
}

func pick2(rng *rand.Rand, xs ...int) int { return xs[rng.IntN(len(xs))] }
