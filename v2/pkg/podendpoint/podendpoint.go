// Package podendpoint turns a pod into the PodEndpoint that the other
// nodes' NetworkPolicies read.
//
// Every vcoild needs every pod of the cluster as a possible policy peer:
// its labels, addresses, named ports and allowed source prefixes. Watching
// Pods for that costs the apiserver every Pod change times the number of
// nodes, and a Pod changes many more times than these fields (each status
// change of its containers) and is several times their size. So the vcoild
// of each node watches the Pods of its node only and publishes what peers
// need as one PodEndpoint per pod (Publisher); every vcoild watches
// PodEndpoints, and its policy cache keeps the informer's endpoints as the
// other nodes' pods, without making a Pod of them (policy/cache.PodView).
package podendpoint

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// For returns the endpoint that stands for pod, or nil when policies see
// no endpoint in it: no address yet, the host's network namespace (its
// address is the node's), or terminated (its address may already be
// another pod's). It reads what the policy processor reads of a pod.
func For(pod *corev1.Pod) *vcoilv2.PodEndpoint {
	if pod == nil || pod.Spec.HostNetwork || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return nil
	}
	addrs := addresses(pod)
	if len(addrs) == 0 {
		return nil
	}
	ep := &vcoilv2.PodEndpoint{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.Namespace, Name: pod.Name,
			Labels: map[string]string{vcoilv2.LabelNode: pod.Spec.NodeName},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
				// Collected with the pod, also when its node's vcoild is
				// gone; not blocking the pod's deletion (that would need
				// the right to change pods).
				BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: vcoilv2.PodEndpointSpec{
			PodUID: pod.UID, NodeName: pod.Spec.NodeName,
			PodLabels: maps.Clone(pod.Labels), Addresses: addrs,
			SourcePrefixes: sourcePrefixes(pod.Annotations[vcoilv2.AnnotationAllowedSourcePrefixes]),
			NamedPorts:     namedPorts(pod),
		},
	}
	if len(ep.Spec.PodLabels) == 0 {
		ep.Spec.PodLabels = nil
	}
	return ep
}

// Same reports whether an endpoint already says what want says (same pod,
// node, fields and owner), so that it needs no write.
func Same(have, want *vcoilv2.PodEndpoint) bool {
	return have.Spec.PodUID == want.Spec.PodUID &&
		have.Spec.NodeName == want.Spec.NodeName &&
		maps.Equal(have.Spec.PodLabels, want.Spec.PodLabels) &&
		slices.Equal(have.Spec.Addresses, want.Spec.Addresses) &&
		slices.Equal(have.Spec.SourcePrefixes, want.Spec.SourcePrefixes) &&
		slices.Equal(have.Spec.NamedPorts, want.Spec.NamedPorts) &&
		have.Labels[vcoilv2.LabelNode] == want.Labels[vcoilv2.LabelNode] &&
		slices.ContainsFunc(have.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == want.Spec.PodUID })
}

// addresses are the pod's valid addresses, the first of each family, as
// the processor takes them.
func addresses(pod *corev1.Pod) []string {
	var out []netip.Addr
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		a = a.Unmap()
		if !slices.ContainsFunc(out, func(b netip.Addr) bool { return b.Is4() == a.Is4() }) {
			out = append(out, a)
		}
	}
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	if len(out) == 0 && pod.Status.PodIP != "" {
		add(pod.Status.PodIP)
	}
	s := make([]string, len(out))
	for i, a := range out {
		s[i] = a.String()
	}
	return s
}

// sourcePrefixes are the annotation's entries, trimmed: admission checked
// them, and the reader parses them as it parses a pod's.
func sourcePrefixes(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// namedPorts are the named ports of the pod's containers and sidecars
// (restartable init containers), the first of each name, as the
// processor reads them.
func namedPorts(pod *corev1.Pod) []vcoilv2.NamedPort {
	var out []vcoilv2.NamedPort
	add := func(cs []corev1.Container, sidecarsOnly bool) {
		for _, c := range cs {
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				if p.Name == "" || p.ContainerPort < 1 || p.ContainerPort > 65535 {
					continue
				}
				proto := p.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				switch proto {
				case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
				default:
					continue
				}
				if slices.ContainsFunc(out, func(q vcoilv2.NamedPort) bool { return q.Name == p.Name }) {
					continue
				}
				out = append(out, vcoilv2.NamedPort{Name: p.Name, Protocol: proto, Port: p.ContainerPort})
			}
		}
	}
	add(pod.Spec.Containers, false)
	add(pod.Spec.InitContainers, true)
	return out
}
