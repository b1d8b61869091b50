package nftables

// The scripts below were reviewed line by line against the layout
// (layout.go, docs/policy.md) when the golden files were written; -update
// rewrites them, and a rewrite needs the same review. What was checked:
//
//   - create: a new table writes, in one script, the table and the format
//     set with the format comment, the four dispatch maps, the two self
//     sets (flushed), both base chains (flushed, with their hooks and
//     priorities and each rule carrying its ruleID comment), then each
//     group's sets (interval sets flagged interval, signature sets with the
//     signature as comment), counter, chain and rules (permits that return,
//     then the counted drop), then the elements: the groups' sets, the self
//     sets with every egress address, and last the dispatch maps, so that
//     no address jumps to an incomplete group. Pod c, without rules, is
//     nowhere.
//   - pod-added: a pod with the rules of an existing group adds only its
//     addresses to in4 and in6, jumping to that group.
//   - peer-added: every pod of a group gaining one peer changes the group's
//     set in place: one element.
//   - new-group: a pod whose rules take another layout gets a new chain,
//     g<next>, written complete before its address moves (deleted from in4
//     and added with the new jump); the old group keeps its other pods.
//   - pod-removed: only the pod's dispatch elements go; its group stays.
//   - ipblock-except: the configurator's subtraction of an except
//     (10.2.3.0/24 from 10.2.0.0/16, fd00:2:0:5::/64 from fd00:2::/48)
//     becomes merged ranges in the interval sets, for both families, and
//     an egress pod gets its "a . a" self elements.
//   - egress-pod-removed: removing an egress-isolated pod deletes its self
//     elements along with its map elements; its groups stay, idle.
//   - resync: a full resync of the same pods deletes the idle groups,
//     each chain flushed before its deletion and its sets and counter
//     after, and changes no element.
//   - create-logdrops: with LogDrops a group's drop is preceded by the
//     rate-limited log rule naming the group and direction.

import (
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// golden compares got with testdata/<name>, or writes it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("the script differs from %s (-update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// scriptRenderer is a Renderer of an empty fake table: step plans and
// writes its scripts, never runs them.
func scriptRenderer(t *testing.T, logDrops bool) *Renderer {
	t.Helper()
	return fakeRenderer(t, newFake(), logDrops)
}

// step plans txn as Render does and returns the transaction's script, then
// commits the plan as if the kernel had taken it. The first step finds no
// table.
func step(t *testing.T, r *Renderer, txn renderer.Txn) string {
	t.Helper()
	affected := r.want(txn)
	full := txn.Resync || !r.synced
	var read *adoption
	if !r.synced {
		r.resetMirror()
		read = &adoption{}
	}
	p := r.planTxn(affected, full, read)
	st, err := p.script(r)
	if err != nil {
		t.Fatal(err)
	}
	p.commit(r)
	r.synced = true
	return st.text(r.cfg.Table)
}

func podRules(name string, ips []string, in, eg []renderer.Rule) renderer.PodRules {
	pr := renderer.PodRules{Pod: renderer.PodID{Namespace: "ns", Name: name}, Ingress: in, Egress: eg}
	for _, s := range ips {
		pr.IPs = append(pr.IPs, addr(s))
	}
	return pr
}

// exceptRules permits peers of an ipBlock with excepts as the configurator
// writes them: the block minus the excepts, as prefixes.
func exceptRules(d renderer.Direction, block string, except []string, proto renderer.Protocol, ports renderer.PortRange) []renderer.Rule {
	var ex []netip.Prefix
	for _, e := range except {
		ex = append(ex, pfx(e))
	}
	var out []renderer.Rule
	for _, n := range configurator.SubtractSubnets(pfx(block), ex) {
		out = append(out, permit(d, n.String(), proto, ports))
	}
	return out
}

func TestScriptsOfChangesMatchTheirGoldenFiles(t *testing.T) {
	ingress := []renderer.Rule{
		// hostPorts: an exact peer and port, in both families.
		permit(renderer.Ingress, "10.1.0.5/32", renderer.ProtocolTCP, renderer.SinglePort(80)),
		permit(renderer.Ingress, "fd00:1::5/128", renderer.ProtocolUDP, renderer.SinglePort(53)),
		// hosts and nets: every protocol.
		permit(renderer.Ingress, "10.1.0.9/32", renderer.ProtocolAny, renderer.AnyPort),
		permit(renderer.Ingress, "10.3.0.0/16", renderer.ProtocolAny, renderer.AnyPort),
		// A signature: a port range, from networks of both families.
		permit(renderer.Ingress, "10.2.0.0/16", renderer.ProtocolTCP, renderer.PortRange{First: 8000, Last: 8080}),
		permit(renderer.Ingress, "fd00:2::/48", renderer.ProtocolTCP, renderer.PortRange{First: 8000, Last: 8080}),
	}
	egress := list(permit(renderer.Egress, "10.1.0.0/24", renderer.ProtocolAny, renderer.AnyPort))
	in := list(ingress...)
	a := podRules("a", []string{"10.0.0.1", "fd00::1"}, in, egress)
	b := podRules("b", []string{"10.0.0.2"}, in, nil)
	c := podRules("c", []string{"10.0.0.3"}, nil, nil)
	d := podRules("d", []string{"10.0.0.4", "fd00::4"}, in, nil)

	morePeers := list(append(ingress[:len(ingress):len(ingress)], permit(renderer.Ingress, "10.1.0.6/32", renderer.ProtocolTCP, renderer.SinglePort(80)))...)
	a2, b2, d2 := a, b, d
	a2.Ingress, b2.Ingress, d2.Ingress = morePeers, morePeers, morePeers
	b3 := b
	b3.Ingress = list(append(ingress[:len(ingress):len(ingress)], permit(renderer.Ingress, "", renderer.ProtocolUDP, renderer.PortRange{First: 5000, Last: 5100}))...)

	var exceptIn, exceptEg []renderer.Rule
	exceptIn = append(exceptIn, exceptRules(renderer.Ingress, "10.2.0.0/16", []string{"10.2.3.0/24"}, renderer.ProtocolAny, renderer.AnyPort)...)
	exceptIn = append(exceptIn, exceptRules(renderer.Ingress, "fd00:2::/48", []string{"fd00:2:0:5::/64"}, renderer.ProtocolAny, renderer.AnyPort)...)
	exceptEg = append(exceptEg, exceptRules(renderer.Egress, "10.2.0.0/16", []string{"10.2.3.0/24"}, renderer.ProtocolTCP, renderer.SinglePort(443))...)
	exceptEg = append(exceptEg, exceptRules(renderer.Egress, "fd00:2::/48", []string{"fd00:2:0:5::/64"}, renderer.ProtocolTCP, renderer.SinglePort(443))...)
	e := podRules("e", []string{"10.0.0.5", "fd00::5"}, list(exceptIn...), list(exceptEg...))

	r := scriptRenderer(t, false)
	for _, s := range []struct {
		name string
		txn  renderer.Txn
	}{
		{"create", renderer.Txn{Resync: true, Pods: []renderer.PodRules{a, b, c}}},
		{"pod-added", renderer.Txn{Pods: []renderer.PodRules{d}}},
		{"peer-added", renderer.Txn{Pods: []renderer.PodRules{a2, b2, d2}}},
		{"new-group", renderer.Txn{Pods: []renderer.PodRules{b3}}},
		{"pod-removed", renderer.Txn{Pods: []renderer.PodRules{{Pod: d.Pod, Removed: true}}}},
		{"ipblock-except", renderer.Txn{Pods: []renderer.PodRules{e}}},
		{"egress-pod-removed", renderer.Txn{Pods: []renderer.PodRules{{Pod: a.Pod, Removed: true}}}},
		{"resync", renderer.Txn{Resync: true, Pods: []renderer.PodRules{b3, c, e}}},
	} {
		golden(t, filepath.Join("scripts", s.name+".nft"), step(t, r, s.txn))
	}

	logged := scriptRenderer(t, true)
	golden(t, "scripts/create-logdrops.nft", step(t, logged, renderer.Txn{Resync: true, Pods: []renderer.PodRules{
		podRules("a", []string{"10.0.0.1"}, list(permit(renderer.Ingress, "10.1.0.0/16", renderer.ProtocolAny, renderer.AnyPort)), nil),
	}}))
}

// TestAScriptWithoutChangesIsEmpty: a plan over a synced mirror that
// changes nothing writes nothing.
func TestAScriptWithoutChangesIsEmpty(t *testing.T) {
	r := scriptRenderer(t, false)
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{
		podRules("a", []string{"10.0.0.1", "fd00::1"}, list(permit(renderer.Ingress, "10.1.0.0/16", renderer.ProtocolAny, renderer.AnyPort)), nil),
	}}
	if s := step(t, r, txn); !strings.Contains(s, "add table") {
		t.Fatalf("the first script creates no table:\n%s", s)
	}
	for _, again := range []renderer.Txn{txn, {Pods: txn.Pods}} {
		if s := step(t, r, again); s != "" {
			t.Fatalf("an unchanged state (resync %v) wrote:\n%s", again.Resync, s)
		}
	}
}
