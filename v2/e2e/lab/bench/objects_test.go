package bench

import (
	"net/netip"
	"testing"
)

func TestAddressesOfTheLargestRunStayInTheirRangesAndNeverRepeat(t *testing.T) {
	seen := map[netip.Addr]string{}
	add := func(a netip.Addr, what string) {
		t.Helper()
		if prev, ok := seen[a]; ok {
			t.Fatalf("%s and %s share %s", prev, what, a)
		}
		seen[a] = what
	}
	for _, i := range []int{0, 1, MaxServices - 1} {
		if ip := ClusterIP(i); !ServiceCIDR.Contains(ip) || ip == ServiceCIDR.Addr() {
			t.Errorf("ClusterIP of service %d is %s, outside %s or its network address", i, ip, ServiceCIDR)
		}
	}
	for i := range MaxServices {
		for j := range EndpointsPerService {
			a := EndpointAddr(i, j)
			if !EndpointRange.Contains(a) || !netip.MustParsePrefix("10.200.0.0/14").Contains(a) {
				t.Fatalf("endpoint %d of service %d is %s, outside the created endpoints' range", j, i, a)
			}
			add(a, "an endpoint as created")
		}
	}
	for k := range MaxChanges - 1 {
		a := ChangeAddr(k)
		if !netip.MustParsePrefix("10.204.0.0/14").Contains(a) {
			t.Fatalf("change %d brings %s, outside the changes' range", k, a)
		}
		add(a, "a change")
	}
}

func TestEndpointSliceBelongsToItsServiceAndToTheBenchmark(t *testing.T) {
	s, svc := NewEndpointSlice(42), NewService(42)
	if s.Labels["kubernetes.io/service-name"] != svc.Name || s.Labels["endpointslice.kubernetes.io/managed-by"] != ManagedBy {
		t.Errorf("labels %v, want the service %s and managed-by %s", s.Labels, svc.Name, ManagedBy)
	}
	if len(s.Endpoints) != EndpointsPerService || *s.Ports[0].Name != svc.Spec.Ports[0].Name {
		t.Errorf("%d endpoints, port %q; want %d endpoints on the service's port %q", len(s.Endpoints), *s.Ports[0].Name, EndpointsPerService, svc.Spec.Ports[0].Name)
	}
	if svc.Spec.Selector != nil || svc.Spec.ClusterIP != ClusterIP(42).String() {
		t.Errorf("service %s: selector %v, ClusterIP %s; want none and %s", svc.Name, svc.Spec.Selector, svc.Spec.ClusterIP, ClusterIP(42))
	}
}
