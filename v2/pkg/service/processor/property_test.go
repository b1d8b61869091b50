package processor

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestBuildAgainstOracle builds random Services, EndpointSlices and nodes
// and checks that every connection the model describes goes where the
// oracle says. VCOIL_SERVICE_SEED replays a run, VCOIL_SERVICE_CASES sizes
// it.
func TestBuildAgainstOracle(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("VCOIL_SERVICE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("VCOIL_SERVICE_SEED: %v", err)
		}
	}
	cases := 1000
	if s := os.Getenv("VCOIL_SERVICE_CASES"); s != "" {
		var err error
		if cases, err = strconv.Atoi(s); err != nil {
			t.Fatalf("VCOIL_SERVICE_CASES: %v", err)
		}
	}
	t.Logf("seed %d (VCOIL_SERVICE_SEED=%d replays this run), %d cases", seed, seed, cases)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	questions := 0
	for i := range cases {
		svc, epSlices, node := randomCase(rng)
		m, err := Build(svc, epSlices, node)
		if err != nil {
			t.Fatalf("case %d (seed %d): %v", i, seed, err)
		}
		if m != nil {
			if err := m.Validate(); err != nil {
				t.Fatalf("case %d (seed %d): %v", i, seed, err)
			}
			shuffled := slices.Clone(epSlices)
			rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			if m2, _ := Build(svc, shuffled, node); !reflect.DeepEqual(m, m2) {
				t.Fatalf("case %d (seed %d): the order of the slices changed the model", i, seed)
			}
		}
		want := oracle(svc, epSlices, node.Name, node.Zone)
		got := modelAnswers(m)
		questions += len(want)
		for q, w := range want {
			if g, ok := got[q]; !ok || g != w {
				t.Errorf("case %d (seed %d), service %s %s, %s: model says %q, oracle %q", i, seed, svc.Spec.Type, policies(svc), q, g, w)
			}
		}
		for q, g := range got {
			if _, ok := want[q]; !ok {
				t.Errorf("case %d (seed %d), %s: model has a frontend the oracle does not (%q)", i, seed, q, g)
			}
		}
		if t.Failed() {
			t.Logf("service: %+v\nslices: %s", svc.Spec, slicesString(epSlices))
			t.FailNow()
		}
	}
	t.Logf("%d questions answered alike", questions)
}

func policies(svc *corev1.Service) string {
	itp := "Cluster"
	if svc.Spec.InternalTrafficPolicy != nil {
		itp = string(*svc.Spec.InternalTrafficPolicy)
	}
	return fmt.Sprintf("eTP=%s iTP=%s", svc.Spec.ExternalTrafficPolicy, itp)
}

func slicesString(ss []*discoveryv1.EndpointSlice) string {
	s := ""
	for _, sl := range ss {
		s += fmt.Sprintf("\n  %s %s ports:", sl.Name, sl.AddressType)
		for _, p := range sl.Ports {
			s += fmt.Sprintf(" %s/%s/%d", ptr.Deref(p.Name, ""), ptr.Deref(p.Protocol, ""), ptr.Deref(p.Port, 0))
		}
		for _, e := range sl.Endpoints {
			h := ""
			if e.Hints != nil {
				h = fmt.Sprint(e.Hints.ForZones, e.Hints.ForNodes)
			}
			s += fmt.Sprintf("\n    %s node=%s ready=%v serving=%v term=%v hints=%s", e.Addresses[0], ptr.Deref(e.NodeName, ""),
				fmtBool(e.Conditions.Ready), fmtBool(e.Conditions.Serving), fmtBool(e.Conditions.Terminating), h)
		}
	}
	return s
}

func fmtBool(b *bool) string {
	if b == nil {
		return "nil"
	}
	return strconv.FormatBool(*b)
}

var (
	randNodes = []string{"node-a", "node-b", "node-c", ""}
	randZones = []string{"zone-a", "zone-b", ""}
)

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

func randBool(rng *rand.Rand) *bool {
	return pick(rng, nil, ptr.To(true), ptr.To(false))
}

// randomCase draws a Service the apiserver would accept, slices for it (and
// a few that are not its own), and this node.
func randomCase(rng *rand.Rand) (*corev1.Service, []*discoveryv1.EndpointSlice, NodeInfo) {
	node := NodeInfo{Name: "node-a", Zone: pick(rng, randZones...)}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	svc.Spec.Type = pick(rng, corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer)
	switch rng.IntN(20) {
	case 0:
		svc.Spec.ClusterIP = "None"
	case 1:
		svc.Labels = map[string]string{LabelServiceProxyName: "other"}
	}
	fams := pick(rng, []bool{false}, []bool{true}, []bool{false, true}, []bool{true, false})
	for _, v6 := range fams {
		if v6 {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, "fd00:96::10")
		} else {
			svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, "10.96.0.10")
		}
	}
	if svc.Spec.ClusterIP == "" {
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
	} else {
		svc.Spec.ClusterIPs = []string{"None"}
	}
	if rng.IntN(4) == 0 {
		svc.Spec.ExternalIPs = pick(rng, []string{"203.0.113.1"}, []string{"fd00:203::1"}, []string{"203.0.113.1", "fd00:203::1"})
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for range rng.IntN(3) {
			ing := corev1.LoadBalancerIngress{IP: pick(rng, "198.51.100.1", "198.51.100.2", "fd00:198::1")}
			ing.IPMode = pick(rng, nil, ptr.To(corev1.LoadBalancerIPModeVIP), ptr.To(corev1.LoadBalancerIPModeProxy))
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
		}
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || len(svc.Spec.ExternalIPs) > 0 {
		svc.Spec.ExternalTrafficPolicy = pick(rng, corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal)
	}
	svc.Spec.InternalTrafficPolicy = pick(rng, nil, ptr.To(corev1.ServiceInternalTrafficPolicyCluster), ptr.To(corev1.ServiceInternalTrafficPolicyLocal))
	names := []string{"http", "dns", "metrics"}
	nports := 1 + rng.IntN(3)
	for i := range nports {
		sp := corev1.ServicePort{Name: names[i], Port: int32(80 + i), Protocol: pick(rng, corev1.ProtocolTCP, corev1.ProtocolUDP, "")}
		if nports == 1 && rng.IntN(2) == 0 {
			sp.Name = ""
		}
		if svc.Spec.Type != corev1.ServiceTypeClusterIP && rng.IntN(8) != 0 {
			sp.NodePort = int32(30000 + i)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, sp)
	}

	// Half the cases hint (almost) every endpoint, so that topology modes
	// are chosen often.
	hinted := rng.IntN(2) == 0
	var out []*discoveryv1.EndpointSlice
	for i := range rng.IntN(5) {
		v6 := rng.IntN(2) == 0
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("web-%d", i),
			Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}}
		s.AddressType = discoveryv1.AddressTypeIPv4
		if v6 {
			s.AddressType = discoveryv1.AddressTypeIPv6
		}
		switch rng.IntN(12) {
		case 0:
			s.Labels[discoveryv1.LabelServiceName] = "other"
		case 1:
			s.Namespace = "elsewhere"
		case 2:
			s.Labels[LabelHeadless] = ""
		}
		for _, sp := range svc.Spec.Ports {
			if rng.IntN(6) == 0 {
				continue
			}
			ep := discoveryv1.EndpointPort{Name: ptr.To(sp.Name), Port: ptr.To(int32(8000 + sp.Port))}
			ep.Protocol = ptr.To(sp.Protocol)
			if sp.Protocol == "" || rng.IntN(10) == 0 {
				ep.Protocol = pick(rng, nil, ptr.To(corev1.ProtocolTCP), ptr.To(corev1.ProtocolUDP))
			}
			s.Ports = append(s.Ports, ep)
		}
		for range rng.IntN(5) {
			addr := fmt.Sprintf("10.1.0.%d", 1+rng.IntN(6)) // few addresses: duplicates across slices
			if v6 {
				addr = fmt.Sprintf("fd00:1::%d", 1+rng.IntN(6))
			}
			e := discoveryv1.Endpoint{Addresses: []string{addr}}
			if n := pick(rng, randNodes...); n != "" {
				e.NodeName = ptr.To(n)
			}
			e.Conditions = discoveryv1.EndpointConditions{Ready: randBool(rng), Serving: randBool(rng), Terminating: randBool(rng)}
			if rng.IntN(4) == 0 || (hinted && rng.IntN(10) != 0) {
				e.Hints = &discoveryv1.EndpointHints{}
				for range 1 + rng.IntN(2) {
					e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: pick(rng, "zone-a", "zone-b")})
				}
				for range rng.IntN(3) {
					e.Hints.ForNodes = append(e.Hints.ForNodes, discoveryv1.ForNode{Name: pick(rng, "node-a", "node-b", "node-c")})
				}
			}
			s.Endpoints = append(s.Endpoints, e)
		}
		out = append(out, s)
	}
	return svc, out, node
}
