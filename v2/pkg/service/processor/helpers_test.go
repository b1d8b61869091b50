package processor

import (
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// here is the node the table tests build for.
var here = NodeInfo{Name: "node-a", Zone: "zone-a"}

// svcOf is a ClusterIP Service default/web on 10.96.0.10 with port "http"
// TCP 80, changed by opts.
func svcOf(opts ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func nodePort(s *corev1.Service) {
	s.Spec.Type = corev1.ServiceTypeNodePort
	for i := range s.Spec.Ports {
		s.Spec.Ports[i].NodePort = 30000 + int32(i)
	}
}

func eTPLocal(s *corev1.Service) {
	s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
}

func iTPLocal(s *corev1.Service) {
	s.Spec.InternalTrafficPolicy = ptr.To(corev1.ServiceInternalTrafficPolicyLocal)
}

// sliceOf is an EndpointSlice of default/web with port "http" 8080, of the
// family of its first endpoint (IPv4 when empty).
func sliceOf(name string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	at := discoveryv1.AddressTypeIPv4
	if len(eps) > 0 && strings.Contains(eps[0].Addresses[0], ":") {
		at = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: at,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
}

// ep is an endpoint with no conditions set (ready by default) on node.
func ep(addr, node string, opts ...func(*discoveryv1.Endpoint)) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}}
	if node != "" {
		e.NodeName = ptr.To(node)
	}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func notReady(e *discoveryv1.Endpoint) { e.Conditions.Ready = ptr.To(false) }

// terminatingServing is an endpoint of a terminating pod that still serves.
func terminatingServing(e *discoveryv1.Endpoint) {
	e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
}

func zoneHints(zones ...string) func(*discoveryv1.Endpoint) {
	return func(e *discoveryv1.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discoveryv1.EndpointHints{}
		}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
}

func nodeHints(nodes ...string) func(*discoveryv1.Endpoint) {
	return func(e *discoveryv1.Endpoint) {
		if e.Hints == nil {
			e.Hints = &discoveryv1.EndpointHints{}
		}
		for _, n := range nodes {
			e.Hints.ForNodes = append(e.Hints.ForNodes, discoveryv1.ForNode{Name: n})
		}
	}
}

// addrs lists the addresses of eps, space separated.
func addrs(eps []service.Endpoint) string {
	var s []string
	for _, e := range eps {
		s = append(s, e.Addr.String())
	}
	return strings.Join(s, " ")
}

func mustAddrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}
