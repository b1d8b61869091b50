package processor

import (
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// podInfo is what policies care about in a pod: the compact record the
// processor keeps of each pod of the cluster, derived once from the view
// the cache gives of it (a Pod, or another node's PodEndpoint).
type podInfo struct {
	pod    cache.PodView // the object this was derived from
	id     renderer.PodID
	labels map[string]string
	node   string
	// ips has at most one address per family, unmapped; empty for pods that
	// policies ignore (see endpoint).
	ips []netip.Addr
	// ports are the pod's named container ports, one per name, ordered by
	// name: a slice, not a map, since a pod names few ports and even a
	// small map costs some 250 bytes, for every pod of the cluster that
	// names one.
	ports []podPort
	// sources are the prefixes the pod may send from besides ips (its
	// allowed-source-prefixes annotation, which admission checked).
	sources []netip.Prefix
}

// podPort is a named port of a pod.
type podPort struct {
	name     string
	protocol renderer.Protocol
	port     uint16
}

// port returns the pod's port of that name.
func (i *podInfo) port(name string) (podPort, bool) {
	for _, p := range i.ports {
		if p.name == name {
			return p, true
		}
	}
	return podPort{}, false
}

// endpoint reports whether policies see the pod: it has an address, is not
// in the host's network namespace (NetworkPolicy does not apply there and
// its address is the node's) and has not terminated (its address may already
// belong to another pod).
func (i *podInfo) endpoint() bool { return i != nil && len(i.ips) > 0 }

// newPodInfo reads a pod of either kind by the same rules (a PodEndpoint
// holds what podendpoint.For took from its pod by these rules, so a pod
// reads the same through it): the first valid address of each family of
// its status.podIPs (status.podIP when none), unmapped; none for a pod in
// the host's network or terminated; the valid named ports of its
// containers and sidecars, the first of each name; its valid source
// prefixes.
func newPodInfo(pod cache.PodView) *podInfo {
	i := &podInfo{
		pod:    pod,
		id:     renderer.PodID{Namespace: pod.Namespace(), Name: pod.Name()},
		labels: pod.Labels(),
		node:   pod.NodeName(),
	}
	if pod.HostNetworkOrTerminated() {
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
	for ip := range pod.PodIPs() {
		add(ip)
	}
	if len(i.ips) == 0 && pod.PodIP() != "" {
		add(pod.PodIP())
	}
	for p := range pod.NamedPorts() {
		proto, ok := protocolOf(p.Protocol)
		if p.Name == "" || !ok || p.Port < 1 || p.Port > 65535 {
			continue
		}
		if _, dup := i.port(p.Name); !dup {
			i.ports = append(i.ports, podPort{name: p.Name, protocol: proto, port: uint16(p.Port)})
		}
	}
	slices.SortFunc(i.ports, func(a, b podPort) int { return strings.Compare(a.name, b.name) })
	i.sources = sourcePrefixes(pod.SourcePrefixes())
	return i
}

// sourcePrefixes reads the entries of an allowed-source-prefixes
// annotation: its valid prefixes, masked and unmapped; admission refused
// the pod with any other.
func sourcePrefixes(entries iter.Seq[string]) []netip.Prefix {
	var out []netip.Prefix
	for s := range entries {
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
		slices.Equal(a.ports, b.ports) && slices.Equal(a.sources, b.sources)
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
