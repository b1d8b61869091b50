package nftables

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// everything is a state using every rule form, in both families.
func everything() []*service.Service {
	return []*service.Service{
		withNodePorts(dual("plain", 1, podA, remote), 30080, 30053),
		withAffinity(dual("sticky", 2, podA, podB, remote), 3*time.Second),
		withAffinity(dual("sticky-long", 3, podA), 10800*time.Second),
		externalLocal(withLoadBalancer(withNodePorts(dual("local", 4, podA, remote), 30081, 30054), v4.allowed, v6.allowed)),
		externalLocal(withExternalIPs(dual("remote-only", 5, remote))),
		dual("empty", 6),
	}
}

func TestTheWholeTableLoadsIntoTheKernel(t *testing.T) {
	l := newLab(t)
	r := l.renderer()
	l.resync(r, everything()...)
	got := l.ruleset()
	for _, want := range []string{
		"dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 3 map @backends4",
		"dnat ip6 to ip6 daddr . meta l4proto . th dport . numgen random mod 1 map @backends-local6",
		"map affinity4-3 {", "map affinity4-10800 {", "chain sticky6-3 {",
		"dnat ip6 to ip6 daddr . meta l4proto . th dport . jhash ip6 saddr mod 3 seed 0x76636f69 map @backends6",
		"snat ip to 10.255.255.1", "snat ip6 to fd00:255::1",
		"10.98.0.1 . tcp . 80 . 203.0.113.0/24",
		"10.96.0.6 . tcp . 80", // no endpoints
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "default/") || strings.Count(got, "chain ") > 40 {
		t.Errorf("the table has chains per service:\n%s", got)
	}
}

// SCTP has no kernel module on the machines vcoil is tested on, so its
// rules and elements are checked by nft (and the kernel, in check mode)
// without traffic.
func TestSCTPServicesPassNftCheck(t *testing.T) {
	netnstest.RequireRoot(t)
	node := netnstest.New(t, "node")
	ri, err := New(Config{Netns: node.Path(), PodIfPrefix: podPrefix}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ri.Close()
	r := ri.(*renderer)
	s := withAffinity(externalLocal(withLoadBalancer(dual("sctp", 1, podA, remote), v4.allowed)), time.Minute)
	s.Ports = []service.Port{port(service.SCTP, 9999, 30999, podA, remote)}
	e := dual("sctp-empty", 2)
	e.Ports = []service.Port{port(service.SCTP, 9999, 0)}
	node4 := service.Node{NodePortAddresses: []netip.Addr{netip.MustParseAddr(v4.node)}}
	want, _ := r.render(&node4, map[service.ID]*service.Service{s.ID: s, e.ID: e})
	objs := r.layout.objects(&node4, want.uses)
	p := &plan{}
	p.objectsDiff(tableObjects{}, objs)
	for k, f := range want.frontends {
		p.frontendDiff(k, nil, f)
	}
	tx := r.kernel.nft.NewTransaction()
	p.write(tx)
	if !strings.Contains(tx.String(), "sctp . 9999 . 1 : ") || !strings.Contains(tx.String(), "sctp . 30999") {
		t.Fatalf("the transaction has no SCTP elements:\n%s", tx)
	}
	if err := r.kernel.check(t.Context(), tx); err != nil {
		t.Fatalf("nft --check of SCTP services: %v\n%s", err, tx)
	}
}
