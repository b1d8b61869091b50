package acl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

var (
	podA = renderer.PodID{Namespace: "ns", Name: "a"}
	podB = renderer.PodID{Namespace: "ns", Name: "b"}
	ipA  = netip.MustParseAddr("10.1.0.2")
	ipB  = netip.MustParseAddr("10.1.0.3")
)

func prefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func permit(p renderer.Protocol, src, dst string, port uint16) renderer.Rule {
	r := renderer.Rule{Action: renderer.ActionPermit, Protocol: p, SrcPort: renderer.AnyPort, DstPort: renderer.SinglePort(port)}
	if src != "" {
		r.SrcNetwork = prefix(src)
	}
	if dst != "" {
		r.DstNetwork = prefix(dst)
	}
	return r
}

func newRenderer(t *testing.T, f *fakeVPP) *Renderer {
	r, err := New(f, Config{}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Rules become VPP rules of one family each, in the table's order.
func TestTablesBecomeACLRulesOfOneFamilyEach(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules []renderer.Rule
		want  []string
	}{
		{"a peer address on TCP 80 gets the destination 0/0 of its family",
			[]renderer.Rule{permit(renderer.ProtocolTCP, "10.1.0.5/32", "", 80)},
			[]string{"permit 6 10.1.0.5/32 > 0.0.0.0/0:80"}},
		{"an IPv6 peer network on UDP 53 gets ::/0",
			[]renderer.Rule{permit(renderer.ProtocolUDP, "fd00:1::/64", "", 53)},
			[]string{"permit 17 fd00:1::/64 > ::/0:53"}},
		{"a rule of the global table keeps both networks",
			[]renderer.Rule{permit(renderer.ProtocolTCP, "10.1.0.2/32", "198.51.100.0/24", 443)},
			[]string{"permit 6 10.1.0.2/32 > 198.51.100.0/24:443"}},
		{"an SCTP port range (endPort) stays one rule",
			[]renderer.Rule{{Action: renderer.ActionPermit, Protocol: renderer.ProtocolSCTP, SrcNetwork: prefix("10.2.0.0/16"), SrcPort: renderer.AnyPort, DstPort: renderer.PortRange{First: 8000, Last: 8100}}},
			[]string{"permit 132 10.2.0.0/16 > 0.0.0.0/0:8000-8100"}},
		{"every protocol (ICMP too) from a peer is protocol 0",
			[]renderer.Rule{{Action: renderer.ActionPermit, SrcNetwork: prefix("10.1.0.5/32"), SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}},
			[]string{"permit 0 10.1.0.5/32 > 0.0.0.0/0"}},
		{"a rule with both networks any is one rule per family, IPv4 first, in place",
			[]renderer.Rule{permit(renderer.ProtocolTCP, "", "", 22), {Action: renderer.ActionPermit, Protocol: renderer.ProtocolUDP, SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}, renderer.DenyAll},
			[]string{"permit 6 0.0.0.0/0 > 0.0.0.0/0:22", "permit 6 ::/0 > ::/0:22",
				"permit 17 0.0.0.0/0 > 0.0.0.0/0", "permit 17 ::/0 > ::/0",
				"deny 0 0.0.0.0/0 > 0.0.0.0/0", "deny 0 ::/0 > ::/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := aclRules(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rs {
				got = append(got, ruleString(r))
			}
			wantLines(t, "VPP rules", got, tc.want)
		})
	}
	if _, err := aclRules([]renderer.Rule{permit(renderer.ProtocolTCP, "10.1.0.0/16", "fd00::/8", 80)}); err == nil || !strings.Contains(err.Error(), "different families") {
		t.Fatalf("a rule with networks of two families: %v", err)
	}
}

// An empty table is never made into an ACL: VPP would deny everything
// where it is attached.
func TestAnEmptyTableIsNeverAnACL(t *testing.T) {
	r := newRenderer(t, newFakeVPP(t))
	if _, err := r.creationOf(renderer.Table{ID: "local-9"}); err == nil || !strings.Contains(err.Error(), "table local-9 has no rules") {
		t.Fatalf("an empty table: %v", err)
	}
	if _, err := r.creationOf(renderer.Table{ID: renderer.TableID(strings.Repeat("x", 60)), Rules: []renderer.Rule{renderer.DenyAll}}); err == nil || !strings.Contains(err.Error(), "longer than VPP's 63 bytes") {
		t.Fatalf("a long tag: %v", err)
	}
}

func deny() renderer.Rule { return renderer.DenyAll }

// isolated is pod b admitting TCP 80 from pod a only.
func isolated() renderer.PodRules {
	return renderer.PodRules{Pod: podB, IPs: []netip.Addr{ipB}, Ingress: []renderer.Rule{permit(renderer.ProtocolTCP, "10.1.0.2/32", "", 80), deny()}}
}

func open(id renderer.PodID, ip netip.Addr) renderer.PodRules {
	return renderer.PodRules{Pod: id, IPs: []netip.Addr{ip}}
}

// Each transaction's messages, in the order that never leaves a pod
// without its table: the new ACLs, the lists in one batch, then the
// deletions.
func TestRenderSendsTheseMessages(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f)
	reflective := `"vcoil-pol@2 reflect" count=6 [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`
	steps := []struct {
		name      string
		txn       renderer.Txn
		want      []string
		wantACLs  []string
		wantLists []string
	}{
		{
			name: "the first transaction syncs: b's table on its output, the reflective ACL on its input, a open",
			txn:  renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}},
			want: []string{
				`cli_inband "set acl-plugin reclassify-sessions 1"`,
				"acl_dump -1",
				`acl_add_replace new "vcoil-pol@2 local-1" count=3 [permit 6 10.1.0.2/32 > 0.0.0.0/0:80; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
				"acl_add_replace new " + reflective,
				"set_acl_lists 10.1.0.2 in=[] out=[], 10.1.0.3 in=[1] out=[0], uplink in=[] out=[], host in=[] out=[]",
			},
			wantACLs: []string{
				`0 "vcoil-pol@2 local-1" [permit 6 10.1.0.2/32 > 0.0.0.0/0:80; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
				`1 "vcoil-pol@2 reflect" [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
			},
			wantLists: []string{"10.1.0.3 in=[1] out=[0]"},
		},
		{
			name: "a may send only to TCP 443 outside: b's table changes (replaced in place, its lists stay), the global table appears on the outside interfaces",
			txn: renderer.Txn{Pods: []renderer.PodRules{{Pod: podA, IPs: []netip.Addr{ipA},
				Egress: []renderer.Rule{permit(renderer.ProtocolTCP, "", "198.51.100.0/24", 443), deny()}}}},
			want: []string{
				`acl_add_replace 0 "vcoil-pol@2 local-1" count=3 [deny 0 10.1.0.2/32 > 0.0.0.0/0; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
				`acl_add_replace new "vcoil-pol@2 global" count=4 [permit 6 10.1.0.2/32 > 198.51.100.0/24:443; deny 0 10.1.0.2/32 > 0.0.0.0/0; permit 0 0.0.0.0/0 > 0.0.0.0/0; permit 0 ::/0 > ::/0]`,
				"set_acl_lists uplink in=[1] out=[2], host in=[1] out=[2]",
			},
			wantACLs: []string{
				`0 "vcoil-pol@2 local-1" [deny 0 10.1.0.2/32 > 0.0.0.0/0; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
				`1 "vcoil-pol@2 reflect" [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
				`2 "vcoil-pol@2 global" [permit 6 10.1.0.2/32 > 198.51.100.0/24:443; deny 0 10.1.0.2/32 > 0.0.0.0/0; permit 0 0.0.0.0/0 > 0.0.0.0/0; permit 0 ::/0 > ::/0]`,
			},
			wantLists: []string{"10.1.0.3 in=[1] out=[0]", "host in=[1] out=[2]", "uplink in=[1] out=[2]"},
		},
		{
			name: "a may send to TCP 8443 instead: the global table is replaced in place",
			txn: renderer.Txn{Pods: []renderer.PodRules{{Pod: podA, IPs: []netip.Addr{ipA},
				Egress: []renderer.Rule{permit(renderer.ProtocolTCP, "", "198.51.100.0/24", 8443), deny()}}}},
			want: []string{
				`acl_add_replace 2 "vcoil-pol@2 global" count=4 [permit 6 10.1.0.2/32 > 198.51.100.0/24:8443; deny 0 10.1.0.2/32 > 0.0.0.0/0; permit 0 0.0.0.0/0 > 0.0.0.0/0; permit 0 ::/0 > ::/0]`,
			},
			wantACLs: []string{
				`0 "vcoil-pol@2 local-1" [deny 0 10.1.0.2/32 > 0.0.0.0/0; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
				`1 "vcoil-pol@2 reflect" [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
				`2 "vcoil-pol@2 global" [permit 6 10.1.0.2/32 > 198.51.100.0/24:8443; deny 0 10.1.0.2/32 > 0.0.0.0/0; permit 0 0.0.0.0/0 > 0.0.0.0/0; permit 0 ::/0 > ::/0]`,
			},
			wantLists: []string{"10.1.0.3 in=[1] out=[0]", "host in=[1] out=[2]", "uplink in=[1] out=[2]"},
		},
		{
			name: "b is gone: its lists are cleared before its table's ACL is deleted",
			txn:  renderer.Txn{Pods: []renderer.PodRules{{Pod: podB, Removed: true}}},
			want: []string{
				"set_acl_lists 10.1.0.3 in=[] out=[]",
				"acl_del 0",
			},
			wantACLs: []string{
				`1 "vcoil-pol@2 reflect" [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
				`2 "vcoil-pol@2 global" [permit 6 10.1.0.2/32 > 198.51.100.0/24:8443; deny 0 10.1.0.2/32 > 0.0.0.0/0; permit 0 0.0.0.0/0 > 0.0.0.0/0; permit 0 ::/0 > ::/0]`,
			},
			wantLists: []string{"host in=[1] out=[2]", "uplink in=[1] out=[2]"},
		},
		{
			name: "a is open again: no global table, no reflective ACL, nothing on the interfaces",
			txn:  renderer.Txn{Pods: []renderer.PodRules{open(podA, ipA)}},
			want: []string{
				"set_acl_lists uplink in=[] out=[], host in=[] out=[]",
				"acl_del 2",
				"acl_del 1",
			},
		},
		{
			name: "a transaction that changes nothing sends nothing",
			txn:  renderer.Txn{Pods: []renderer.PodRules{open(podA, ipA)}},
		},
		{
			name: "b comes back with a's address, a leaves it: the address gets b's lists, once",
			txn:  renderer.Txn{Pods: []renderer.PodRules{{Pod: podA, Removed: true}, {Pod: podB, IPs: []netip.Addr{ipA}, Ingress: []renderer.Rule{permit(renderer.ProtocolUDP, "10.9.0.0/16", "", 53), deny()}}}},
			want: []string{
				`acl_add_replace new "vcoil-pol@2 local-2" count=3 [permit 17 10.9.0.0/16 > 0.0.0.0/0:53; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
				"acl_add_replace new " + reflective,
				"set_acl_lists 10.1.0.2 in=[2] out=[1]",
			},
			wantACLs: []string{
				`1 "vcoil-pol@2 local-2" [permit 17 10.9.0.0/16 > 0.0.0.0/0:53; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
				`2 "vcoil-pol@2 reflect" [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
			},
			wantLists: []string{"10.1.0.2 in=[2] out=[1]"},
		},
	}
	for _, s := range steps {
		if err := r.Render(ctx(t), s.txn); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		wantLines(t, s.name, f.take(), s.want)
		acls, lists := f.state()
		wantLines(t, s.name+": VPP's ACLs", acls, s.wantACLs)
		wantLines(t, s.name+": the interfaces' lists", lists, s.wantLists)
	}
}

// After a VPP restart (a new incarnation) the next transaction makes
// every ACL again from the cache and sets every list; Resync does the
// same at once.
func TestANewIncarnationRendersEverythingAgain(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f)
	if err := r.Render(ctx(t), renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}}); err != nil {
		t.Fatal(err)
	}
	f.take()
	f.restart()
	if err := r.Resync(ctx(t)); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "Resync in the new incarnation", f.take(), []string{
		`cli_inband "set acl-plugin reclassify-sessions 1"`,
		"acl_dump -1",
		`acl_add_replace new "vcoil-pol@2 local-1" count=3 [permit 6 10.1.0.2/32 > 0.0.0.0/0:80; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
		`acl_add_replace new "vcoil-pol@2 reflect" count=6 [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
		"set_acl_lists 10.1.0.2 in=[] out=[], 10.1.0.3 in=[1] out=[0], uplink in=[] out=[], host in=[] out=[]",
	})
	f.restart()
	f.mu.Lock()
	f.uplink = vpp.NoInterface
	f.mu.Unlock()
	// A transaction in the new incarnation: the whole state, with the
	// transaction's change, and no uplink.
	if err := r.Render(ctx(t), renderer.Txn{Pods: []renderer.PodRules{{Pod: podA, Removed: true}}}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "a transaction in the next incarnation", f.take(), []string{
		`cli_inband "set acl-plugin reclassify-sessions 1"`,
		"acl_dump -1",
		`acl_add_replace new "vcoil-pol@2 local-1" count=3 [permit 6 10.1.0.2/32 > 0.0.0.0/0:80; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
		`acl_add_replace new "vcoil-pol@2 reflect" count=6 [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
		"set_acl_lists 10.1.0.2 in=[] out=[], 10.1.0.3 in=[1] out=[0], host in=[] out=[]",
	})
}

// The policy agent resyncs after a VPP restart with a resync transaction
// that changes nothing in the policies: it renders everything into the new
// incarnation, and in the same incarnation it sends nothing.
func TestAnUnchangedResyncTransactionRendersANewIncarnation(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f)
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}}
	if err := r.Render(ctx(t), txn); err != nil {
		t.Fatal(err)
	}
	f.take()
	if err := r.Render(ctx(t), txn); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the same resync in the same incarnation", f.take(), nil)
	f.restart()
	if err := r.Render(ctx(t), txn); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the same resync in a new incarnation", f.take(), []string{
		`cli_inband "set acl-plugin reclassify-sessions 1"`,
		"acl_dump -1",
		`acl_add_replace new "vcoil-pol@2 local-1" count=3 [permit 6 10.1.0.2/32 > 0.0.0.0/0:80; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
		`acl_add_replace new "vcoil-pol@2 reflect" count=6 [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
		"set_acl_lists 10.1.0.2 in=[] out=[], 10.1.0.3 in=[1] out=[0], uplink in=[] out=[], host in=[] out=[]",
	})
}

// A new vcoild (a new renderer) on a VPP that kept the ACLs of the earlier
// one adopts those whose rules a table needs, makes the others, deletes
// the tagged ACLs it does not need (but not while an interface it does not
// set still holds one), and leaves the ACLs of others alone.
func TestResyncAdoptsTheACLsItFindsByTag(t *testing.T) {
	f := newFakeVPP(t)
	old := newRenderer(t, f)
	if err := old.Render(ctx(t), renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}}); err != nil {
		t.Fatal(err)
	}
	ch, _, err := f.Channel(ctx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	for _, a := range []*acl.ACLAddReplace{
		{ACLIndex: ^uint32(0), Tag: "vcoil-svc-source-ranges", Count: 1, R: reflectEverything()[:1]},
		{ACLIndex: ^uint32(0), Tag: "vcoil-pol@2 local-7", Count: 1, R: []acl_types.ACLRule{reflectEverything()[1]}},
		{ACLIndex: ^uint32(0), Tag: "vcoil-pol@2 local-8", Count: 1, R: []acl_types.ACLRule{reflectEverything()[1]}},
	} {
		if err := vppapi.Call(ch, a, &acl.ACLAddReplaceReply{}); err != nil {
			t.Fatal(err)
		}
	}
	// A pod the new vcoild will not know still holds local-8 (ACL 4).
	if err := f.SetACLLists(ctx(t), 1, vpp.ACLPolicy, []vpp.ACLSetting{{Interface: vpp.ACLInterface{Pod: netip.MustParseAddr("10.1.0.99")}, Lists: vpp.ACLLists{Output: []uint32{4}}}}); err != nil {
		t.Fatal(err)
	}
	f.take()

	r := newRenderer(t, f)
	if err := r.Render(ctx(t), renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the new vcoild's first transaction", f.take(), []string{
		`cli_inband "set acl-plugin reclassify-sessions 1"`,
		"acl_dump -1",
		"set_acl_lists 10.1.0.2 in=[] out=[], 10.1.0.3 in=[1] out=[0], uplink in=[] out=[], host in=[] out=[]",
		"acl_del 3",
		"acl_del 4",
	})
	acls, lists := f.state()
	wantLines(t, "VPP's ACLs", acls, []string{
		`0 "vcoil-pol@2 local-1" [permit 6 10.1.0.2/32 > 0.0.0.0/0:80; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
		`1 "vcoil-pol@2 reflect" [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
		`2 "vcoil-svc-source-ranges" [reflect 0 0.0.0.0/0 > 0.0.0.0/0]`,
		`4 "vcoil-pol@2 local-8" [reflect 0 ::/0 > ::/0]`,
	})
	wantLines(t, "the lists", lists, []string{"10.1.0.3 in=[1] out=[0]", "10.1.0.99 in=[] out=[4]"})
}

// A list the dataplane refuses (more than 255 ACLs on one interface, with
// the services' ACLs) fails the transaction naming the interface, and the
// next transaction syncs everything.
func TestARefusedListMakesTheNextTransactionSyncEverything(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f)
	if err := r.Render(ctx(t), renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}}); err != nil {
		t.Fatal(err)
	}
	f.take()
	f.mu.Lock()
	f.failLists = func([]vpp.ACLSetting) error {
		return errors.New("the uplink interface: 256 ACLs (2 input, 254 output), VPP takes at most 255")
	}
	f.mu.Unlock()
	txn := renderer.Txn{Pods: []renderer.PodRules{{Pod: podA, IPs: []netip.Addr{ipA}, Egress: []renderer.Rule{permit(renderer.ProtocolTCP, "", "198.51.100.0/24", 443), deny()}}}}
	err := r.Render(ctx(t), txn)
	if err == nil || !strings.Contains(err.Error(), "the uplink interface: 256 ACLs") {
		t.Fatalf("a refused list: %v", err)
	}
	f.take()
	f.mu.Lock()
	f.failLists = nil
	f.mu.Unlock()
	if err := r.Render(ctx(t), renderer.Txn{Pods: []renderer.PodRules{open(podA, ipA)}}); err != nil {
		t.Fatal(err)
	}
	got := f.take()
	if len(got) == 0 || got[0] != "acl_dump -1" {
		t.Fatalf("the transaction after a failure did not sync everything:\n%s", strings.Join(got, "\n"))
	}
	acls, lists := f.state()
	// The failed transaction replaced b's table in place: the sync makes
	// it again and deletes the one VPP holds.
	wantLines(t, "VPP's ACLs after the sync", acls, []string{
		`1 "vcoil-pol@2 reflect" [reflect 6 0.0.0.0/0 > 0.0.0.0/0 flags=0x02/0x12; permit 6 0.0.0.0/0 > 0.0.0.0/0; reflect 0 0.0.0.0/0 > 0.0.0.0/0; reflect 6 ::/0 > ::/0 flags=0x02/0x12; permit 6 ::/0 > ::/0; reflect 0 ::/0 > ::/0]`,
		`3 "vcoil-pol@2 local-1" [permit 6 10.1.0.2/32 > 0.0.0.0/0:80; deny 0 0.0.0.0/0 > 0.0.0.0/0; deny 0 ::/0 > ::/0]`,
	})
	wantLines(t, "the lists after the sync", lists, []string{"10.1.0.3 in=[1] out=[3]"})
}

// A transaction whose tables need more ACL rules than the budget is
// refused before VPP is touched, and so is every later one until the
// tables fit; then the renderer syncs everything.
func TestTablesOverTheRuleBudgetAreRefusedBeforeVPPIsTouched(t *testing.T) {
	f := newFakeVPP(t)
	r, err := New(f, Config{MaxRules: 12}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	small := renderer.PodRules{Pod: podA, IPs: []netip.Addr{ipA}, Ingress: []renderer.Rule{permit(renderer.ProtocolTCP, "10.1.0.3/32", "", 80), renderer.DenyAll}}
	if err := r.Render(ctx(t), renderer.Txn{Resync: true, Pods: []renderer.PodRules{small}}); err != nil {
		t.Fatal(err)
	}
	held := len(f.acls)
	big := small
	big.Ingress = nil
	for i := range 6 {
		big.Ingress = append(big.Ingress, permit(renderer.ProtocolTCP, fmt.Sprintf("10.1.0.%d/32", 10+i), "", 80))
	}
	big.Ingress = append(big.Ingress, renderer.DenyAll)
	for range 2 {
		err := r.Render(ctx(t), renderer.Txn{Pods: []renderer.PodRules{big}})
		if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "the budget is 12") {
			t.Fatalf("Render over the budget: %v", err)
		}
		if len(f.acls) != held || len(f.acls[r.local[firstTable(r)].index].R) != 3 {
			t.Fatalf("VPP changed: %d ACLs", len(f.acls))
		}
	}
	if err := r.Render(ctx(t), renderer.Txn{Pods: []renderer.PodRules{small}}); err != nil {
		t.Fatalf("Render within the budget again: %v", err)
	}
	if !r.synced {
		t.Fatal("not synced after a transaction within the budget")
	}
	if _, err := New(f, Config{MaxRules: -1}, logr.Discard()); err == nil {
		t.Fatal("a negative budget is accepted")
	}
}

func firstTable(r *Renderer) renderer.TableID {
	for id := range r.local {
		return id
	}
	return ""
}
