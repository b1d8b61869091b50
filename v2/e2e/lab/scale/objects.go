package scale

import (
	"fmt"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/podendpoint"
)

// The simulated cluster's objects and addresses. Every object carries the
// label BenchLabel, by which cleanup finds it.
const (
	BenchLabel = "scale.vcoil.io/bench"
	// IPAnnotation carries a simulated pod's address, which kwok's stage
	// (kwok-stages.yaml) writes into its status as the kubelet would
	// write the address vcoild gave.
	IPAnnotation = "scale.vcoil.io/ip"
	// ProbeLabel on a simulated pod makes it a peer of ProbePolicy, which
	// isolates the real pod on the measured node.
	ProbeLabel = "scale.vcoil.io/probe"
	// Pool is the simulated nodes' AddressPool; its blocks are asked for
	// with BlockRequests as vcoild asks for them.
	Pool = "vcoil-scale"
	// RealNamespace holds the real pod on the measured node and the
	// policy that isolates it.
	RealNamespace = "vcoil-scale-real"
	ProbePolicy   = "probe"
	// ServiceCIDRName is the Services' extra ServiceCIDR.
	ServiceCIDRName = "vcoil-scale"
	// KwokAnnotation, KwokTaint: the simulated nodes, managed by kwok and
	// kept free of real pods.
	KwokAnnotation = "kwok.x-k8s.io/node"
	managedBy      = "scale.vcoil.io"
	// EndpointsPerService is the size of every Service.
	EndpointsPerService = 10
	// blockBits is the pool's block size (32 addresses).
	blockBits = 5
	// apps is the number of distinct app labels per namespace.
	apps = 50
)

var (
	// PoolSubnet holds the simulated pods (8,192 blocks of 32). It lies
	// inside 10.200.0.0/13, the range that the services benchmark's
	// kernel monitor recognises; the changes' fresh endpoint addresses
	// come from ChangeBase, in the other half.
	PoolSubnet = netip.MustParsePrefix("10.200.0.0/14")
	ChangeBase = netip.MustParseAddr("10.204.0.0")
	// ServiceCIDR holds the Services' ClusterIPs (given explicitly).
	ServiceCIDR = netip.MustParsePrefix("10.97.0.0/16")
	// NodeNet holds the simulated nodes' InternalIPs. The real nodes get a
	// link route to it for the benchmark, so that vcoild's direct routes
	// to the simulated nodes' blocks have on-link next hops (no packet is
	// sent to them).
	NodeNet = netip.MustParsePrefix("198.18.64.0/18")
	// MaxNodes keeps the nodes' addresses inside NodeNet.
	MaxNodes = 16000
	// MaxServices keeps ClusterIPs inside ServiceCIDR.
	MaxServices = 60000
)

// addrPlus returns base + n (IPv4).
func addrPlus(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func benchLabels(extra map[string]string) map[string]string {
	l := map[string]string{BenchLabel: "1"}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

// NodeName is the i-th simulated node's name.
func NodeName(i int) string { return fmt.Sprintf("scale-%04d", i) }

// NodeIP is the i-th simulated node's InternalIP.
func NodeIP(i int) netip.Addr { return addrPlus(NodeNet.Addr(), i+1) }

// Namespace is the i-th namespace of simulated workloads.
func Namespace(i int) string { return fmt.Sprintf("vcoil-scale-%03d", i) }

// NewNode is a simulated node: annotated for kwok, tainted so that no real
// workload is scheduled there (DaemonSets that tolerate everything, such
// as vcoild's, still get a pod, which kwok runs on paper, as on a real
// cluster), with its InternalIP set at creation.
func NewNode(i int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NodeName(i),
			Labels:      benchLabels(map[string]string{"type": "kwok", corev1.LabelHostname: NodeName(i)}),
			Annotations: map[string]string{KwokAnnotation: "fake"},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: KwokAnnotation, Value: "fake", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: NodeIP(i).String()},
			{Type: corev1.NodeHostName, Address: NodeName(i)},
		}},
	}
}

// NewBlockRequest asks for a block of Pool for a node, as vcoild does:
// owned by its Node, labelled with node and pool.
func NewBlockRequest(node string, nodeUID types.UID, seq int) *vcoilv2.BlockRequest {
	return &vcoilv2.BlockRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("%s-%s-%d", node, Pool, seq),
			Labels: benchLabels(map[string]string{vcoilv2.LabelNode: node, vcoilv2.LabelPool: Pool}),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node, UID: nodeUID,
			}},
		},
		Spec: vcoilv2.BlockRequestSpec{NodeName: node, PoolName: Pool},
	}
}

// NewPool is the simulated nodes' AddressPool.
func NewPool() *vcoilv2.AddressPool {
	return &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: Pool, Labels: benchLabels(nil)},
		Spec: vcoilv2.AddressPoolSpec{
			BlockSizeBits: blockBits,
			Subnets:       []vcoilv2.SubnetSet{{IPv4: ptr.To(PoolSubnet.String())}},
		},
	}
}

// PodSpec describes a simulated pod.
type PodSpec struct {
	Namespace, Name, Node string
	App                   int
	IP                    netip.Addr
	// Client pods are never endpoints: only a probe label brings their
	// address into the measured node's kernel.
	Client bool
}

// Object is the pod as created: bound to its node, its address in the
// annotation.
func (p PodSpec) Object() *corev1.Pod {
	role := "backend"
	if p.Client {
		role = "client"
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   p.Namespace,
			Name:        p.Name,
			Labels:      benchLabels(map[string]string{"app": "a" + strconv.Itoa(p.App), "role": role}),
			Annotations: map[string]string{IPAnnotation: p.IP.String()},
		},
		Spec: corev1.PodSpec{
			NodeName:    p.Node,
			Containers:  []corev1.Container{{Name: "c", Image: "registry.invalid/scale:sim"}},
			Tolerations: []corev1.Toleration{{Key: KwokAnnotation, Operator: corev1.TolerationOpExists}},
		},
	}
}

// ServiceName is the i-th Service's name.
func ServiceName(i int) string { return fmt.Sprintf("s-%05d", i) }

// NewService is the i-th Service: without selector, its ClusterIP given.
func NewService(ns string, i int) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceName(i), Labels: benchLabels(nil)},
		Spec: corev1.ServiceSpec{
			ClusterIP: addrPlus(ServiceCIDR.Addr(), i+1).String(),
			Ports:     []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

// NewEndpointSlice is the Service's slice, owned by the benchmark
// (managed-by), with the given addresses.
func NewEndpointSlice(ns string, i int, addrs []netip.Addr) *discoveryv1.EndpointSlice {
	eps := make([]discoveryv1.Endpoint, len(addrs))
	for k, a := range addrs {
		eps[k] = discoveryv1.Endpoint{Addresses: []string{a.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ServiceName(i), Labels: benchLabels(map[string]string{
			discoveryv1.LabelServiceName: ServiceName(i),
			discoveryv1.LabelManagedBy:   managedBy,
		})},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
}

// NewPolicy is the i-th NetworkPolicy of a namespace: pods of one app
// accept TCP 8080 from the next app's pods.
func NewPolicy(ns string, i int) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("np-%05d", i), Labels: benchLabels(nil)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "a" + strconv.Itoa(i%apps)}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a" + strconv.Itoa((i+1)%apps)}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(8080))}},
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// NewProbePolicy isolates every pod of RealNamespace and lets in the pods
// of any namespace that carry ProbeLabel: labelling a simulated pod brings
// its address into the measured node's policy sets.
func NewProbePolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: RealNamespace, Name: ProbePolicy, Labels: benchLabels(nil)},
		Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{},
					PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{ProbeLabel: "yes"}},
				}},
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		},
	}
}

// NewRealPod is the real pod on the measured node that ProbePolicy
// isolates (the lab's pause image).
func NewRealPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: RealNamespace, Name: "target", Labels: benchLabels(nil)},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "pause", Image: "vcoil-pause:lab", ImagePullPolicy: corev1.PullNever}},
		},
	}
}

// NewServiceCIDR is the Services' ServiceCIDR.
func NewServiceCIDR() *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: ServiceCIDRName, Labels: benchLabels(nil)},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{ServiceCIDR.String()}},
	}
}

// Endpoint is the PodEndpoint the simulated node's vcoild would publish
// for the pod once it has its address (uid: the created pod's).
func (p PodSpec) Endpoint(uid types.UID) *vcoilv2.PodEndpoint {
	pod := p.Object()
	pod.UID = uid
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: p.IP.String()}}}
	ep := podendpoint.For(pod)
	ep.Labels = benchLabels(ep.Labels)
	return ep
}
