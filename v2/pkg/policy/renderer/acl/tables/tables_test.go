package tables_test

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl/tables"
)

// rule builds a rule from "permit|deny proto src -> dst [port]" where proto
// is any|tcp|udp, networks are any or CIDRs, and port is N or N-M.
func rule(t *testing.T, s string) renderer.Rule {
	t.Helper()
	f := strings.Fields(s)
	if len(f) < 5 || f[3] != "->" {
		t.Fatalf("bad rule %q", s)
	}
	r := renderer.Rule{SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}
	if f[0] == "permit" {
		r.Action = renderer.ActionPermit
	}
	switch f[1] {
	case "tcp":
		r.Protocol = renderer.ProtocolTCP
	case "udp":
		r.Protocol = renderer.ProtocolUDP
	}
	net := func(s string) netip.Prefix {
		if s == "any" {
			return renderer.AnyNetwork
		}
		return netip.MustParsePrefix(s)
	}
	r.SrcNetwork, r.DstNetwork = net(f[2]), net(f[4])
	if len(f) == 6 {
		first, last, isRange := strings.Cut(f[5], "-")
		if !isRange {
			last = first
		}
		a, _ := strconv.Atoi(first)
		b, _ := strconv.Atoi(last)
		r.DstPort = renderer.PortRange{First: uint16(a), Last: uint16(b)}
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	return r
}

func rules(t *testing.T, ss ...string) []renderer.Rule {
	t.Helper()
	var out []renderer.Rule
	for _, s := range ss {
		out = append(out, rule(t, s))
	}
	return out
}

func pod(name string, ips ...string) renderer.PodRules {
	p := renderer.PodRules{Pod: renderer.PodID{Namespace: "ns", Name: name}}
	for _, ip := range ips {
		p.IPs = append(p.IPs, netip.MustParseAddr(ip))
	}
	return p
}

func id(name string) renderer.PodID { return renderer.PodID{Namespace: "ns", Name: name} }

func apply(t *testing.T, c *tables.Cache, txn renderer.Txn) tables.Changes {
	t.Helper()
	ch, err := c.Apply(txn)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return ch
}

func wantTable(t *testing.T, c *tables.Cache, name string, want []renderer.Rule) {
	t.Helper()
	got, ok := c.LocalTable(id(name))
	if !ok && want != nil {
		t.Fatalf("pod %s has no local table, want\n%s", name, want)
	}
	if !slices.Equal(got.Rules, want) {
		t.Fatalf("local table of %s:\n%v\nwant\n%v", name, got.Rules, want)
	}
}

// A CombineRules scenario: web admits the client on TCP 80
// and 8080, the client may only send to web on TCP 80.
func webAndClient(t *testing.T) renderer.Txn {
	web := pod("web", "10.0.0.1")
	web.Ingress = rules(t,
		"permit tcp 10.0.0.2/32 -> any 80",
		"permit tcp 10.0.0.2/32 -> any 8080",
		"deny any any -> any")
	client := pod("client", "10.0.0.2")
	client.Egress = rules(t,
		"permit tcp any -> 10.0.0.1/32 80",
		"deny any any -> any")
	return renderer.Txn{Pods: []renderer.PodRules{web, client}}
}

func TestCombineRulesKeepsOnlyWhatBothEndsPermit(t *testing.T) {
	c := tables.New(renderer.Ingress)
	ch := apply(t, c, webAndClient(t))
	wantTable(t, c, "web", rules(t,
		"permit tcp 10.0.0.2/32 -> any 80",
		"deny any 10.0.0.2/32 -> any",
		"deny any any -> any"))
	wantTable(t, c, "client", nil)
	wantGlobal := rules(t,
		"permit tcp 10.0.0.2/32 -> 10.0.0.1/32 80",
		"deny any 10.0.0.2/32 -> any",
		"permit any any -> any")
	if got := c.GlobalTable().Rules; !slices.Equal(got, wantGlobal) {
		t.Fatalf("global table:\n%v\nwant\n%v", got, wantGlobal)
	}
	if len(ch.Added) != 1 || ch.Global == nil || len(ch.Assignments) != 1 || ch.Assignments[0].Pod != id("web") {
		t.Fatalf("changes of the first transaction: %+v", ch)
	}
}

func TestCombineRulesLeavesRulesAloneWhenThePeerMaySendMore(t *testing.T) {
	c := tables.New(renderer.Ingress)
	txn := webAndClient(t)
	txn.Pods[1].Egress = rules(t, "permit any any -> 10.0.0.0/24", "deny any any -> any")
	apply(t, c, txn)
	wantTable(t, c, "web", txn.Pods[0].Ingress)
}

func TestAnOpenPodGetsATableWhenARestrictedLocalPeerTalksToIt(t *testing.T) {
	c := tables.New(renderer.Ingress)
	txn := webAndClient(t)
	txn.Pods[0].Ingress = nil
	apply(t, c, txn)
	wantTable(t, c, "web", rules(t,
		"permit tcp 10.0.0.2/32 -> any 80",
		"deny any 10.0.0.2/32 -> any",
		"permit any any -> any"))
}

func TestEgressTablesMirrorTheIngressTables(t *testing.T) {
	c := tables.New(renderer.Egress)
	apply(t, c, webAndClient(t))
	// The client may send only what web admits; web admits more, so the
	// client's table is its own rules.
	wantTable(t, c, "client", rules(t,
		"permit tcp any -> 10.0.0.1/32 80",
		"deny any any -> any"))
	wantTable(t, c, "web", nil)
	wantGlobal := rules(t,
		"permit tcp 10.0.0.2/32 -> 10.0.0.1/32 80",
		"permit tcp 10.0.0.2/32 -> 10.0.0.1/32 8080",
		"deny any any -> 10.0.0.1/32",
		"permit any any -> any")
	if got := c.GlobalTable().Rules; !slices.Equal(got, wantGlobal) {
		t.Fatalf("global table:\n%v\nwant\n%v", got, wantGlobal)
	}

	// Web narrowed to 8080 only: now the client's table must say so.
	txn := webAndClient(t)
	txn.Pods[0].Ingress = rules(t, "permit tcp 10.0.0.2/32 -> any 8080", "deny any any -> any")
	apply(t, c, txn)
	wantTable(t, c, "client", rules(t,
		"deny any any -> 10.0.0.1/32",
		"deny any any -> any"))
}

func TestTheGlobalTableKeepsEachFamilyWithItsAddress(t *testing.T) {
	c := tables.New(renderer.Ingress)
	p := pod("dual", "10.0.0.5", "fd00::5")
	p.Egress = rules(t,
		"permit tcp any -> 10.0.0.3/32 80",
		"permit tcp any -> fd00::3/128 80",
		"deny any any -> any")
	apply(t, c, renderer.Txn{Pods: []renderer.PodRules{p}})
	want := rules(t,
		"permit tcp 10.0.0.5/32 -> 10.0.0.3/32 80",
		"deny any 10.0.0.5/32 -> any",
		"permit tcp fd00::5/128 -> fd00::3/128 80",
		"deny any fd00::5/128 -> any",
		"permit any any -> any")
	if got := c.GlobalTable().Rules; !slices.Equal(got, want) {
		t.Fatalf("global table:\n%v\nwant\n%v", got, want)
	}
}

func TestPodsWithEqualTablesShareOneAndChangesAreMinimal(t *testing.T) {
	c := tables.New(renderer.Ingress)
	a := rules(t, "permit tcp 10.0.0.9/32 -> any 80", "deny any any -> any")
	b := rules(t, "permit tcp 10.0.0.9/32 -> any 443", "deny any any -> any")
	d := rules(t, "permit udp 10.0.0.9/32 -> any 53", "deny any any -> any")
	e := rules(t, "permit udp 10.0.0.9/32 -> any 54", "deny any any -> any")
	withIngress := func(p renderer.PodRules, r []renderer.Rule) renderer.PodRules { p.Ingress = r; return p }
	one, two := pod("one", "10.0.0.1"), pod("two", "10.0.0.2")

	type step struct {
		name        string
		txn         renderer.Txn
		added       int
		changed     []renderer.TableID
		removed     []renderer.TableID
		assignments []tables.Assignment
	}
	steps := []step{
		{"two pods with equal rules share one new table",
			renderer.Txn{Pods: []renderer.PodRules{withIngress(one, a), withIngress(two, a)}},
			1, nil, nil, []tables.Assignment{{Pod: id("one"), Table: "local-1"}, {Pod: id("two"), Table: "local-1"}}},
		{"a pod that leaves a shared table gets a new one",
			renderer.Txn{Pods: []renderer.PodRules{withIngress(two, b)}},
			1, nil, nil, []tables.Assignment{{Pod: id("two"), Table: "local-2"}}},
		{"a pod joining an equal table frees its own",
			renderer.Txn{Pods: []renderer.PodRules{withIngress(one, b)}},
			0, nil, []renderer.TableID{"local-1"}, []tables.Assignment{{Pod: id("one"), Table: "local-2"}}},
		{"a pod leaving again gets a new table",
			renderer.Txn{Pods: []renderer.PodRules{withIngress(one, d)}},
			1, nil, nil, []tables.Assignment{{Pod: id("one"), Table: "local-3"}}},
		{"a table of one pod is changed in place",
			renderer.Txn{Pods: []renderer.PodRules{withIngress(one, e)}},
			0, []renderer.TableID{"local-3"}, nil, nil},
		{"the same rules again change nothing",
			renderer.Txn{Pods: []renderer.PodRules{withIngress(one, e), withIngress(two, b)}},
			0, nil, nil, nil},
		{"a resync forgets the pods it does not list",
			renderer.Txn{Resync: true, Pods: []renderer.PodRules{withIngress(two, b)}},
			0, nil, []renderer.TableID{"local-3"}, []tables.Assignment{{Pod: id("one")}}},
		{"a pod that becomes open loses its table",
			renderer.Txn{Pods: []renderer.PodRules{two}},
			0, nil, []renderer.TableID{"local-2"}, []tables.Assignment{{Pod: id("two")}}},
	}
	for _, s := range steps {
		ch := apply(t, c, s.txn)
		var changed []renderer.TableID
		for _, tbl := range ch.Changed {
			changed = append(changed, tbl.ID)
		}
		if len(ch.Added) != s.added || !slices.Equal(changed, s.changed) || !slices.Equal(ch.Removed, s.removed) ||
			!slices.Equal(ch.Assignments, s.assignments) || ch.Global != nil {
			t.Fatalf("%s: changes %+v;\nwant %d added, changed %v, removed %v, assignments %v",
				s.name, ch, s.added, s.changed, s.removed, s.assignments)
		}
		if s.name == "the same rules again change nothing" && !ch.Empty() {
			t.Fatalf("%s: Empty() is false for %+v", s.name, ch)
		}
	}
	if n := len(c.LocalTables()); n != 0 {
		t.Fatalf("%d tables are left without pods", n)
	}
}

func TestApplyRejectsAnInvalidTransactionWithoutChangingAnything(t *testing.T) {
	valid := webAndClient(t)
	cases := []struct {
		name string
		txn  func() renderer.Txn
		want string
	}{
		{"a pod listed twice", func() renderer.Txn {
			txn := webAndClient(t)
			txn.Pods = append(txn.Pods, txn.Pods[0])
			return txn
		}, "listed twice"},
		{"a pod without an address", func() renderer.Txn {
			return renderer.Txn{Pods: []renderer.PodRules{pod("pending")}}
		}, "no address"},
		{"two addresses of one family", func() renderer.Txn {
			return renderer.Txn{Pods: []renderer.PodRules{pod("two", "10.0.0.7", "10.0.0.8")}}
		}, "more than one per family"},
		{"unsorted rules", func() renderer.Txn {
			p := pod("web", "10.0.0.1")
			p.Ingress = rules(t, "permit tcp 10.0.0.0/24 -> any 80", "permit tcp 10.0.0.2/32 -> any 80", "deny any any -> any")
			return renderer.Txn{Pods: []renderer.PodRules{p}}
		}, "not sorted"},
		{"a rule on source ports", func() renderer.Txn {
			p := pod("web", "10.0.0.1")
			r := rule(t, "permit tcp 10.0.0.2/32 -> any 80")
			r.SrcPort = renderer.SinglePort(1234)
			p.Ingress = []renderer.Rule{r, renderer.DenyAll}
			return renderer.Txn{Pods: []renderer.PodRules{p}}
		}, "source ports"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tables.New(renderer.Ingress)
			apply(t, c, valid)
			before := c.LocalTables()
			_, err := c.Apply(tc.txn())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Apply = %v, want an error containing %q", err, tc.want)
			}
			if after := c.LocalTables(); !slices.EqualFunc(before, after, func(a, b renderer.Table) bool {
				return a.ID == b.ID && slices.Equal(a.Rules, b.Rules)
			}) {
				t.Fatalf("a rejected transaction changed the tables")
			}
		})
	}
}

// TestPodsReturnsTheNewestInputEvenWhenTheTablesDoNotChange: a pod whose
// NetworkPolicy lists stay and whose ClusterNetworkPolicy tiers go is
// listed by Pods without them. The ACL renderer seeds the ordered cache
// with Pods when tiers appear again; stale tiers there once gave a pod
// that no policy selected any more the table of a deleted policy.
func TestPodsReturnsTheNewestInputEvenWhenTheTablesDoNotChange(t *testing.T) {
	c := tables.New(renderer.Ingress)
	a := pod("a", "10.0.0.1")
	a.Admin[renderer.Ingress] = []renderer.TierRule{{Action: renderer.TierDeny, Policy: "gone",
		Match: renderer.Rule{SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}}}
	if _, err := c.Apply(renderer.Txn{Resync: true, Pods: []renderer.PodRules{a}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Apply(renderer.Txn{Pods: []renderer.PodRules{pod("a", "10.0.0.1")}}); err != nil {
		t.Fatal(err)
	}
	if got := c.Pods(); len(got) != 1 || got[0].HasTiers() {
		t.Fatalf("Pods after the tiers went: %+v", got)
	}
}
