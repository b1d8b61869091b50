package announce_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/routes"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/announce"
)

// serving stands in for the nftables renderer behind the Gate: it renders
// nothing and fails while fail is set.
type serving struct{ fail bool }

var errRender = errors.New("nft: rendering failed")

func (s *serving) Resync(context.Context, *service.State) error {
	if s.fail {
		return errRender
	}
	return nil
}

func (s *serving) Update(context.Context, *service.Changes) error {
	if s.fail {
		return errRender
	}
	return nil
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// ep is an endpoint: ready or terminating (serving), on this node or not.
func ep(addr string, local, ready bool) service.Endpoint {
	return service.Endpoint{Addr: netip.MustParseAddr(addr), Port: 8080, Local: local, Ready: ready, Serving: true, Terminating: !ready}
}

func lbService(name string, local bool, lbIPs []netip.Addr, eps ...service.Endpoint) *service.Service {
	return &service.Service{
		ID: service.ID{Namespace: "ns", Name: name}, LoadBalancerIPs: lbIPs, ExternalLocal: local,
		Ports: []service.Port{{Protocol: service.TCP, Port: 80, Endpoints: eps, HasEndpoints: len(eps) > 0}},
	}
}

func stateOf(svcs ...*service.Service) *service.State {
	s := &service.State{Services: map[service.ID]*service.Service{}}
	for _, svc := range svcs {
		s.Services[svc.ID] = svc
	}
	return s
}

// tableRoutes lists table 119 of both families as "blackhole <dst> proto
// <protocol>" lines, sorted.
func tableRoutes(t *testing.T, n *netnstest.NS) []string {
	t.Helper()
	var lines []string
	for _, family := range []string{"-4", "-6"} {
		out, err := n.TryExec(t.Context(), "ip", "-j", family, "route", "show", "table", "119")
		if err != nil && strings.Contains(err.Error(), "FIB table does not exist") {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var rs []struct{ Type, Dst, Protocol string }
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			t.Fatalf("ip -j route: %v: %s", err, out)
		}
		for _, r := range rs {
			lines = append(lines, r.Type+" "+r.Dst+" proto "+r.Protocol)
		}
	}
	slices.Sort(lines)
	return lines
}

func expectTable(t *testing.T, step string, n *netnstest.NS, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := tableRoutes(t, n); !slices.Equal(got, want) {
		t.Errorf("%s: table 119:\nwant\n\t%s\ngot\n\t%s", step, strings.Join(want, "\n\t"), strings.Join(got, "\n\t"))
	}
}

// node is a test namespace with the block exporter (proto 30) and the
// LoadBalancer announcer (proto 32) on its table 119.
type node struct {
	ns        *netnstest.NS
	blocks    *routes.Exporter
	nft       *serving
	gate      *announce.Gate
	announcer *announce.Announcer
}

func newNode(t *testing.T) *node {
	t.Helper()
	n := &node{ns: netnstest.New(t, "node"), nft: &serving{}}
	var err error
	n.blocks, err = routes.NewExporter(routes.ExporterConfig{Netns: n.ns.Path()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := routes.NewExporter(routes.ExporterConfig{Netns: n.ns.Path(), Protocol: routes.DefaultLBProtocol, What: "LoadBalancer address"}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	n.gate = announce.NewGate(n.nft)
	n.announcer = announce.New(lb, n.gate, testr.New(t))
	return n
}

// resync is the processor's full sync: the serving renderer (through the
// gate), then the announcer.
func (n *node) resync(t *testing.T, state *service.State) error {
	t.Helper()
	gerr := n.gate.Resync(t.Context(), state)
	return errors.Join(gerr, n.announcer.Resync(t.Context(), state))
}

func (n *node) update(t *testing.T, changes *service.Changes) error {
	t.Helper()
	gerr := n.gate.Update(t.Context(), changes)
	return errors.Join(gerr, n.announcer.Update(t.Context(), changes))
}

func must(t *testing.T, step string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
}

func TestAnnouncerExportsTheServedAddressesOfLoadBalancerPoolsBesideTheBlocks(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	must(t, "export blocks", n.blocks.Sync(t.Context(), prefixes("10.64.0.0/26", "fd00:64::/120")))
	blocks := []string{"blackhole 10.64.0.0/26 proto 30", "blackhole fd00:64::/120 proto 30"}
	// A previous run announced an address whose Service is gone.
	n.ns.IP("route", "add", "blackhole", "203.0.113.99/32", "table", "119", "proto", "32")

	cluster := lbService("cluster", false, addrs("203.0.113.10", "fd00:113::10"), ep("10.64.1.5", false, true))
	// One address for TCP and UDP in two Services: one route.
	clusterUDP := lbService("cluster-udp", false, addrs("203.0.113.10"))
	localReady := lbService("local-ready", true, addrs("203.0.113.11", "fd00:113::11"),
		ep("10.64.0.5", true, true), ep("fd00:64::5", true, false), ep("fd00:64:1::5", false, true))
	localTerminating := lbService("local-terminating", true, addrs("203.0.113.12"),
		ep("10.64.0.6", true, false), ep("10.64.1.6", false, true))
	outside := lbService("outside", false, addrs("198.51.100.7"))
	noLB := &service.Service{ID: service.ID{Namespace: "ns", Name: "cluster-ip"}, ClusterIPs: addrs("10.96.0.10")}
	state := stateOf(cluster, clusterUDP, localReady, localTerminating, outside, noLB)

	// Before the pools are known nothing changes: the previous run's
	// route stays until the announcer knows what to announce.
	must(t, "Resync before the pools", n.resync(t, state))
	expectTable(t, "before the pools are known", n.ns, append(blocks, "blackhole 203.0.113.99 proto 32")...)

	must(t, "SetPools", n.announcer.SetPools(t.Context(), prefixes("203.0.113.0/24", "fd00:113::/64")))
	lbRoutes := []string{
		"blackhole 203.0.113.10 proto 32", "blackhole fd00:113::10 proto 32",
		// eTP=Local with a ready local IPv4 endpoint; the local IPv6 one is
		// terminating, the ready IPv6 one on another node.
		"blackhole 203.0.113.11 proto 32",
	}
	expectTable(t, "once the pools are known", n.ns, append(slices.Clone(blocks), lbRoutes...)...)
	must(t, "Resync again", n.resync(t, state))
	expectTable(t, "after a second Resync", n.ns, append(slices.Clone(blocks), lbRoutes...)...)

	// The block exporter syncs its own protocol only.
	must(t, "export other blocks", n.blocks.Sync(t.Context(), prefixes("10.64.0.64/26")))
	blocks = []string{"blackhole 10.64.0.64/26 proto 30"}
	expectTable(t, "after the blocks changed", n.ns, append(slices.Clone(blocks), lbRoutes...)...)

	// A Service goes; a local endpoint becomes ready; one of the TCP/UDP
	// pair goes and the address stays for the other.
	terminatingNowReady := lbService("local-terminating", true, addrs("203.0.113.12"), ep("10.64.0.6", true, true))
	must(t, "Update", n.update(t, &service.Changes{
		Delete: []service.ID{localReady.ID, clusterUDP.ID},
		Upsert: []*service.Service{terminatingNowReady},
	}))
	lbRoutes = []string{"blackhole 203.0.113.10 proto 32", "blackhole fd00:113::10 proto 32", "blackhole 203.0.113.12 proto 32"}
	expectTable(t, "after the Update", n.ns, append(slices.Clone(blocks), lbRoutes...)...)

	// A pool is added and one removed.
	must(t, "SetPools", n.announcer.SetPools(t.Context(), prefixes("198.51.100.0/24", "fd00:113::/64")))
	lbRoutes = []string{"blackhole fd00:113::10 proto 32", "blackhole 198.51.100.7 proto 32"}
	expectTable(t, "after the pools changed", n.ns, append(slices.Clone(blocks), lbRoutes...)...)

	// An eTP=Local Service loses its only ready local endpoint.
	must(t, "Update", n.update(t, &service.Changes{Upsert: []*service.Service{
		lbService("outside", true, addrs("198.51.100.7"), ep("10.64.1.7", false, true)),
	}}))
	lbRoutes = []string{"blackhole fd00:113::10 proto 32"}
	expectTable(t, "after the local endpoint went", n.ns, append(slices.Clone(blocks), lbRoutes...)...)

	// No pool left: nothing announced; the blocks stay.
	must(t, "SetPools", n.announcer.SetPools(t.Context(), nil))
	expectTable(t, "without pools", n.ns, blocks...)
}

func TestAnnouncerWaitsUntilTheServingRendererRenderedTheAddress(t *testing.T) {
	t.Parallel()
	n := newNode(t)
	must(t, "SetPools", n.announcer.SetPools(t.Context(), prefixes("203.0.113.0/24")))
	a := lbService("a", false, addrs("203.0.113.10"))
	must(t, "Resync", n.resync(t, stateOf(a)))
	expectTable(t, "after the first Resync", n.ns, "blackhole 203.0.113.10 proto 32")

	// nftables fails the change that brings b: b is held back and the
	// announcer says so, so that the processor resyncs it; withdrawing a
	// does not wait.
	n.nft.fail = true
	b := lbService("b", false, addrs("203.0.113.11"))
	err := n.update(t, &service.Changes{Upsert: []*service.Service{b}, Delete: []service.ID{a.ID}})
	if !errors.Is(err, errRender) || !errors.Is(err, announce.ErrNotServed) || !strings.Contains(err.Error(), "ns/b 203.0.113.11") {
		t.Fatalf("Update while nftables fails = %v, want the render error and ErrNotServed naming ns/b 203.0.113.11", err)
	}
	expectTable(t, "while nftables fails", n.ns)

	// A pool change in between does not announce it either.
	if err := n.announcer.SetPools(t.Context(), prefixes("203.0.113.0/25")); !errors.Is(err, announce.ErrNotServed) {
		t.Fatalf("SetPools while nftables fails = %v, want ErrNotServed", err)
	}
	expectTable(t, "after a pool change while nftables fails", n.ns)

	// The processor's retry: nftables first, then the announcer.
	n.nft.fail = false
	must(t, "Resync", n.resync(t, stateOf(b)))
	expectTable(t, "after the retry", n.ns, "blackhole 203.0.113.11 proto 32")
}

func TestAddressesFollowTheExternalTrafficPolicy(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  *service.Service
		want []netip.Addr
	}{
		{"a Cluster service announces every address even without endpoints",
			lbService("s", false, addrs("203.0.113.1", "fd00::1")), addrs("203.0.113.1", "fd00::1")},
		{"a Local service without endpoints announces nothing",
			lbService("s", true, addrs("203.0.113.1", "fd00::1")), nil},
		{"a Local service announces the family of its ready local endpoint",
			lbService("s", true, addrs("203.0.113.1", "fd00::1"), ep("fd00:64::1", true, true)), addrs("fd00::1")},
		{"a Local service with a terminating local endpoint announces nothing",
			lbService("s", true, addrs("203.0.113.1"), ep("10.64.0.1", true, false), ep("10.64.1.1", false, true)), nil},
		{"a service without LoadBalancer addresses announces nothing",
			lbService("s", false, nil, ep("10.64.0.1", true, true)), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := announce.Addresses(tc.svc); !slices.Equal(got, tc.want) {
				t.Errorf("Addresses = %v, want %v", got, tc.want)
			}
		})
	}
}
