package processor

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// TestBuildServed covers which Services vcoil serves at all.
func TestBuildServed(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		// invalid: an error wrapping ErrInvalidService; otherwise served
		// says whether a model comes out.
		invalid, served bool
	}{
		{name: "a ClusterIP service is served", svc: svcOf(), served: true},
		{name: "a headless service is not served", svc: svcOf(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} })},
		{name: "an ExternalName service is not served", svc: svcOf(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "", nil, "example.com"
		})},
		{name: "a service labelled for another proxy is left to it", svc: svcOf(func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other"} })},
		{name: "a service labelled for a proxy with an empty name is left too, as kube-proxy's does-not-exist selector does", svc: svcOf(func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: ""} })},
		{name: "a service labelled service.kubernetes.io/headless is not served, whatever the value", svc: svcOf(func(s *corev1.Service) { s.Labels = map[string]string{LabelHeadless: ""} })},
		{name: "an unparsable cluster IP is invalid", svc: svcOf(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.300"} }), invalid: true},
		{name: "an IPv4-mapped IPv6 external IP is invalid", svc: svcOf(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"::ffff:203.0.113.1"} }), invalid: true},
		{name: "a service without cluster IP is invalid", svc: svcOf(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil }), invalid: true},
		{name: "a service without ports is invalid", svc: svcOf(func(s *corev1.Service) { s.Spec.Ports = nil }), invalid: true},
		{name: "a port of an unknown protocol is invalid", svc: svcOf(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }), invalid: true},
		{name: "a port out of range is invalid", svc: svcOf(func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 }), invalid: true},
		{name: "the same protocol and port twice is invalid", svc: svcOf(func(s *corev1.Service) {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "again", Protocol: corev1.ProtocolTCP, Port: 80})
		}), invalid: true},
		{name: "an unparsable load balancer source range is invalid", svc: svcOf(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Annotations = map[string]string{AnnotationLoadBalancerSourceRanges: "203.0.113.0/24, nonsense"}
		}), invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Build(tc.svc, nil, here)
			switch {
			case tc.invalid:
				if !errors.Is(err, ErrInvalidService) {
					t.Fatalf("got %+v, %v; want an ErrInvalidService", m, err)
				}
			case err != nil:
				t.Fatal(err)
			case (m != nil) != tc.served:
				t.Fatalf("got model %+v, want served=%v", m, tc.served)
			}
		})
	}
}

// TestBuildEndpoints covers which endpoints land in Endpoints, Cluster and
// Local, and HasEndpoints.
func TestBuildEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		node   *NodeInfo
		// want: the addresses of Endpoints, Cluster and Local of the only
		// port, and HasEndpoints.
		endpoints, cluster, local string
		has                       bool
	}{
		{
			name:      "ready endpoints anywhere make the cluster list",
			svc:       svcOf(),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.2", "node-b"), ep("10.1.0.1", "node-a"))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1 10.1.0.2", has: true,
		},
		{
			name:   "conditions left unset mean ready and serving, not terminating",
			svc:    svcOf(),
			slices: []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-b"))},
			// checked in detail below
			endpoints: "10.1.0.1", cluster: "10.1.0.1", has: true,
		},
		{
			name: "an endpoint neither ready nor serving and terminating is left out",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{sliceOf("a",
				ep("10.1.0.1", "node-b", notReady),
				ep("10.1.0.2", "node-b", func(e *discoveryv1.Endpoint) {
					// serving unset defers to ready (false)
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Terminating: ptr.To(true)}
				}),
				ep("10.1.0.3", "node-b", func(e *discoveryv1.Endpoint) {
					e.Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true)}
				}),
			)},
		},
		{
			name:      "terminating endpoints are not used while a ready one is left",
			svc:       svcOf(),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-b", terminatingServing), ep("10.1.0.2", "node-c"))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.2", has: true,
		},
		{
			name:      "serving terminating endpoints are used when none is ready",
			svc:       svcOf(),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-b", terminatingServing), ep("10.1.0.2", "node-c", notReady))},
			endpoints: "10.1.0.1", cluster: "10.1.0.1", has: true,
		},
		{
			name:      "internalTrafficPolicy Local keeps the ready endpoints of this node only, and no cluster list",
			svc:       svcOf(iTPLocal),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-a"), ep("10.1.0.2", "node-b"))},
			endpoints: "10.1.0.1 10.1.0.2", local: "10.1.0.1", has: true,
		},
		{
			name:      "internalTrafficPolicy Local without local endpoints still has endpoints elsewhere",
			svc:       svcOf(iTPLocal),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.2", "node-b"))},
			endpoints: "10.1.0.2", has: true,
		},
		{
			name:      "a local serving terminating endpoint is used when no local one is ready",
			svc:       svcOf(iTPLocal),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-a", terminatingServing), ep("10.1.0.2", "node-b"))},
			endpoints: "10.1.0.1 10.1.0.2", local: "10.1.0.1", has: true,
		},
		{
			name:      "externalTrafficPolicy Local needs a cluster list too, for this node's pods",
			svc:       svcOf(nodePort, eTPLocal),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-a"), ep("10.1.0.2", "node-b"))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1 10.1.0.2", local: "10.1.0.1", has: true,
		},
		{
			name:      "both policies Local on a NodePort still keep a cluster list for this node's pods",
			svc:       svcOf(nodePort, eTPLocal, iTPLocal),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-a"), ep("10.1.0.2", "node-b"))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1 10.1.0.2", local: "10.1.0.1", has: true,
		},
		{
			name:      "externalTrafficPolicy Local of a service nobody outside reaches makes no local list",
			svc:       svcOf(eTPLocal),
			slices:    []*discoveryv1.EndpointSlice{sliceOf("a", ep("10.1.0.1", "node-a"), ep("10.1.0.2", "node-b"))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1 10.1.0.2", has: true,
		},
		{
			name: "zone hints keep the endpoints for this node's zone when every ready endpoint has hints",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{sliceOf("a",
				ep("10.1.0.1", "node-b", zoneHints("zone-a")), ep("10.1.0.2", "node-c", zoneHints("zone-b")), ep("10.1.0.3", "node-d", notReady))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1", has: true,
		},
		{
			name: "zone hints are ignored when a ready endpoint has none",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{sliceOf("a",
				ep("10.1.0.1", "node-b", zoneHints("zone-a")), ep("10.1.0.2", "node-c"))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1 10.1.0.2", has: true,
		},
		{
			name: "zone hints are ignored when none is for this node's zone",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{sliceOf("a",
				ep("10.1.0.1", "node-b", zoneHints("zone-b")), ep("10.1.0.2", "node-c", zoneHints("zone-c")))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1 10.1.0.2", has: true,
		},
		{
			name: "zone hints are ignored on a node without zone",
			svc:  svcOf(),
			node: &NodeInfo{Name: "node-a"},
			slices: []*discoveryv1.EndpointSlice{sliceOf("a",
				ep("10.1.0.1", "node-b", zoneHints("zone-a")), ep("10.1.0.2", "node-c", zoneHints("zone-b")))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1 10.1.0.2", has: true,
		},
		{
			name: "node hints win over zone hints",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{sliceOf("a",
				ep("10.1.0.1", "node-a", zoneHints("zone-a"), nodeHints("node-a")),
				ep("10.1.0.2", "node-b", zoneHints("zone-a"), nodeHints("node-b")))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1", has: true,
		},
		{
			name: "node hints for other nodes only fall back to zone hints",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{sliceOf("a",
				ep("10.1.0.1", "node-b", zoneHints("zone-a"), nodeHints("node-b")),
				ep("10.1.0.2", "node-c", zoneHints("zone-b"), nodeHints("node-c")))},
			endpoints: "10.1.0.1 10.1.0.2", cluster: "10.1.0.1", has: true,
		},
		{
			name: "each family reads its own hints",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{
				sliceOf("v4", ep("10.1.0.1", "node-b", zoneHints("zone-a")), ep("10.1.0.2", "node-c", zoneHints("zone-b"))),
				sliceOf("v6", ep("fd00::1", "node-b", zoneHints("zone-a")), ep("fd00::2", "node-c")),
			},
			endpoints: "10.1.0.1 10.1.0.2 fd00::1 fd00::2", cluster: "10.1.0.1 fd00::1 fd00::2", has: true,
		},
		{
			name: "slices of other services, FQDN slices and headless slices are ignored",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{
				func() *discoveryv1.EndpointSlice {
					s := sliceOf("other", ep("10.1.0.1", "node-b"))
					s.Labels[discoveryv1.LabelServiceName] = "other"
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := sliceOf("elsewhere", ep("10.1.0.2", "node-b"))
					s.Namespace = "elsewhere"
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := sliceOf("fqdn", ep("db.example.com", "node-b"))
					s.AddressType = discoveryv1.AddressTypeFQDN
					return s
				}(),
				func() *discoveryv1.EndpointSlice {
					s := sliceOf("headless", ep("10.1.0.3", "node-b"))
					s.Labels[LabelHeadless] = ""
					return s
				}(),
				sliceOf("mine", ep("10.1.0.4", "node-b")),
			},
			endpoints: "10.1.0.4", cluster: "10.1.0.4", has: true,
		},
		{
			name: "an address in two slices counts once, ready",
			svc:  svcOf(),
			slices: []*discoveryv1.EndpointSlice{
				sliceOf("a", ep("10.1.0.1", "node-b", terminatingServing)),
				sliceOf("b", ep("10.1.0.1", "node-b")),
			},
			endpoints: "10.1.0.1", cluster: "10.1.0.1", has: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := here
			if tc.node != nil {
				node = *tc.node
			}
			m, err := Build(tc.svc, tc.slices, node)
			if err != nil {
				t.Fatal(err)
			}
			p := m.Ports[0]
			if got := addrs(p.Endpoints); got != tc.endpoints {
				t.Errorf("endpoints %q, want %q", got, tc.endpoints)
			}
			if got := addrs(p.Cluster); got != tc.cluster {
				t.Errorf("cluster %q, want %q", got, tc.cluster)
			}
			if got := addrs(p.Local); got != tc.local {
				t.Errorf("local %q, want %q", got, tc.local)
			}
			if p.HasEndpoints != tc.has {
				t.Errorf("has endpoints %v, want %v", p.HasEndpoints, tc.has)
			}
		})
	}
}

func TestBuildEndpointDetails(t *testing.T) {
	t.Run("conditions left unset mean ready and serving, not terminating; local means on this node", func(t *testing.T) {
		m, err := Build(svcOf(), []*discoveryv1.EndpointSlice{sliceOf("a",
			ep("10.1.0.1", "node-a", func(e *discoveryv1.Endpoint) { e.Zone = ptr.To("zone-a") }, zoneHints("zone-a", "zone-a"), nodeHints("node-a")))}, here)
		if err != nil {
			t.Fatal(err)
		}
		want := service.Endpoint{
			Addr: netip.MustParseAddr("10.1.0.1"), Port: 8080, NodeName: "node-a", Local: true,
			Ready: true, Serving: true, Zone: "zone-a", ZoneHints: []string{"zone-a"}, NodeHints: []string{"node-a"},
		}
		if got := m.Ports[0].Endpoints[0]; !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
	})
	t.Run("the endpoint port comes from the slice port of the same name and protocol", func(t *testing.T) {
		svc := svcOf(func(s *corev1.Service) {
			s.Spec.Ports = []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53},
			}
		})
		s := sliceOf("a", ep("10.1.0.1", "node-b"))
		s.Ports = []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To("dns"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](5353)}, // wrong protocol
		}
		m, err := Build(svc, []*discoveryv1.EndpointSlice{s}, here)
		if err != nil {
			t.Fatal(err)
		}
		// Ports are sorted: TCP before UDP.
		if p := m.Ports[0]; p.Name != "http" || len(p.Endpoints) != 1 || p.Endpoints[0].Port != 8080 {
			t.Errorf("http: %+v", p)
		}
		if p := m.Ports[1]; p.Name != "dns" || len(p.Endpoints) != 0 || p.HasEndpoints {
			t.Errorf("dns: %+v", p)
		}
	})
}

// TestBuildFrontends covers the frontends and the service-wide settings.
func TestBuildFrontends(t *testing.T) {
	lb := func(s *corev1.Service) {
		nodePort(s)
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
			{IP: "203.0.113.9"},
			{IP: "203.0.113.8", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
			{IP: "203.0.113.7", IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)},
			{Hostname: "lb.example.com"},
		}
	}
	for _, tc := range []struct {
		name  string
		svc   *corev1.Service
		check func(t *testing.T, m *service.Service)
	}{
		{"both cluster IPs are frontends, sorted", svcOf(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"fd00:96::10", "10.96.0.10"} }), func(t *testing.T, m *service.Service) {
			if want := mustAddrs("10.96.0.10", "fd00:96::10"); !slices.Equal(m.ClusterIPs, want) {
				t.Errorf("cluster IPs %v", m.ClusterIPs)
			}
		}},
		{"external IPs are frontends", svcOf(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.2", "203.0.113.1"} }), func(t *testing.T, m *service.Service) {
			if want := mustAddrs("203.0.113.1", "203.0.113.2"); !slices.Equal(m.ExternalIPs, want) {
				t.Errorf("external IPs %v", m.ExternalIPs)
			}
		}},
		{"load balancer IPs of mode VIP or unset are frontends, Proxy ones are not", svcOf(lb), func(t *testing.T, m *service.Service) {
			if want := mustAddrs("203.0.113.8", "203.0.113.9"); !slices.Equal(m.LoadBalancerIPs, want) {
				t.Errorf("load balancer IPs %v", m.LoadBalancerIPs)
			}
		}},
		{"load balancer ingress of a service no longer of type LoadBalancer is not a frontend", svcOf(lb, func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), func(t *testing.T, m *service.Service) {
			if len(m.LoadBalancerIPs) != 0 {
				t.Errorf("load balancer IPs %v", m.LoadBalancerIPs)
			}
		}},
		{"source ranges come from the spec", svcOf(lb, func(s *corev1.Service) {
			s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.0/24", " 198.51.100.7/24"}
			s.Annotations = map[string]string{AnnotationLoadBalancerSourceRanges: "10.0.0.0/8"}
		}), func(t *testing.T, m *service.Service) {
			want := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("203.0.113.0/24")}
			if !slices.Equal(m.LoadBalancerSourceRanges, want) {
				t.Errorf("source ranges %v", m.LoadBalancerSourceRanges)
			}
		}},
		{"source ranges come from the annotation when the spec has none", svcOf(lb, func(s *corev1.Service) {
			s.Annotations = map[string]string{AnnotationLoadBalancerSourceRanges: "203.0.113.0/24,fd00:1::/64"}
		}), func(t *testing.T, m *service.Service) {
			want := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("fd00:1::/64")}
			if !slices.Equal(m.LoadBalancerSourceRanges, want) {
				t.Errorf("source ranges %v", m.LoadBalancerSourceRanges)
			}
		}},
		{"node ports are per port", svcOf(nodePort), func(t *testing.T, m *service.Service) {
			if m.Ports[0].NodePort != 30000 {
				t.Errorf("node port %d", m.Ports[0].NodePort)
			}
		}},
		{"externalTrafficPolicy Local never applies to a service only reachable inside the cluster", svcOf(eTPLocal), func(t *testing.T, m *service.Service) {
			if m.ExternalLocal {
				t.Error("ExternalLocal")
			}
		}},
		{"externalTrafficPolicy Local applies to a service with external IPs", svcOf(eTPLocal, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"203.0.113.1"} }), func(t *testing.T, m *service.Service) {
			if !m.ExternalLocal || m.InternalLocal {
				t.Errorf("ExternalLocal %v InternalLocal %v", m.ExternalLocal, m.InternalLocal)
			}
		}},
		{"internalTrafficPolicy Local is only internal", svcOf(nodePort, iTPLocal), func(t *testing.T, m *service.Service) {
			if m.ExternalLocal || !m.InternalLocal {
				t.Errorf("ExternalLocal %v InternalLocal %v", m.ExternalLocal, m.InternalLocal)
			}
		}},
		{"the health check node port is for LoadBalancers with externalTrafficPolicy Local", svcOf(lb, eTPLocal, func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 32000 }), func(t *testing.T, m *service.Service) {
			if m.HealthCheckNodePort != 32000 {
				t.Errorf("health check node port %d", m.HealthCheckNodePort)
			}
		}},
		{"no health check node port under externalTrafficPolicy Cluster", svcOf(lb, func(s *corev1.Service) { s.Spec.HealthCheckNodePort = 32000 }), func(t *testing.T, m *service.Service) {
			if m.HealthCheckNodePort != 0 {
				t.Errorf("health check node port %d", m.HealthCheckNodePort)
			}
		}},
		{"ClientIP affinity without timeout lasts three hours", svcOf(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }), func(t *testing.T, m *service.Service) {
			if m.AffinityTimeout != 3*time.Hour {
				t.Errorf("affinity %v", m.AffinityTimeout)
			}
		}},
		{"ClientIP affinity keeps its timeout", svcOf(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}), func(t *testing.T, m *service.Service) {
			if m.AffinityTimeout != time.Minute {
				t.Errorf("affinity %v", m.AffinityTimeout)
			}
		}},
		{"no affinity, no timeout", svcOf(), func(t *testing.T, m *service.Service) {
			if m.AffinityTimeout != 0 {
				t.Errorf("affinity %v", m.AffinityTimeout)
			}
		}},
		{"trafficDistribution is copied", svcOf(func(s *corev1.Service) { s.Spec.TrafficDistribution = ptr.To(service.PreferSameNode) }), func(t *testing.T, m *service.Service) {
			if m.TrafficDistribution != service.PreferSameNode {
				t.Errorf("traffic distribution %q", m.TrafficDistribution)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Build(tc.svc, nil, here)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, m)
		})
	}
}

func TestBuildIsCanonical(t *testing.T) {
	a := sliceOf("a", ep("10.1.0.3", "node-b"), ep("10.1.0.1", "node-a", zoneHints("zone-b", "zone-a")))
	b := sliceOf("b", ep("10.1.0.2", "node-c"), ep("10.1.0.1", "node-c"))
	svc := svcOf(nodePort, func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}, corev1.ServicePort{Name: "alt", Protocol: corev1.ProtocolTCP, Port: 8})
	})
	m1, err := Build(svc, []*discoveryv1.EndpointSlice{a, b}, here)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := Build(svc, []*discoveryv1.EndpointSlice{b, a}, here)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m1, m2) {
		t.Errorf("the order of slices changed the model:\n%+v\n%+v", m1, m2)
	}
	if err := m1.Validate(); err != nil {
		t.Error(err)
	}
	// The duplicate 10.1.0.1 (equally ready) keeps the copy of the slice
	// named first.
	if e := m1.Ports[1].Endpoints[0]; e.NodeName != "node-a" {
		t.Errorf("duplicate resolved to %+v", e)
	}
}

func TestNodeModel(t *testing.T) {
	node := &corev1.Node{}
	node.Name = "node-a"
	node.Labels = map[string]string{corev1.LabelTopologyZone: "zone-a"}
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
		{Type: corev1.NodeInternalIP, Address: "fd00:18::5"},
		{Type: corev1.NodeInternalIP, Address: "198.18.0.5"},
		{Type: corev1.NodeInternalIP, Address: "198.18.0.6"},
		{Type: corev1.NodeHostName, Address: "node-a"},
	}
	t.Run("without CIDRs NodePorts are on the first InternalIP of each family", func(t *testing.T) {
		n, err := NodeModel(node, nil, mustAddrs("198.18.0.7"))
		if err != nil {
			t.Fatal(err)
		}
		want := service.Node{Name: "node-a", Zone: "zone-a", NodePortAddresses: mustAddrs("198.18.0.5", "fd00:18::5"),
			HostAddresses: mustAddrs("198.18.0.5", "198.18.0.6", "203.0.113.5", "fd00:18::5")}
		if !reflect.DeepEqual(n, want) {
			t.Errorf("got %+v, want %+v", n, want)
		}
	})
	t.Run("with CIDRs NodePorts are on the local addresses inside them", func(t *testing.T) {
		n, err := NodeModel(node, []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd00:18::/64")},
			mustAddrs("127.0.0.1", "198.18.0.7", "198.19.1.1", "fd00:18::9", "fd00:19::1"))
		if err != nil {
			t.Fatal(err)
		}
		if want := mustAddrs("198.18.0.7", "198.19.1.1", "fd00:18::9"); !slices.Equal(n.NodePortAddresses, want) {
			t.Errorf("got %v, want %v", n.NodePortAddresses, want)
		}
	})
	t.Run("the NAT loopback comes from the annotation", func(t *testing.T) {
		n2 := node.DeepCopy()
		n2.Annotations = map[string]string{"vcoil.io/nat-loopback": "fd00:10::1, 10.0.0.1"}
		n, err := NodeModel(n2, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want := mustAddrs("10.0.0.1", "fd00:10::1"); !slices.Equal(n.NATLoopback, want) {
			t.Errorf("got %v, want %v", n.NATLoopback, want)
		}
	})
	t.Run("no annotation means no NAT loopback", func(t *testing.T) {
		n, err := NodeModel(node, nil, nil)
		if err != nil || n.NATLoopback != nil {
			t.Errorf("got %v, %v", n.NATLoopback, err)
		}
	})
	t.Run("a bad annotation is an error and the rest of the model stays", func(t *testing.T) {
		n2 := node.DeepCopy()
		n2.Annotations = map[string]string{"vcoil.io/nat-loopback": "10.0.0.1,nonsense"}
		n, err := NodeModel(n2, nil, nil)
		if err == nil || n.NATLoopback != nil || len(n.NodePortAddresses) != 2 {
			t.Errorf("got %+v, %v", n, err)
		}
	})
}
