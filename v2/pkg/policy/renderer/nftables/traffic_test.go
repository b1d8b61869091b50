package nftables

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/service"
	svcnft "github.com/vcoil/vcoil/v2/pkg/service/renderer/nftables"
)

// The traffic lab: a node namespace routing for three local pods (a and b
// in namespace ns1, c in ns2) and, over a fabric link, a "remote"
// namespace holding a pod of another node (r, in ns2) and two external
// hosts (x1, x2) as addresses of its loopback. The whole policy stack
// (cache, processor, configurator) feeds the renderer, and the service
// renderer translates a ClusterIP in front of pod b, as in vcoild.
const (
	podIfPrefix = "vcp"
	natLoopback = "10.10.0.254"
	clusterIP   = "10.96.0.10"
	remoteNode  = "198.18.0.2"
)

type trafficLab struct {
	t      *testing.T
	node   *netnstest.NS
	remote *netnstest.NS
	pods   map[string]*netnstest.NS // by name: a, b, c (local)
	addrs  map[string]string        // a, b, c, r, x1, x2
	cache  *pcache.Cache
	svc    svcnft.Renderer
	reg    *prometheus.Registry // the policy renderer's metrics
	r      *Renderer
}

var labPods = []struct {
	name, namespace, app, addr string
}{
	{"a", "ns1", "a", "10.10.0.1"},
	{"b", "ns1", "b", "10.10.0.2"},
	{"c", "ns2", "c", "10.10.0.3"},
}

func newTrafficLab(t *testing.T) *trafficLab {
	netnstest.RequireRoot(t)
	l := &trafficLab{
		t: t, node: netnstest.New(t, "polnode"), remote: netnstest.New(t, "polremote"),
		pods:  map[string]*netnstest.NS{},
		addrs: map[string]string{"r": "10.20.0.1", "x1": "203.0.113.10", "x2": "203.0.113.11"},
	}
	l.node.Sysctl("net.ipv4.ip_forward", "1")
	netnstest.Veth(t, l.node, "fab", l.remote, "fab")
	l.node.AddAddr("fab", "198.18.0.1/24")
	l.remote.AddAddr("fab", remoteNode+"/24")
	l.node.IP("route", "add", "10.20.0.0/24", "via", remoteNode)
	l.node.IP("route", "add", "203.0.113.0/24", "via", remoteNode)
	for _, a := range []string{"10.20.0.1/32", "203.0.113.10/32", "203.0.113.11/32"} {
		l.remote.IP("addr", "add", a, "dev", "lo")
	}
	l.remote.IP("route", "add", "default", "via", "198.18.0.1")
	for _, p := range labPods {
		ns := netnstest.New(t, "pol"+p.name)
		host := podIfPrefix + p.name
		netnstest.Veth(t, l.node, host, ns, "eth0")
		l.node.AddAddr(host, "169.254.1.1/32")
		l.node.IP("route", "add", p.addr+"/32", "dev", host)
		ns.AddAddr("eth0", p.addr+"/32")
		ns.IP("route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
		ns.IP("route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
		l.pods[p.name] = ns
		l.addrs[p.name] = p.addr
	}
	// Servers: every local pod and the remote addresses answer TCP 8080
	// and 9090 and UDP 5353.
	for name, ns := range l.pods {
		l.serve(ns, l.addrs[name])
	}
	for _, n := range []string{"r", "x1", "x2"} {
		l.serve(l.remote, l.addrs[n])
	}

	l.reg = prometheus.NewRegistry()
	r, err := New(Config{Netns: l.node.Path(), PodIfPrefix: podIfPrefix, Registry: l.reg, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	l.r = r
	conf, err := configurator.New(configurator.Config{NATLoopback: []netip.Addr{netip.MustParseAddr(natLoopback)}, NodeAddresses: []netip.Addr{netip.MustParseAddr("198.18.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	conf.Register("nftables", r)
	l.cache = pcache.New()
	l.cache.Watch(processor.New("node1", l.cache, conf, testr.New(t)))
	var pods []*corev1.Pod
	for _, p := range labPods {
		pods = append(pods, pod(p.namespace, p.name, "node1", p.addr, map[string]string{"app": p.app}))
	}
	pods[1].Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}
	pods = append(pods, pod("ns2", "r", "node2", "10.20.0.1", map[string]string{"app": "r"}))
	nss := []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "ns1", Labels: map[string]string{"team": "a"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ns2", Labels: map[string]string{"team": "b"}}},
	}
	if err := l.cache.Replace(t.Context(), pods, nss, nil); err != nil {
		t.Fatal(err)
	}

	// The service renderer, as vcoild runs it beside the policies: a
	// ClusterIP port 80 in front of pod b's 8080.
	l.svc, err = svcnft.New(svcnft.Config{Netns: l.node.Path(), PodIfPrefix: podIfPrefix}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.svc.Close)
	b := service.Endpoint{Addr: netip.MustParseAddr("10.10.0.2"), Port: 8080, NodeName: "node1", Local: true}
	st := &service.State{
		Node: service.Node{Name: "node1", NATLoopback: []netip.Addr{netip.MustParseAddr(natLoopback)}},
		Services: map[service.ID]*service.Service{{Namespace: "ns1", Name: "web"}: {
			ID: service.ID{Namespace: "ns1", Name: "web"}, ClusterIPs: []netip.Addr{netip.MustParseAddr(clusterIP)},
			Ports: []service.Port{{Protocol: service.TCP, Port: 80, Endpoints: []service.Endpoint{b}, Cluster: []service.Endpoint{b}, HasEndpoints: true}},
		}},
	}
	if err := l.svc.Resync(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	return l
}

func pod(namespace, name, node, addr string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: addr, PodIPs: []corev1.PodIP{{IP: addr}}},
	}
}

// serve answers TCP on 8080 and 9090 and UDP on 5353 at addr in ns with
// its address.
func (l *trafficLab) serve(ns *netnstest.NS, addr string) {
	for _, port := range []string{"8080", "9090"} {
		ln := ns.Listen("tcp", net.JoinHostPort(addr, port))
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(addr))
				_ = c.Close()
			}
		}()
	}
	var pc net.PacketConn
	ns.Run(func() error {
		var err error
		pc, err = net.ListenPacket("udp", net.JoinHostPort(addr, "5353"))
		return err
	})
	l.t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(addr), from)
		}
	}()
}

// from returns the namespace of a client: a local pod, the remote
// namespace (for r, x1, x2), or the node.
func (l *trafficLab) from(name string) *netnstest.NS {
	if ns, ok := l.pods[name]; ok {
		return ns
	}
	if name == "node" {
		return l.node
	}
	return l.remote
}

// dial connects from client to target:port over proto ("tcp", "udp") and
// returns the answering address, or an error (a timeout when dropped).
func (l *trafficLab) dial(client, target string, proto string, port int) (string, error) {
	ctx, cancel := context.WithTimeout(l.t.Context(), 700*time.Millisecond)
	defer cancel()
	addr, ok := l.addrs[target]
	if !ok {
		addr = target
	}
	var conn net.Conn
	err := l.from(client).Do(func() error {
		d := net.Dialer{}
		if src, ok := l.addrs[client]; ok && (client == "x1" || client == "x2" || client == "r") {
			if proto == "udp" {
				d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(src)}
			} else {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
			}
		}
		var err error
		conn, err = d.DialContext(ctx, proto, net.JoinHostPort(addr, fmt.Sprint(port)))
		return err
	})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(700 * time.Millisecond))
	if proto == "udp" {
		if _, err := conn.Write([]byte("?")); err != nil {
			return "", err
		}
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return string(buf[:n]), nil
}

// expect checks each flow "client target port" (TCP unless proto says).
func (l *trafficLab) expect(t *testing.T, allowed bool, client, target string, port int, proto ...string) {
	t.Helper()
	p := "tcp"
	if len(proto) > 0 {
		p = proto[0]
	}
	got, err := l.dial(client, target, p, port)
	switch {
	case allowed && err != nil:
		t.Errorf("%s -> %s %s/%d: %v, want allowed", client, target, p, port, err)
	case !allowed && err == nil:
		t.Errorf("%s -> %s %s/%d: answered by %s, want denied", client, target, p, port, got)
	}
}

func (l *trafficLab) setPolicy(t *testing.T, np *networkingv1.NetworkPolicy) {
	t.Helper()
	if err := l.cache.SetPolicy(t.Context(), np); err != nil {
		t.Fatal(err)
	}
}

func (l *trafficLab) deletePolicy(t *testing.T, namespace, name string) {
	t.Helper()
	if err := l.cache.DeletePolicy(t.Context(), namespace, name); err != nil {
		t.Fatal(err)
	}
}

// deniedPackets sums vcoil_policy_denied_packets_total of direction dir,
// as a scrape reads the kernel's counters.
func (l *trafficLab) deniedPackets(t *testing.T, dir string) float64 {
	t.Helper()
	return l.metricSum(t, "vcoil_policy_denied_packets_total", "direction", dir)
}

// metricSum sums the series of metric whose label has value.
func (l *trafficLab) metricSum(t *testing.T, metric, label, value string) float64 {
	t.Helper()
	families, err := l.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range families {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

func policy(namespace, name string, selector map[string]string, ingress []networkingv1.NetworkPolicyIngressRule, egress []networkingv1.NetworkPolicyEgressRule, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			Ingress:     ingress, Egress: egress, PolicyTypes: types,
		},
	}
}

func tcpPort(p intstr.IntOrString) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: &p}
}

func labels(kv ...string) *metav1.LabelSelector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &metav1.LabelSelector{MatchLabels: m}
}

func TestPoliciesFilterRealTrafficForEveryKindOfPeer(t *testing.T) {
	l := newTrafficLab(t)
	ingress := networkingv1.PolicyTypeIngress
	egress := networkingv1.PolicyTypeEgress

	t.Run("without policies everything passes", func(t *testing.T) {
		for _, c := range []string{"a", "c", "r", "x1", "node"} {
			l.expect(t, true, c, "b", 8080)
		}
		l.expect(t, true, "a", "b", 5353, "udp")
	})

	t.Run("default deny ingress isolates b but not from its node", func(t *testing.T) {
		l.setPolicy(t, policy("ns1", "deny", map[string]string{"app": "b"}, nil, nil, ingress))
		for _, c := range []string{"a", "c", "r", "x1"} {
			l.expect(t, false, c, "b", 8080)
		}
		l.expect(t, false, "a", "b", 5353, "udp")
		if n := l.deniedPackets(t, "ingress"); n == 0 {
			t.Error("the denied packets reached no ingress group's counter")
		}
		l.expect(t, true, "node", "b", 8080)
		l.expect(t, true, "b", "a", 8080) // b's egress is not isolated
		l.expect(t, true, "c", "a", 8080)
	})

	t.Run("a pod selector admits a", func(t *testing.T) {
		l.setPolicy(t, policy("ns1", "from-a", map[string]string{"app": "b"},
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: labels("app", "a")}}}}, nil))
		l.expect(t, true, "a", "b", 8080)
		l.expect(t, true, "a", "b", 5353, "udp")
		l.expect(t, false, "c", "b", 8080)
		l.deletePolicy(t, "ns1", "from-a")
		l.expect(t, false, "a", "b", 8080)
	})

	t.Run("a namespace selector admits ns2's pods, local and remote", func(t *testing.T) {
		l.setPolicy(t, policy("ns1", "from-ns2", map[string]string{"app": "b"},
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: labels("team", "b")}}}}, nil))
		l.expect(t, true, "c", "b", 8080)
		l.expect(t, true, "r", "b", 8080)
		l.expect(t, false, "a", "b", 8080)
		l.expect(t, false, "x1", "b", 8080)
		l.deletePolicy(t, "ns1", "from-ns2")
	})

	t.Run("namespace and pod selectors together admit only r", func(t *testing.T) {
		l.setPolicy(t, policy("ns1", "from-r", map[string]string{"app": "b"},
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: labels("team", "b"), PodSelector: labels("app", "r")}}}}, nil))
		l.expect(t, true, "r", "b", 8080)
		l.expect(t, false, "c", "b", 8080)
		l.deletePolicy(t, "ns1", "from-r")
	})

	t.Run("an ipBlock with an exception", func(t *testing.T) {
		l.setPolicy(t, policy("ns1", "from-net", map[string]string{"app": "b"},
			[]networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "203.0.113.0/24", Except: []string{"203.0.113.10/32"}}}}}}, nil))
		l.expect(t, true, "x2", "b", 8080)
		l.expect(t, false, "x1", "b", 8080)
		l.expect(t, false, "r", "b", 8080)
		l.deletePolicy(t, "ns1", "from-net")
	})

	t.Run("a named port and a port range", func(t *testing.T) {
		l.setPolicy(t, policy("ns1", "http", map[string]string{"app": "b"},
			[]networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromString("http"))}}}, nil))
		l.expect(t, true, "c", "b", 8080)
		l.expect(t, false, "c", "b", 9090)
		l.deletePolicy(t, "ns1", "http")
		p := tcpPort(intstr.FromInt32(9000))
		p.EndPort = ptr.To[int32](9100)
		l.setPolicy(t, policy("ns1", "range", map[string]string{"app": "b"},
			[]networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{p}}}, nil))
		l.expect(t, true, "c", "b", 9090)
		l.expect(t, false, "c", "b", 8080)
		l.deletePolicy(t, "ns1", "range")
	})

	t.Run("egress: a may reach r on 8080 only, whatever b admits", func(t *testing.T) {
		l.deletePolicy(t, "ns1", "deny")
		l.setPolicy(t, policy("ns1", "a-out", map[string]string{"app": "a"}, nil,
			[]networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: labels("team", "b"), PodSelector: labels("app", "r")}},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt32(8080))},
			}}, egress))
		l.expect(t, true, "a", "r", 8080)
		l.expect(t, false, "a", "r", 9090)
		l.expect(t, false, "a", "b", 8080)
		l.expect(t, false, "a", "x1", 8080)
		l.expect(t, true, "b", "a", 8080) // a's ingress is open; replies pass
		l.deletePolicy(t, "ns1", "a-out")
	})

	t.Run("a service's backend is judged by its own address and port", func(t *testing.T) {
		// b admits a on 8080, the backend's port: a reaches the
		// ClusterIP's port 80, c does not.
		l.setPolicy(t, policy("ns1", "svc", map[string]string{"app": "b"},
			[]networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: labels("app", "a")}},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt32(8080))},
			}}, nil))
		l.expect(t, true, "a", clusterIP, 80)
		l.expect(t, false, "c", clusterIP, 80)
		// An egress rule of c towards b's port 8080 lets c out, b still
		// refuses it.
		l.setPolicy(t, policy("ns2", "c-out", map[string]string{"app": "c"}, nil,
			[]networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(intstr.FromInt32(8080))}}}, egress))
		l.expect(t, false, "c", clusterIP, 80)
		l.deletePolicy(t, "ns2", "c-out")
	})

	t.Run("a pod reaches itself through its service (hairpin)", func(t *testing.T) {
		// b admits only a, and may only talk to r: its hairpin passes.
		l.setPolicy(t, policy("ns1", "b-out", map[string]string{"app": "b"}, nil,
			[]networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: labels("app", "r"), NamespaceSelector: labels("team", "b")}}}}, egress))
		got, err := l.dial("b", clusterIP, "tcp", 80)
		if err != nil || got != "10.10.0.2" {
			t.Fatalf("b -> its service: %q %v, want b's answer", got, err)
		}
		l.expect(t, false, "b", "a", 8080)
	})
}
