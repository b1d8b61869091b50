package suite

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The failover row deletes the lease holder's pod, found from the holder
// identity alone; it needs no cluster.
func TestLeaseHolderPods(t *testing.T) {
	node := func(name, host string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: host}}}}
	}
	pod := func(name, node string, hostNetwork bool) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node, HostNetwork: hostNetwork}}
	}
	nodes := []corev1.Node{node("node1", "node1"), node("node2", "host-b")}
	for _, tc := range []struct {
		name, holder string
		pods         []corev1.Pod
		want         []string
	}{
		{"on the host network, the second replica leads", "node1_8c2f",
			[]corev1.Pod{pod("ctl-a", "node2", true), pod("ctl-b", "node1", true)}, []string{"ctl-b"}},
		{"a node whose host name is not its name", "host-b_8c2f",
			[]corev1.Pod{pod("ctl-a", "node1", true), pod("ctl-b", "node2", true)}, []string{"ctl-b"}},
		{"pod network: the pod's own name", "ctl-b_8c2f",
			[]corev1.Pod{pod("ctl-a", "node1", false), pod("ctl-b", "node1", false)}, []string{"ctl-b"}},
		{"replicas on one node", "node1_8c2f",
			[]corev1.Pod{pod("ctl-a", "node1", true), pod("ctl-b", "node1", true)}, []string{"ctl-a", "ctl-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := leaseHolderPods(tc.holder, tc.pods, nodes)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range got {
				names = append(names, p.Name)
			}
			if !slices.Equal(names, tc.want) {
				t.Errorf("got %v, want %v", names, tc.want)
			}
		})
	}
	for _, holder := range []string{"", "no-uuid", "node3_8c2f"} {
		if got, err := leaseHolderPods(holder, []corev1.Pod{pod("ctl-a", "node1", true)}, nodes); err == nil {
			t.Errorf("holder %q: got %v, want an error", holder, got)
		}
	}
}
