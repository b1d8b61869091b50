package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// scaleState is n single-stack services with one TCP port and ten remote
// endpoints each, the shape of the kube-proxy measurement.
func scaleState(n int) *service.State {
	st := &service.State{
		Node:     service.Node{Name: "node", NodePortAddresses: []netip.Addr{netip.MustParseAddr("198.18.0.1")}},
		Services: make(map[service.ID]*service.Service, n),
	}
	for i := range n {
		st.Services[scaleID(i)] = scaleService(i, 0)
	}
	return st
}

func scaleID(i int) service.ID { return service.ID{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)} }

// scaleService is service i; gen > 0 replaces its first endpoint by
// another, for changes.
func scaleService(i, gen int) *service.Service {
	p := service.Port{Protocol: service.TCP, Port: 80, HasEndpoints: true}
	for e := range 10 {
		host := e
		if e == 0 && gen > 0 {
			host = 10 + gen%6
		}
		p.Endpoints = append(p.Endpoints, service.Endpoint{
			Addr: addr4(10<<24 | 128<<16 + uint32(i)*16 + uint32(host)), Port: 8080,
			Ready: true, Serving: true, NodeName: "other",
		})
	}
	slices.SortFunc(p.Endpoints, func(a, b service.Endpoint) int { return a.Addr.Compare(b.Addr) })
	p.Cluster = p.Endpoints
	return &service.Service{
		ID:         scaleID(i),
		ClusterIPs: []netip.Addr{addr4(10<<24 | 96<<16 + uint32(i))},
		Ports:      []service.Port{p},
	}
}

func addr4(v uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func benchRenderer(b *testing.B) Renderer {
	return benchRendererIn(b, netnstest.New(b, "node"))
}

func benchRendererIn(b *testing.B, node *netnstest.NS) Renderer {
	r, err := New(Config{Netns: node.Path(), PodIfPrefix: podPrefix}, logr.Discard())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	return r
}

// BenchmarkResyncFromScratch is a full sync into an empty table: vcoild
// starting on a node without the table. On the 2-core development machine,
// objects through nft and elements over netlink: 0.10 s at 1,000 services,
// 0.65 s at 10,000 (2.2-2.4 s with the elements through nft too).
func BenchmarkResyncFromScratch(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("services=%d", n), func(b *testing.B) {
			r := benchRenderer(b)
			st := scaleState(n)
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				if err := r.Remove(b.Context()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := r.Resync(b.Context(), st); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkResyncAdopting is the first sync of a new renderer over a table
// that already holds the state: vcoild restarting (it lists the kernel and
// changes nothing). 0.83-1.4 s at 10,000 services over netlink (7.6 s with
// nft --json).
func BenchmarkResyncAdopting(b *testing.B) {
	node := netnstest.New(b, "node")
	st := scaleState(10000)
	if err := benchRendererIn(b, node).Resync(b.Context(), st); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		r := benchRendererIn(b, node)
		b.StartTimer()
		if err := r.Resync(b.Context(), st); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResyncPeriodic is vcoild's periodic Resync of an unchanged
// state: a diff with the mirror, without listing the kernel. 0.11-0.25 s
// at 10,000 services.
func BenchmarkResyncPeriodic(b *testing.B) {
	r := benchRenderer(b)
	st := scaleState(10000)
	if err := r.Resync(b.Context(), st); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := r.Resync(b.Context(), st); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdateOneEndpoint replaces one endpoint of one service among
// 10,000: the hot path of an endpoint change. Run it with -benchtime 200x
// for a meaningful p99. Its elements go over netlink: about 1.5 ms per
// change on the project's VM (38 ms when nft wrote them, most of it nft
// reading the maps' 110,000 elements first).
func BenchmarkUpdateOneEndpoint(b *testing.B) {
	r := benchRenderer(b)
	const n = 10000
	if err := r.Resync(b.Context(), scaleState(n)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	gen := 0
	var took []time.Duration
	for b.Loop() {
		gen++
		ch := &service.Changes{Upsert: []*service.Service{scaleService(gen*7919%n, gen)}}
		start := time.Now()
		if err := r.Update(b.Context(), ch); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}
