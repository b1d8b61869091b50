package nat44

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

var (
	testNode = service.Node{
		Name:              "n1",
		NodePortAddresses: []netip.Addr{addr("198.18.0.11"), addr("198.18.1.11"), addr("fd00::11")},
		NATLoopback:       []netip.Addr{addr("10.1.0.255"), addr("fd00:1::ffff")},
	}
	webID = service.ID{Namespace: "default", Name: "web"}
)

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

func ep(a string, port uint16, isLocal bool) service.Endpoint {
	return service.Endpoint{Addr: addr(a), Port: port, Local: isLocal, Ready: true, Serving: true}
}

// svc is a TCP service on port 80 of cluster IP 10.96.0.10 whose endpoints
// serve every policy.
func svc(id service.ID, eps ...service.Endpoint) *service.Service {
	var local []service.Endpoint
	for _, e := range eps {
		if e.Local {
			local = append(local, e)
		}
	}
	return &service.Service{ID: id, ClusterIPs: []netip.Addr{addr("10.96.0.10")},
		Ports: []service.Port{{Name: "http", Protocol: service.TCP, Port: 80, Endpoints: eps, Cluster: eps, Local: local, HasEndpoints: len(eps) > 0}}}
}

func TestRenderChoosesKindFlagsAndLocalsPerFrontend(t *testing.T) {
	s := svc(webID, ep("10.1.0.2", 8080, true), ep("10.2.0.3", 8080, false), ep("fd00:1::2", 8080, true))
	s.ExternalIPs = []netip.Addr{addr("203.0.113.50")}
	s.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7"), addr("2001:db8::7")}
	s.ClusterIPs = append(s.ClusterIPs, addr("fd00:96::10"))
	s.Ports[0].NodePort = 30080
	s.Ports = append(s.Ports, service.Port{Protocol: service.SCTP, Port: 90, Endpoints: s.Ports[0].Endpoints, Cluster: s.Ports[0].Cluster, HasEndpoints: true})
	r := render(&testNode, s, 3)
	lb := func(flags string) string {
		return "lb " + flags + " [10.1.0.2:8080 p6, 10.2.0.3:8080 p2] vcoil-svc@2 default/web"
	}
	want := map[string]string{
		"tcp/10.96.0.10:80":     lb("self"),
		"tcp/203.0.113.50:80":   lb("twice"),
		"tcp/198.51.100.7:80":   lb("twice"),
		"tcp/198.18.0.11:30080": lb("twice"),
		"tcp/198.18.1.11:30080": lb("twice"),
	}
	checkRendered(t, r, want)
	if r.skippedSCTP != 1 {
		t.Errorf("skipped SCTP ports: %d, want 1", r.skippedSCTP)
	}
	// [fd00:96::10]:80, [2001:db8::7]:80 and the node port on the node's
	// fd00::11 (the SCTP port is skipped before its frontends).
	if r.skippedIPv6 != 3 {
		t.Errorf("skipped IPv6 frontends: %d, want 3", r.skippedIPv6)
	}
	if got := r.backends; len(got) != 1 || got[0] != addr("10.1.0.2") {
		t.Errorf("backends %v, want [10.1.0.2]", got)
	}

	s.ExternalLocal = true
	checkRendered(t, render(&testNode, s, 3), map[string]string{
		"tcp/10.96.0.10:80":     lb("self"),
		"tcp/203.0.113.50:80":   "static self [10.1.0.2:8080 p0] vcoil-svc@2 default/web",
		"tcp/198.51.100.7:80":   "static self [10.1.0.2:8080 p0] vcoil-svc@2 default/web",
		"tcp/198.18.0.11:30080": "static self [10.1.0.2:8080 p0] vcoil-svc@2 default/web",
		"tcp/198.18.1.11:30080": "static self [10.1.0.2:8080 p0] vcoil-svc@2 default/web",
	})
}

func TestRenderSinks(t *testing.T) {
	// No endpoint at all: every frontend refuses, node ports keep their port.
	s := svc(webID)
	s.Ports[0].NodePort = 30080
	checkRendered(t, render(&testNode, s, 1), map[string]string{
		"tcp/10.96.0.10:80":     "reject sink [169.254.101.1:80 p0] vcoil-svc@2 default/web",
		"tcp/198.18.0.11:30080": "reject sink [169.254.101.1:30080 p0] vcoil-svc@2 default/web",
		"tcp/198.18.1.11:30080": "reject sink [169.254.101.1:30080 p0] vcoil-svc@2 default/web",
	})
	// Endpoints elsewhere only, eTP=Local and iTP=Local: dropped.
	s = svc(webID, ep("10.2.0.3", 8080, false))
	s.ExternalLocal, s.InternalLocal = true, true
	s.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7")}
	checkRendered(t, render(&testNode, s, 1), map[string]string{
		"tcp/10.96.0.10:80":   "drop sink [169.254.101.2:80 p0] vcoil-svc@2 default/web",
		"tcp/198.51.100.7:80": "drop sink [169.254.101.2:80 p0] vcoil-svc@2 default/web",
	})
	// IPv6 endpoints only: the IPv4 frontend refuses.
	s = svc(webID, ep("fd00:1::2", 8080, true))
	checkRendered(t, render(&testNode, s, 1), map[string]string{
		"tcp/10.96.0.10:80": "reject sink [169.254.101.1:80 p0] vcoil-svc@2 default/web",
	})
}

func TestRenderAffinityIsInTheTagOfLBMappingsOnly(t *testing.T) {
	s := svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))
	s.AffinityTimeout = 10800 * time.Second
	checkRendered(t, render(&testNode, s, 1), map[string]string{
		"tcp/10.96.0.10:80": "lb self [10.1.0.2:8080 p2, 10.1.0.3:8080 p2] affinity 10800 vcoil-svc@2 default/web affinity=10800",
	})
	s = svc(webID, ep("10.1.0.2", 8080, false))
	s.AffinityTimeout = 10800 * time.Second
	checkRendered(t, render(&testNode, s, 1), map[string]string{
		"tcp/10.96.0.10:80": "static self [10.1.0.2:8080 p0] vcoil-svc@2 default/web",
	})
}

func TestTags(t *testing.T) {
	long := service.ID{Namespace: strings.Repeat("n", 30), Name: strings.Repeat("x", 30)}
	for _, tc := range []struct {
		id       service.ID
		affinity uint32
		want     string
	}{
		{webID, 0, "vcoil-svc@2 default/web"},
		{webID, 30, "vcoil-svc@2 default/web affinity=30"},
		{long, 0, "vcoil-svc#@2 88d6c27f4726e58e29be1c798f5b6dd5"},
		{long, 86400, "vcoil-svc#@2 88d6c27f4726e58e29be1c798f5b6dd5 affinity=86400"},
	} {
		got := mappingTag(tc.id, tc.affinity)
		if got != tc.want || len(got) > 63 || !isOurTag(got) || tagAffinity(got) != tc.affinity {
			t.Errorf("mappingTag(%s, %d) = %q (%d bytes, affinity %d), want %q", tc.id, tc.affinity, got, len(got), tagAffinity(got), tc.want)
		}
	}
	if isOurTag("kube-something") || isOurTag("") {
		t.Error("foreign tags taken for vcoil's")
	}
}

func checkRendered(t *testing.T, r *rendered, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, e := range r.mappings {
		got[e.key.String()] = describe(e.m)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %q", k, g)
		}
	}
}

func describe(m *mapping) string {
	flags := map[nat_types.NatConfigFlags]string{flagsTwice: "twice", flagsSelf: "self", flagsSink: "sink"}[m.Flags]
	var ls []string
	for _, l := range m.Locals {
		ls = append(ls, l.key().String()+" p"+itoa(int(l.Probability)))
	}
	s := m.Kind.String() + " " + flags + " [" + strings.Join(ls, ", ") + "]"
	if m.Affinity > 0 {
		s += " affinity " + itoa(int(m.Affinity))
	}
	return s + " " + m.Tag
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestProbabilitiesAreEvenAndTheirSumFitsAByte(t *testing.T) {
	weights := func(ws ...uint8) []local {
		var ls []local
		for i, w := range ws {
			ls = append(ls, local{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Port: 80, Probability: w})
		}
		return ls
	}
	probs := func(ls []local) []uint8 {
		var p []uint8
		for _, l := range ls {
			p = append(p, l.Probability)
		}
		return p
	}
	many := func(n int, w uint8) []uint8 { return slices.Repeat([]uint8{w}, n) }
	for _, tc := range []struct {
		name    string
		weights []uint8
		want    []uint8
		left    int
	}{
		{"twice the weights", []uint8{1, 3, 1}, []uint8{2, 6, 2}, 0},
		{"127 remote backends: 254", many(127, 1), many(127, 2), 0},
		{"128 remote backends: the weights", many(128, 1), many(128, 1), 0},
		{"a heavy local weight: the weights", []uint8{200, 1}, []uint8{200, 1}, 0},
		{"300 backends: the first 255", many(300, 1), many(255, 1), 45},
		{"what fits, skipping what does not", []uint8{200, 100, 55}, []uint8{200, 55}, 1},
	} {
		got, left := probabilities(weights(tc.weights...))
		if !slices.Equal(probs(got), tc.want) || left != tc.left {
			t.Errorf("%s: probabilities %v (%d left out), want %v (%d)", tc.name, probs(got), left, tc.want, tc.left)
		}
	}
}
