package processor

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Labels and annotations of Services and EndpointSlices that Build reads.
const (
	// LabelServiceProxyName hands a Service to the proxy it names; vcoil,
	// like kube-proxy without a --proxy-name, serves only Services without it.
	LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"
	// LabelHeadless marks the EndpointSlices of headless Services; on a
	// Service it keeps kube-proxy (and vcoil) from serving it, whatever its
	// value.
	LabelHeadless = "service.kubernetes.io/headless"
	// AnnotationLoadBalancerSourceRanges is the older form of
	// spec.loadBalancerSourceRanges, which kube-proxy still accepts.
	AnnotationLoadBalancerSourceRanges = "service.beta.kubernetes.io/load-balancer-source-ranges"
)

// DefaultAffinityTimeout is Kubernetes' ClientIP affinity timeout when a
// Service sets none (3 hours).
const DefaultAffinityTimeout = 10800 * time.Second

// ErrInvalidService is wrapped by Build's errors: the Service is in a state
// the model cannot represent, and is skipped.
var ErrInvalidService = errors.New("invalid service")

// NodeInfo is what Build needs to know about this node: the name (local
// endpoints, node hints) and the zone (zone hints). Addresses are not part of
// it, so that a change of the node's addresses rebuilds no Service.
type NodeInfo struct {
	Name, Zone string
}

// Ignored says why vcoil does not serve svc, or "" when it does.
func Ignored(svc *corev1.Service) string {
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		return "ExternalName service"
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return "headless service"
	}
	// kube-proxy watches with "label does not exist" selectors: any value,
	// the empty one included, takes the Service away from the default proxy.
	if name, ok := svc.Labels[LabelServiceProxyName]; ok {
		return "left to proxy " + strconv.Quote(name)
	}
	if _, ok := svc.Labels[LabelHeadless]; ok {
		return "labelled " + LabelHeadless
	}
	return ""
}

// Build turns a Service and its EndpointSlices into vcoil's model as this
// node serves it, applying kube-proxy's semantics (traffic policies,
// topology hints, terminating endpoints) once, so that renderers need not.
// epSlices may hold any EndpointSlices; those of other Services, FQDN ones
// and headless ones are ignored. It returns nil and no error for a Service
// vcoil does not serve (see Ignored), and an error wrapping
// ErrInvalidService for one it cannot represent. Equal inputs give
// deep-equal models, whatever the order of epSlices.
func Build(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, node NodeInfo) (*service.Service, error) {
	if Ignored(svc) != "" {
		return nil, nil
	}
	id := service.ID{Namespace: svc.Namespace, Name: svc.Name}
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("service %s: %s: %w", id, fmt.Sprintf(format, args...), ErrInvalidService)
	}
	m := &service.Service{ID: id}

	clusterIPs := svc.Spec.ClusterIPs
	if len(clusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		clusterIPs = []string{svc.Spec.ClusterIP}
	}
	if len(clusterIPs) == 0 {
		return nil, invalid("no cluster IP")
	}
	for _, s := range clusterIPs {
		a, err := parseAddr(s)
		if err != nil {
			return nil, invalid("cluster IP: %v", err)
		}
		m.ClusterIPs = append(m.ClusterIPs, a)
	}
	for _, s := range svc.Spec.ExternalIPs {
		a, err := parseAddr(s)
		if err != nil {
			return nil, invalid("external IP: %v", err)
		}
		m.ExternalIPs = append(m.ExternalIPs, a)
	}
	isLB := svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	if isLB {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode != corev1.LoadBalancerIPModeVIP) {
				continue
			}
			a, err := parseAddr(ing.IP)
			if err != nil {
				return nil, invalid("load balancer ingress IP: %v", err)
			}
			m.LoadBalancerIPs = append(m.LoadBalancerIPs, a)
		}
		ranges, err := sourceRanges(svc)
		if err != nil {
			return nil, invalid("load balancer source ranges: %v", err)
		}
		m.LoadBalancerSourceRanges = ranges
	}
	m.ClusterIPs = sortedUniqueAddrs(m.ClusterIPs)
	m.ExternalIPs = sortedUniqueAddrs(m.ExternalIPs)
	m.LoadBalancerIPs = sortedUniqueAddrs(m.LoadBalancerIPs)

	// kube-proxy's ExternallyAccessible and ExternalPolicyLocal: eTP=Local
	// means nothing for a Service no one outside the cluster can reach.
	externallyAccessible := isLB || svc.Spec.Type == corev1.ServiceTypeNodePort || len(svc.Spec.ExternalIPs) > 0
	m.ExternalLocal = externallyAccessible && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	m.InternalLocal = svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if svc.Spec.TrafficDistribution != nil {
		m.TrafficDistribution = *svc.Spec.TrafficDistribution
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		m.AffinityTimeout = DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t := *c.ClientIP.TimeoutSeconds
			if t <= 0 {
				return nil, invalid("session affinity timeout %d s", t)
			}
			m.AffinityTimeout = time.Duration(t) * time.Second
		}
	}
	if isLB && m.ExternalLocal && svc.Spec.HealthCheckNodePort != 0 {
		hc, err := portNumber(svc.Spec.HealthCheckNodePort)
		if err != nil {
			return nil, invalid("health check node port: %v", err)
		}
		m.HealthCheckNodePort = hc
	}

	if len(svc.Spec.Ports) == 0 {
		return nil, invalid("no ports")
	}
	eps := collectEndpoints(svc, epSlices, node.Name)
	for _, sp := range svc.Spec.Ports {
		p, err := buildPort(m, sp, eps[portKey{sp.Name, protocolOf(sp.Protocol)}], node)
		if err != nil {
			return nil, invalid("port %q: %v", sp.Name, err)
		}
		m.Ports = append(m.Ports, p)
	}
	slices.SortFunc(m.Ports, service.ComparePorts)
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", err, ErrInvalidService)
	}
	return m, nil
}

func buildPort(m *service.Service, sp corev1.ServicePort, eps []service.Endpoint, node NodeInfo) (service.Port, error) {
	var p service.Port
	p.Name = sp.Name
	p.Protocol = service.Protocol(protocolOf(sp.Protocol))
	switch p.Protocol {
	case service.TCP, service.UDP, service.SCTP:
	default:
		return p, fmt.Errorf("protocol %q", sp.Protocol)
	}
	port, err := portNumber(sp.Port)
	if err != nil {
		return p, err
	}
	p.Port = port
	if sp.NodePort != 0 {
		if p.NodePort, err = portNumber(sp.NodePort); err != nil {
			return p, fmt.Errorf("node port: %w", err)
		}
	}
	p.Endpoints = eps
	// kube-proxy's ExternallyAccessible for one port, UsesClusterEndpoints
	// and UsesLocalEndpoints: external frontends need Cluster even under
	// eTP=Local, since this node's pods reach them through Cluster.
	portExternal := p.NodePort != 0 || len(m.ExternalIPs) > 0 || len(m.LoadBalancerIPs) > 0
	usesCluster := !m.InternalLocal || portExternal
	usesLocal := m.InternalLocal || (m.ExternalLocal && portExternal)
	// Each family is categorized on its own, as each of kube-proxy's
	// per-family proxiers sees only its family's endpoints.
	for _, fam := range [][]service.Endpoint{familyOf(eps, true), familyOf(eps, false)} {
		cluster, local := categorize(fam, usesCluster, usesLocal, node)
		p.Cluster = appendShared(p.Cluster, cluster)
		p.Local = appendShared(p.Local, local)
	}
	// Most often every endpoint is in Cluster: the model then holds one
	// list, not two equal ones (at ten thousand services of ten endpoints,
	// 13 MB less). Models are never modified once built, so sharing is safe.
	if sameEndpoints(p.Cluster, eps) {
		p.Cluster = eps
	}
	if sameEndpoints(p.Local, eps) {
		p.Local = eps
	}
	p.HasEndpoints = len(eps) > 0
	return p, nil
}

// sameEndpoints says whether sub, taken from all in order, holds all of
// them.
func sameEndpoints(sub, all []service.Endpoint) bool {
	if len(all) == 0 || len(sub) != len(all) {
		return false
	}
	for i := range sub {
		if sub[i].Key() != all[i].Key() {
			return false
		}
	}
	return true
}

// appendShared appends b to a, returning b itself when a is empty: the
// lists are read-only, and a copy would only cost memory.
func appendShared(a, b []service.Endpoint) []service.Endpoint {
	if len(a) == 0 {
		return b
	}
	return append(slices.Clip(a), b...)
}

// familyOf returns the endpoints of one family: eps itself when they all
// are (the usual case), without a copy.
func familyOf(eps []service.Endpoint, v4 bool) []service.Endpoint {
	n := 0
	for _, e := range eps {
		if e.Addr.Is4() == v4 {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(eps):
		return eps
	}
	out := make([]service.Endpoint, 0, n)
	for _, e := range eps {
		if e.Addr.Is4() == v4 {
			out = append(out, e)
		}
	}
	return out
}

// categorize is kube-proxy's CategorizeEndpoints for the endpoints of one
// family, all of which are ready or serving and terminating.
func categorize(eps []service.Endpoint, usesCluster, usesLocal bool, node NodeInfo) (cluster, local []service.Endpoint) {
	if usesCluster {
		mode := topologyMode(eps, node)
		for _, e := range eps {
			if e.Ready && availableForTopology(e, mode, node) {
				cluster = append(cluster, e)
			}
		}
		if len(cluster) == 0 {
			cluster = servingTerminating(eps, false)
		}
	}
	if usesLocal {
		for _, e := range eps {
			if e.Local && e.Ready {
				local = append(local, e)
			}
		}
		if len(local) == 0 {
			local = servingTerminating(eps, true)
		}
	}
	return cluster, local
}

func servingTerminating(eps []service.Endpoint, localOnly bool) []service.Endpoint {
	var out []service.Endpoint
	for _, e := range eps {
		if e.Serving && e.Terminating && (!localOnly || e.Local) {
			out = append(out, e)
		}
	}
	return out
}

// topologyMode is kube-proxy's topologyModeFromHints: hints are used only
// when every ready endpoint has them and one is for this node (or zone), so
// that a half-hinted or foreign set never leaves this node without
// endpoints.
func topologyMode(eps []service.Endpoint, node NodeInfo) string {
	allNode, forNode := true, false
	allZone, forZone := true, false
	for _, e := range eps {
		if !e.Ready {
			continue
		}
		if len(e.NodeHints) == 0 {
			allNode = false
		} else if slices.Contains(e.NodeHints, node.Name) {
			forNode = true
		}
		if len(e.ZoneHints) == 0 {
			allZone = false
		} else if slices.Contains(e.ZoneHints, node.Zone) {
			forZone = true
		}
	}
	switch {
	case allNode && forNode:
		return service.PreferSameNode
	case allZone && forZone:
		return service.PreferSameZone
	}
	return ""
}

func availableForTopology(e service.Endpoint, mode string, node NodeInfo) bool {
	switch mode {
	case service.PreferSameNode:
		return slices.Contains(e.NodeHints, node.Name)
	case service.PreferSameZone:
		return slices.Contains(e.ZoneHints, node.Zone)
	}
	return true
}

type portKey struct {
	name     string
	protocol corev1.Protocol
}

// collectEndpoints merges the EndpointSlices of svc into the usable
// endpoints of each (port name, protocol), with the endpoint port taken from
// the slice port of the same name, as kube-proxy matches them. An
// address:port in several slices is kept once, preferring a ready copy.
func collectEndpoints(svc *corev1.Service, all []*discoveryv1.EndpointSlice, nodeName string) map[portKey][]service.Endpoint {
	var own []*discoveryv1.EndpointSlice
	for _, s := range all {
		if s == nil || s.Namespace != svc.Namespace || s.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		if _, headless := s.Labels[LabelHeadless]; headless {
			continue
		}
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		own = append(own, s)
	}
	// A fixed order makes the choice among duplicates independent of the
	// order the slices came in.
	slices.SortFunc(own, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })

	byKey := map[portKey]map[netip.AddrPort]service.Endpoint{}
	for _, s := range own {
		for _, sp := range s.Ports {
			if sp.Port == nil || *sp.Port <= 0 || *sp.Port > 65535 {
				continue
			}
			k := portKey{protocol: corev1.ProtocolTCP}
			if sp.Name != nil {
				k.name = *sp.Name
			}
			if sp.Protocol != nil {
				k.protocol = *sp.Protocol
			}
			set := byKey[k]
			if set == nil {
				set = map[netip.AddrPort]service.Endpoint{}
				byKey[k] = set
			}
			for i := range s.Endpoints {
				e, ok := endpoint(&s.Endpoints[i], uint16(*sp.Port), nodeName)
				if !ok {
					continue
				}
				if old, dup := set[e.Key()]; dup && (old.Ready || !e.Ready) {
					continue
				}
				set[e.Key()] = e
			}
		}
	}
	out := make(map[portKey][]service.Endpoint, len(byKey))
	for k, set := range byKey {
		if len(set) == 0 {
			continue // nil, not empty: models must compare deep-equal
		}
		eps := make([]service.Endpoint, 0, len(set))
		for _, e := range set {
			eps = append(eps, e)
		}
		slices.SortFunc(eps, func(a, b service.Endpoint) int { return a.Key().Compare(b.Key()) })
		out[k] = eps
	}
	return out
}

// endpoint converts one EndpointSlice endpoint with Kubernetes' defaults for
// its conditions; ok is false for endpoints no traffic may reach (neither
// ready nor serving and terminating) and for unusable addresses.
func endpoint(se *discoveryv1.Endpoint, port uint16, nodeName string) (e service.Endpoint, ok bool) {
	if len(se.Addresses) == 0 {
		return e, false
	}
	// Like kube-proxy, only the first address counts (the API allows one).
	a, err := parseAddr(se.Addresses[0])
	if err != nil {
		return e, false
	}
	c := se.Conditions
	e = service.Endpoint{Addr: a, Port: port, Ready: c.Ready == nil || *c.Ready}
	e.Serving = e.Ready
	if c.Serving != nil {
		e.Serving = *c.Serving
	}
	e.Terminating = c.Terminating != nil && *c.Terminating
	if !e.Ready && !(e.Serving && e.Terminating) {
		return e, false
	}
	if se.NodeName != nil {
		e.NodeName = *se.NodeName
	}
	e.Local = nodeName != "" && e.NodeName == nodeName
	if se.Zone != nil {
		e.Zone = *se.Zone
	}
	if h := se.Hints; h != nil {
		for _, z := range h.ForZones {
			e.ZoneHints = append(e.ZoneHints, z.Name)
		}
		for _, n := range h.ForNodes {
			e.NodeHints = append(e.NodeHints, n.Name)
		}
		slices.Sort(e.ZoneHints)
		e.ZoneHints = slices.Compact(e.ZoneHints)
		slices.Sort(e.NodeHints)
		e.NodeHints = slices.Compact(e.NodeHints)
	}
	return e, true
}

// sourceRanges reads spec.loadBalancerSourceRanges, or, when it is empty,
// the annotation kube-proxy also accepts. An unparsable range is an error
// rather than skipped: skipping it could open the load balancer to sources
// the user meant to keep out.
func sourceRanges(svc *corev1.Service) ([]netip.Prefix, error) {
	raw := svc.Spec.LoadBalancerSourceRanges
	if len(raw) == 0 {
		if a := strings.TrimSpace(svc.Annotations[AnnotationLoadBalancerSourceRanges]); a != "" {
			raw = strings.Split(a, ",")
		}
	}
	var out []netip.Prefix
	for _, s := range raw {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		if p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%q is not a plain IPv4 or IPv6 prefix", s)
		}
		out = append(out, p.Masked())
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	return slices.Compact(out), nil
}

// parseAddr accepts plain IPv4 and IPv6 addresses only: no zone, no
// IPv4-mapped IPv6 (a renderer would put it in the wrong family).
func parseAddr(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return a, err
	}
	if a.Zone() != "" || a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("%q is not a plain IPv4 or IPv6 address", s)
	}
	return a, nil
}

func portNumber(p int32) (uint16, error) {
	if p <= 0 || p > 65535 {
		return 0, fmt.Errorf("port %d out of range", p)
	}
	return uint16(p), nil
}

func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

func sortedUniqueAddrs(as []netip.Addr) []netip.Addr {
	slices.SortFunc(as, netip.Addr.Compare)
	return slices.Compact(as)
}
