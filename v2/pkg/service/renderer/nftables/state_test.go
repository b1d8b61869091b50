package nftables

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// TestRenderingListsTheFrontendsTheTableServes checks the node's state
// against the renderer's own frontends: for services that exercise every
// verdict (pick, drop, reject), eTP=Local, affinity in both families and
// source ranges, service.Frontends with Rendering lists exactly the
// frontends frontendsOf emits, each with the backends of its verdicts
// (outside traffic in Backends, the node's own in FromNode where they
// differ), the rejection, the affinity and the allowed sources.
func TestRenderingListsTheFrontendsTheTableServes(t *testing.T) {
	node := &service.Node{NodePortAddresses: []netip.Addr{netip.MustParseAddr(v4.node), netip.MustParseAddr(v6.node)}}
	services := map[service.ID]*service.Service{}
	for _, s := range []*service.Service{
		withAffinity(withExternalIPs(dual("web", 10, podA, remote)), 90*time.Second),
		externalLocal(withNodePorts(dual("local", 11, remote), 30011, 30053)),
		externalLocal(withLoadBalancer(dual("lb", 12, podA, remote), v4.allowed, v6.allowed)),
		dual("empty", 13),
	} {
		services[s.ID] = s
	}
	want := map[frontendKey]*frontendState{}
	for _, id := range slices.SortedFunc(maps.Keys(services), service.ID.Compare) {
		frontendsOf(node, services[id], func(k frontendKey, f *frontendState) {
			if want[k] == nil {
				want[k] = f
			}
		})
	}
	if len(want) != 28 {
		t.Fatalf("the table has %d frontends, want 28 (2 ports of 4 services, 4 addresses each)", len(want))
	}
	got := service.Frontends(node, services, Rendering())
	if len(got) != len(want) {
		t.Errorf("%d frontends, want the table's %d", len(got), len(want))
	}
	keys := func(bs []nodestate.Backend) []netip.AddrPort {
		var out []netip.AddrPort
		for _, b := range bs {
			out = append(out, netip.AddrPortFrom(b.Address, b.Port))
		}
		return out
	}
	for _, f := range got {
		k := frontendKey{f.Address, protoOf(service.Protocol(f.Protocol)), f.Port}
		st := want[k]
		if st == nil {
			t.Errorf("frontend %v (%s) is not in the table", k, f.Service)
			continue
		}
		if st.Reject != (f.NoBackends == "reject") {
			t.Errorf("frontend %v: no backends %q, the table rejects: %v", k, f.NoBackends, st.Reject)
		}
		outside, outsideNone := st.Backends, st.Cluster.Kind == verdictDrop
		if st.Local.Kind != verdictNone {
			outside, outsideNone = st.LocalBackends, st.Local.Kind == verdictDrop
			switch {
			case f.FromNode == nil:
				t.Errorf("frontend %v: the table serves the node's traffic apart, FromNode is nil", k)
			case !slices.Equal(keys(f.FromNode.Backends), st.Backends) || (f.FromNode.NoBackends == "drop") != (st.Cluster.Kind == verdictDrop):
				t.Errorf("frontend %v: from the node %v %q, the table's %v %v", k, keys(f.FromNode.Backends), f.FromNode.NoBackends, st.Backends, st.Cluster)
			}
		} else if f.FromNode != nil && !st.Reject {
			t.Errorf("frontend %v: FromNode %+v, the table serves every client alike", k, f.FromNode)
		}
		if !slices.Equal(keys(f.Backends), outside) || (f.NoBackends == "drop") != outsideNone {
			t.Errorf("frontend %v: backends %v %q, the table's %v (drop %v)", k, keys(f.Backends), f.NoBackends, outside, outsideNone)
		}
		if k.Addr.Is4() && float64(f.Affinity) != float64(st.Affinity) {
			t.Errorf("frontend %v: affinity %v, the table's %d", k, f.Affinity, st.Affinity)
		}
		if sticky := st.Cluster.Sticky || st.Local.Sticky; sticky != f.AffinityByHash {
			t.Errorf("frontend %v: affinity by hash %v, the table's %v", k, f.AffinityByHash, sticky)
		}
		var allowed []netip.Prefix
		for _, p := range f.SourceRanges {
			if p.Addr().Is4() == k.Addr.Is4() {
				allowed = append(allowed, p)
			}
		}
		if !slices.Equal(allowed, st.Allowed) || st.Firewalled != (len(f.SourceRanges) > 0) {
			t.Errorf("frontend %v: source ranges %v, the table allows %v (firewalled %v)", k, f.SourceRanges, st.Allowed, st.Firewalled)
		}
	}
}
