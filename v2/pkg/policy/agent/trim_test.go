package agent

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTrimPodKeepsWhatPoliciesAndEgressRead: the shared Pod cache keeps the
// labels, the egress.vcoil.io annotations and the two a CNI ADD reads
// (allowed source prefixes, checksum choice), and drops other annotations.
func TestTrimPodKeepsWhatPoliciesAndEgressRead(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "p", Namespace: "ns", Labels: map[string]string{"app": "web"},
		Annotations: map[string]string{
			"egress.vcoil.io/internet":                         "nat",
			"kubectl.kubernetes.io/last-applied-configuration": "{...}",
			"vcoil.io/allowed-source-prefixes":                 "198.51.100.0/24",
			"vcoil.io/checksum-offload":                        "off",
		},
	}}
	got, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*corev1.Pod)
	want := map[string]string{"egress.vcoil.io/internet": "nat", "vcoil.io/allowed-source-prefixes": "198.51.100.0/24", "vcoil.io/checksum-offload": "off"}
	if !maps.Equal(p.Annotations, want) {
		t.Fatalf("annotations %v, want %v", p.Annotations, want)
	}
	if !maps.Equal(p.Labels, pod.Labels) {
		t.Fatalf("labels %v, want %v", p.Labels, pod.Labels)
	}
	pod.Annotations = map[string]string{"other": "x"}
	got, _ = TrimPod(pod)
	if a := got.(*corev1.Pod).Annotations; a != nil {
		t.Fatalf("annotations %v, want none", a)
	}
}
