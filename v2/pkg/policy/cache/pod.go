package cache

import (
	"iter"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// PodView is a pod as the cache holds it, read-only. It stands for one of
// two objects:
//
//   - a Pod (SetPod): this node's pods, from the pod informer, which the
//     agent and the PodEndpoint publisher need whole;
//   - the PodEndpoint that another node published for its pod
//     (SetEndpoint): the pods of the other nodes, which are only policy
//     peers.
//
// Why not one type for both: making a corev1.Pod of every peer's endpoint
// (as vcoild did) costs 1.2 KB to 1.7 KB per pod of the cluster for data
// the informer already holds. A PodView points at the informer's object
// itself, so a peer pod is held once, by the informer; the processor
// derives its compact record (podInfo) from the view and keeps that.
//
// Why two pointers rather than an interface or a copied record: a view is
// made without allocating (the cache stores it as it returns it), it is
// comparable (==: the same object; the processor memoizes by it), and it
// copies nothing. The objects are shared with the informers and must not
// be modified.
//
// Its accessors give the fields as the objects hold them; what policies
// make of them (which addresses count, which ports are valid) is the
// processor's. The zero PodView stands for no pod (IsZero).
type PodView struct {
	pod *corev1.Pod
	ep  *vcoilv2.PodEndpoint
}

// ViewPod is the view of a Pod (nil: the zero view).
func ViewPod(pod *corev1.Pod) PodView { return PodView{pod: pod} }

// ViewEndpoint is the view of the pod an endpoint stands for (nil: the
// zero view).
func ViewEndpoint(ep *vcoilv2.PodEndpoint) PodView { return PodView{ep: ep} }

// IsZero reports whether v stands for no pod.
func (v PodView) IsZero() bool { return v.pod == nil && v.ep == nil }

// Object is the Pod v stands for, or nil when v is an endpoint's (or zero).
func (v PodView) Object() *corev1.Pod { return v.pod }

// Endpoint is the PodEndpoint v stands for, or nil when v is a Pod's (or
// zero).
func (v PodView) Endpoint() *vcoilv2.PodEndpoint { return v.ep }

// Namespace is the pod's namespace.
func (v PodView) Namespace() string {
	switch {
	case v.pod != nil:
		return v.pod.Namespace
	case v.ep != nil:
		return v.ep.Namespace
	}
	return ""
}

// Name is the pod's name.
func (v PodView) Name() string {
	switch {
	case v.pod != nil:
		return v.pod.Name
	case v.ep != nil:
		return v.ep.Name
	}
	return ""
}

// UID is the pod's UID (not the endpoint's).
func (v PodView) UID() types.UID {
	switch {
	case v.pod != nil:
		return v.pod.UID
	case v.ep != nil:
		return v.ep.Spec.PodUID
	}
	return ""
}

// Labels are the pod's labels (not the endpoint's own).
func (v PodView) Labels() map[string]string {
	switch {
	case v.pod != nil:
		return v.pod.Labels
	case v.ep != nil:
		return v.ep.Spec.PodLabels
	}
	return nil
}

// NodeName is the node the pod runs on.
func (v PodView) NodeName() string {
	switch {
	case v.pod != nil:
		return v.pod.Spec.NodeName
	case v.ep != nil:
		return v.ep.Spec.NodeName
	}
	return ""
}

// HostNetworkOrTerminated reports whether the pod is in the host's network
// namespace or has terminated (Succeeded or Failed). Never for an
// endpoint: none is published for such a pod (podendpoint.For).
func (v PodView) HostNetworkOrTerminated() bool {
	p := v.pod
	return p != nil && (p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed)
}

// PodIPs are the pod's addresses as listed: a Pod's status.podIPs, an
// endpoint's addresses. Unparsed, maybe invalid or of the same family.
func (v PodView) PodIPs() iter.Seq[string] {
	return func(yield func(string) bool) {
		switch {
		case v.pod != nil:
			for _, ip := range v.pod.Status.PodIPs {
				if !yield(ip.IP) {
					return
				}
			}
		case v.ep != nil:
			for _, a := range v.ep.Spec.Addresses {
				if !yield(a) {
					return
				}
			}
		}
	}
}

// PodIP is a Pod's status.podIP, which an older status may fill alone; ""
// for an endpoint (PodIPs lists all its addresses).
func (v PodView) PodIP() string {
	if v.pod != nil {
		return v.pod.Status.PodIP
	}
	return ""
}

// NamedPorts are the pod's container ports that have a name, in order: a
// Pod's of its containers, then of its sidecars (init containers that
// restart: the others have exited when the pod serves); an endpoint's as
// published (the same, filtered). Not validated otherwise: a Pod's
// protocol may be empty (TCP) or unknown, its number out of range.
func (v PodView) NamedPorts() iter.Seq[vcoilv2.NamedPort] {
	return func(yield func(vcoilv2.NamedPort) bool) {
		switch {
		case v.pod != nil:
			for _, c := range v.pod.Spec.Containers {
				for _, p := range c.Ports {
					if p.Name != "" && !yield(vcoilv2.NamedPort{Name: p.Name, Protocol: p.Protocol, Port: p.ContainerPort}) {
						return
					}
				}
			}
			for _, c := range v.pod.Spec.InitContainers {
				if c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways {
					continue
				}
				for _, p := range c.Ports {
					if p.Name != "" && !yield(vcoilv2.NamedPort{Name: p.Name, Protocol: p.Protocol, Port: p.ContainerPort}) {
						return
					}
				}
			}
		case v.ep != nil:
			for _, p := range v.ep.Spec.NamedPorts {
				if !yield(p) {
					return
				}
			}
		}
	}
}

// SourcePrefixes are the prefixes the pod may send from beside its
// addresses, unparsed and maybe padded with spaces: the comma-separated
// entries of a Pod's allowed-source-prefixes annotation, an endpoint's
// sourcePrefixes (the same, trimmed).
func (v PodView) SourcePrefixes() iter.Seq[string] {
	return func(yield func(string) bool) {
		switch {
		case v.pod != nil:
			a, ok := v.pod.Annotations[vcoilv2.AnnotationAllowedSourcePrefixes]
			if !ok {
				return
			}
			for s := range strings.SplitSeq(a, ",") {
				if !yield(s) {
					return
				}
			}
		case v.ep != nil:
			for _, s := range v.ep.Spec.SourcePrefixes {
				if !yield(s) {
					return
				}
			}
		}
	}
}

// String is namespace/name, for logs and tests.
func (v PodView) String() string {
	if v.IsZero() {
		return "-"
	}
	return v.Namespace() + "/" + v.Name()
}
