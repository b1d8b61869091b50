package processor

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// podInfo is what policies care about in a pod.
type podInfo struct {
	pod    *corev1.Pod // the object this was derived from
	id     renderer.PodID
	labels map[string]string
	node   string
	// ips has at most one address per family, unmapped; empty for pods that
	// policies ignore (see endpoint).
	ips []netip.Addr
	// ports are the pod's named container ports.
	ports map[string]namedPortValue
	// sources are the prefixes the pod may send from besides ips (its
	// allowed-source-prefixes annotation, which admission checked).
	sources []netip.Prefix
}

type namedPortValue struct {
	protocol renderer.Protocol
	port     uint16
}

// endpoint reports whether policies see the pod: it has an address, is not
// in the host's network namespace (NetworkPolicy does not apply there and
// its address is the node's) and has not terminated (its address may already
// belong to another pod).
func (i *podInfo) endpoint() bool { return i != nil && len(i.ips) > 0 }

func newPodInfo(pod *corev1.Pod) *podInfo {
	i := &podInfo{
		pod:    pod,
		id:     renderer.PodID{Namespace: pod.Namespace, Name: pod.Name},
		labels: pod.Labels,
		node:   pod.Spec.NodeName,
	}
	if pod.Spec.HostNetwork || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return i
	}
	add := func(s string) {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return
		}
		a = a.Unmap()
		for _, have := range i.ips {
			if have.Is4() == a.Is4() {
				return
			}
		}
		i.ips = append(i.ips, a)
	}
	for _, ip := range pod.Status.PodIPs {
		add(ip.IP)
	}
	if len(i.ips) == 0 && pod.Status.PodIP != "" {
		add(pod.Status.PodIP)
	}
	addPorts := func(cs []corev1.Container, sidecarsOnly bool) {
		for _, c := range cs {
			if sidecarsOnly && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				continue
			}
			for _, p := range c.Ports {
				proto, ok := protocolOf(p.Protocol)
				if p.Name == "" || !ok || p.ContainerPort < 1 || p.ContainerPort > 65535 {
					continue
				}
				if i.ports == nil {
					i.ports = make(map[string]namedPortValue)
				}
				if _, dup := i.ports[p.Name]; !dup {
					i.ports[p.Name] = namedPortValue{protocol: proto, port: uint16(p.ContainerPort)}
				}
			}
		}
	}
	addPorts(pod.Spec.Containers, false)
	addPorts(pod.Spec.InitContainers, true)
	i.sources = sourcePrefixes(pod.Annotations[vcoilv2.AnnotationAllowedSourcePrefixes])
	return i
}

// sourcePrefixes reads an allowed-source-prefixes annotation: its valid
// prefixes, masked and unmapped; admission refused the pod with any other.
func sourcePrefixes(v string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			continue
		}
		if a := p.Addr(); a.Is4In6() {
			if p.Bits() < 96 {
				continue
			}
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		out = append(out, p.Masked())
	}
	return out
}

// sameForPolicies reports whether a and b (either may be nil) look the same
// to policies, so that a change between them needs no work.
func sameForPolicies(a, b *podInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.node == b.node && slices.Equal(a.ips, b.ips) && maps.Equal(a.labels, b.labels) &&
		maps.Equal(a.ports, b.ports) && slices.Equal(a.sources, b.sources)
}

func protocolOf(p corev1.Protocol) (renderer.Protocol, bool) {
	switch p {
	case "", corev1.ProtocolTCP:
		return renderer.ProtocolTCP, true
	case corev1.ProtocolUDP:
		return renderer.ProtocolUDP, true
	case corev1.ProtocolSCTP:
		return renderer.ProtocolSCTP, true
	}
	return renderer.ProtocolAny, false
}
