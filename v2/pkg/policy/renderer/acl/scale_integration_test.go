package acl

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"go.fd.io/govpp/binapi/acl"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// The renderer on a real VPP at scale: 1,000 local pods, each isolated and
// admitting TCP 8080 from five others and the whole of 10.200.0.0/16 on
// 443, 1,000 tables in all, then one pod's rules changed. The pods are not
// wired (their lists wait in the dataplane), so this measures the tables,
// the ACLs VPP makes and the batch, not the interfaces. It checks that VPP
// holds one ACL per table, with the table's rules, and logs the times.
func TestRealVPPRenderAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: 1,000 pods")
	}
	e := newITEnv(t)
	const n = 1000
	pods := make([]renderer.PodRules, n)
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 101, byte(i >> 8), byte(i)}) }
	rulesOf := func(i, salt int) []renderer.Rule {
		var rs []renderer.Rule
		for k := 1; k <= 5; k++ {
			rs = append(rs, renderer.Rule{Action: renderer.ActionPermit, Protocol: renderer.ProtocolTCP,
				SrcNetwork: renderer.HostNetwork(ip((i + k*7 + salt) % n)), SrcPort: renderer.AnyPort, DstPort: renderer.SinglePort(8080)})
		}
		rs = append(rs, renderer.Rule{Action: renderer.ActionPermit, Protocol: renderer.ProtocolTCP,
			SrcNetwork: netip.MustParsePrefix("10.200.0.0/16"), SrcPort: renderer.AnyPort, DstPort: renderer.SinglePort(443)})
		renderer.SortRules(rs)
		return append(rs, renderer.DenyAll)
	}
	for i := range pods {
		pods[i] = renderer.PodRules{Pod: renderer.PodID{Namespace: "scale", Name: ip(i).String()}, IPs: []netip.Addr{ip(i)}, Ingress: rulesOf(i, 0)}
	}
	start := time.Now()
	if err := e.r.Render(e.ctx, renderer.Txn{Resync: true, Pods: pods}); err != nil {
		t.Fatal(err)
	}
	full := time.Since(start)
	tables := len(e.r.local)
	if tables != n {
		t.Fatalf("%d tables, want %d", tables, n)
	}
	var times []time.Duration
	for round := range 20 {
		i := round * 37 % n
		pods[i].Ingress = rulesOf(i, round+1)
		start := time.Now()
		if err := e.r.Render(e.ctx, renderer.Txn{Pods: []renderer.PodRules{pods[i]}}); err != nil {
			t.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	// VPP holds exactly the renderer's ACLs, each with its table's rules.
	ch, done := e.v.Connect(t)
	defer done()
	held := map[uint32]*acl.ACLDetails{}
	// The renderer's ACLs: the dataplane's pod guard has its own.
	err := vppapi.Dump(ch, &acl.ACLDump{ACLIndex: ^uint32(0)}, func() *acl.ACLDetails { return &acl.ACLDetails{} }, func(d *acl.ACLDetails) {
		if kind, _, _, _ := formatversion.ParseTag(d.Tag); kind == tagKind {
			held[d.ACLIndex] = d
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != len(e.r.local)+1 {
		t.Fatalf("VPP holds %d ACLs, want %d tables and the reflective ACL", len(held), len(e.r.local))
	}
	for _, tab := range e.r.cache.LocalTables() {
		want, err := aclRules(tab.Rules)
		if err != nil {
			t.Fatal(err)
		}
		got := held[e.r.local[tab.ID].index]
		if got == nil || got.Tag != tagOf(tab.ID) || !vpp.SameACLRules(got.R, want) {
			t.Fatalf("table %s: VPP's ACL %v differs", tab.ID, got)
		}
	}
	slices.Sort(times)
	t.Logf("%d pods, %d tables of %d VPP rules: first transaction %s; one pod's change: p50 %s, max %s",
		n, tables, len(held[e.r.local[e.r.cache.LocalTables()[0].ID].index].R), full, times[len(times)/2], times[len(times)-1])
}
