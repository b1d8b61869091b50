package bench

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The benchmark's objects and addresses. Nothing else in the lab uses 10/8:
// the Services get ClusterIPs of their own ServiceCIDR (the lab's /20 holds
// about 4,000), and their endpoints addresses nobody has, so that an
// nftables notice naming one of them can only be the proxy writing it.
const (
	// Namespace holds the benchmark's Services and EndpointSlices.
	Namespace = "vcoil-bench"
	// ManagedBy marks the EndpointSlices the benchmark writes itself
	// (endpointslice.kubernetes.io/managed-by), so that Kubernetes' own
	// controllers leave them alone.
	ManagedBy = "bench.vcoil.io"
	// ServiceCIDRName is the benchmark's extra ServiceCIDR.
	ServiceCIDRName = "vcoil-bench"
	// EndpointsPerService is the size of every benchmark Service.
	EndpointsPerService = 10
	// servicePort is the Services' port, endpointPort their endpoints'.
	servicePort  = 80
	endpointPort = 8080
)

var (
	// ServiceCIDR holds the benchmark's ClusterIPs, given explicitly.
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/16")
	// EndpointRange holds the endpoints of the Services as created
	// (10.200.0.0/14) and the addresses the endpoint changes bring
	// (10.204.0.0/14): 2^18 addresses each.
	EndpointRange = netip.MustParsePrefix("10.200.0.0/13")
	changeBase    = netip.MustParseAddr("10.204.0.0")
	endpointBase  = netip.MustParseAddr("10.200.0.0")
	// MaxServices keeps ClusterIPs inside ServiceCIDR and endpoint
	// addresses inside their half of EndpointRange.
	MaxServices = 20000
	// MaxChanges keeps the changes' addresses inside their half.
	MaxChanges = 1 << 18
)

// addrPlus returns base + n (IPv4).
func addrPlus(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// ServiceName is the name of the i-th Service (i from 0).
func ServiceName(i int) string { return fmt.Sprintf("b-%05d", i) }

// ClusterIP of the i-th Service: past the network address, which the
// allocator keeps for itself.
func ClusterIP(i int) netip.Addr { return addrPlus(ServiceCIDR.Addr(), 16+i) }

// EndpointAddr is the j-th endpoint of the i-th Service as created.
func EndpointAddr(i, j int) netip.Addr {
	return addrPlus(endpointBase, i*EndpointsPerService+j+1)
}

// ChangeAddr is the address the k-th endpoint change brings, never one
// that was in the kernel before.
func ChangeAddr(k int) netip.Addr { return addrPlus(changeBase, k+1) }

// NewServiceCIDR is the benchmark's ServiceCIDR.
func NewServiceCIDR() *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceCIDRName},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{ServiceCIDR.String()}},
	}
}

// NewService is the i-th Service: a ClusterIP without selector, whose
// endpoints the benchmark writes.
func NewService(i int) *corev1.Service {
	ip := ClusterIP(i).String()
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: ServiceName(i)},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  ip,
			ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: servicePort, TargetPort: intstr.FromInt32(endpointPort),
			}},
		},
	}
}

// NewEndpointSlice is the i-th Service's EndpointSlice with its
// EndpointsPerService ready endpoints.
func NewEndpointSlice(i int) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: Namespace, Name: ServiceName(i),
			Labels: map[string]string{
				discoveryv1.LabelServiceName: ServiceName(i),
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](endpointPort),
		}},
	}
	for j := range EndpointsPerService {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{EndpointAddr(i, j).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return s
}
