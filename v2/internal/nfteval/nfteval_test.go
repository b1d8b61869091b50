package nfteval

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// requireNft skips t unless it can load rulesets: root and the nft tool.
func requireNft(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("skipped: the nft tool is not installed; the evaluator is checked against what nft lists")
	}
}

// load loads ruleset (which defines table inet t) with nft into ns and reads
// it back as nft lists it.
func load(t *testing.T, ns *netnstest.NS, ruleset string) []byte {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ruleset.nft")
	if err := os.WriteFile(f, []byte(ruleset), 0o600); err != nil {
		t.Fatal(err)
	}
	ns.Exec("nft", "-f", f)
	return []byte(ns.Exec("nft", "-j", "list", "table", "inet", "t"))
}

// policyLike is a table shaped like a policy table: per-pod chains reached
// through a verdict map on the output interface (jump for one pod, goto for
// the other), named and anonymous sets, intervals and a concatenation, a
// second forward chain at a later priority and an input chain whose policy
// is drop. Every rule that decides has a comment the cases name.
const policyLike = `
table inet t {
  set pods4 { type ipv4_addr; elements = { 10.1.0.5, 10.1.0.6 } }
  set blocks { type ipv4_addr; flags interval; elements = { 10.0.0.0/8, 172.16.0.1-172.16.0.9 } }
  set blocks6 { type ipv6_addr; flags interval; elements = { fd00::/8 } }
  set peers { type ipv4_addr . inet_proto . inet_service; flags interval
    elements = { 10.1.0.0/24 . tcp . 80-90, 10.2.0.5 . udp . 53 } }
  map to_pod { type ifname : verdict; elements = { "vcoila" : jump pod_a, "vcoilb" : goto pod_b } }
  chain pod_a {
    ip saddr @pods4 tcp dport { 80, 443 } counter accept comment "web from pods"
    ip saddr . meta l4proto . th dport @peers accept comment "peers"
    ip6 saddr @blocks6 udp dport 1000-2000 accept comment "v6 udp range"
    return
  }
  chain pod_b {
    meta l4proto != { tcp, sctp } drop comment "tcp or sctp only"
    th dport vmap { 22 : drop, 80 : accept } comment "ports"
    ip saddr != @blocks log prefix "outside " drop comment "outside blocks"
    jump tail
  }
  chain tail {
    sctp dport 5000 accept comment "sctp"
    tcp dport < 1024 reject comment "low ports"
  }
  chain forward {
    type filter hook forward priority filter; policy accept;
    ct state established,related accept comment "established"
    ct state invalid drop comment "invalid"
    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept comment "nd"
    meta mark 0x10 accept comment "marked"
    iifname "ext1" jump tail
    iifname "ext2" th dport 7 accept comment "th only"
    oifname vmap @to_pod
    oifname "vcoil*" drop comment "other pods"
  }
  chain late {
    type filter hook forward priority 10; policy accept;
    iifname "ext0" tcp dport 8080 drop comment "late drop"
  }
  chain post {
    type filter hook postrouting priority srcnat + 10; policy accept;
    fib saddr type local accept comment "from the node"
    oifname "vcoilb" ip saddr 10.9.9.9 drop comment "post drop"
  }
  chain input {
    type filter hook input priority filter; policy drop;
    icmpv6 type { nd-neighbor-solicit, nd-neighbor-advert } accept comment "nd to node"
    icmp type echo-request accept comment "ping"
    ct state established accept comment "node established"
    fib daddr type local tcp dport 22 accept comment "ssh"
    ip6 daddr ::1 accept comment "v6 loopback"
  }
}
`

// want is an expected result: the verdict and the comment of the rule that
// gave it, or "policy <chain>".
type want struct {
	verdict Verdict
	by      string
}

func byOf(d Decision) string {
	if d.Policy {
		return "policy " + d.Chain
	}
	return d.Comment
}

func tcp(src, dst string, dport uint16) Packet {
	return Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: TCP, SrcPort: 40000, DstPort: dport}
}

func udp(src, dst string, dport uint16) Packet {
	p := tcp(src, dst, dport)
	p.Proto = UDP
	return p
}

func with(p Packet, f func(*Packet)) Packet { f(&p); return p }

func fwd(p Packet, iif, oif string) Packet {
	p.IIF, p.OIF = iif, oif
	return p
}

func TestEvaluatorGivesTheKernelsVerdictsOfAPolicyLikeTable(t *testing.T) {
	requireNft(t)
	tbl, err := Parse(load(t, netnstest.New(t, "eval"), policyLike))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	const podA, podB, other, remote = "10.1.0.5", "10.1.0.6", "10.1.0.9", "10.2.0.5"
	cases := []struct {
		name string
		hook Hook
		p    Packet
		want want
	}{
		{"a pod in the named set reaches a web port of pod a (jump, anonymous set)", Forward,
			fwd(tcp(podB, podA, 443), "vcoilb", "vcoila"), want{Accept, "web from pods"}},
		{"an address of a prefix in a concatenation with a port range is a peer", Forward,
			fwd(tcp(other, podA, 85), "vcoilb", "vcoila"), want{Accept, "peers"}},
		{"a port past the concatenation's range returns from pod a and meets the rule after the map", Forward,
			fwd(tcp(other, podA, 91), "vcoilb", "vcoila"), want{Drop, "other pods"}},
		{"the concatenation's protocol component is compared", Forward,
			fwd(udp(podB, podA, 80), "vcoilb", "vcoila"), want{Drop, "other pods"}},
		{"a single address and port of the concatenation", Forward,
			fwd(udp(remote, podA, 53), "peer0", "vcoila"), want{Accept, "peers"}},
		{"an IPv6 source in an interval set with a UDP port range", Forward,
			fwd(udp("fd00::1", "fd00:1::5", 1500), "vcoilb", "vcoila"), want{Accept, "v6 udp range"}},
		{"the end of the IPv6 port range is inclusive", Forward,
			fwd(udp("fd00::1", "fd00:1::5", 2000), "vcoilb", "vcoila"), want{Accept, "v6 udp range"}},
		{"past the IPv6 port range", Forward,
			fwd(udp("fd00::1", "fd00:1::5", 2001), "vcoilb", "vcoila"), want{Drop, "other pods"}},
		{"an IPv6 source outside the interval set", Forward,
			fwd(udp("2001:db8::1", "fd00:1::5", 1500), "ext0", "vcoila"), want{Drop, "other pods"}},
		{"a udp port match does not match TCP", Forward,
			fwd(tcp("fd00::1", "fd00:1::5", 1500), "vcoilb", "vcoila"), want{Drop, "other pods"}},
		{"an ICMPv6 echo does not match a udp port match", Forward,
			fwd(Packet{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00:1::5"), Proto: ICMPv6, ICMPType: 128}, "vcoilb", "vcoila"),
			want{Drop, "other pods"}},
		{"neighbour discovery by an anonymous set of ICMPv6 types", Forward,
			fwd(Packet{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00:1::5"), Proto: ICMPv6, ICMPType: 135}, "vcoilb", "vcoila"),
			want{Accept, "nd"}},
		{"established traffic is accepted first", Forward,
			with(fwd(tcp(other, podA, 9999), "vcoilb", "vcoila"), func(p *Packet) { p.Ct = CtEstablished }), want{Accept, "established"}},
		{"related traffic too", Forward,
			with(fwd(tcp(other, podA, 9999), "vcoilb", "vcoila"), func(p *Packet) { p.Ct = CtRelated }), want{Accept, "established"}},
		{"invalid traffic is dropped", Forward,
			with(fwd(tcp(podB, podA, 80), "vcoilb", "vcoila"), func(p *Packet) { p.Ct = CtInvalid }), want{Drop, "invalid"}},
		{"a mark", Forward,
			with(fwd(tcp(other, podA, 9999), "vcoilb", "vcoila"), func(p *Packet) { p.Mark = 0x10 }), want{Accept, "marked"}},
		{"another mark", Forward,
			with(fwd(tcp(other, podA, 9999), "vcoilb", "vcoila"), func(p *Packet) { p.Mark = 0x11 }), want{Drop, "other pods"}},
		{"!= with an anonymous set", Forward,
			fwd(udp(podA, podB, 80), "vcoila", "vcoilb"), want{Drop, "tcp or sctp only"}},
		{"an anonymous verdict map's drop", Forward,
			fwd(tcp(podA, podB, 22), "vcoila", "vcoilb"), want{Drop, "ports"}},
		{"an anonymous verdict map's accept", Forward,
			fwd(tcp(podA, podB, 80), "vcoila", "vcoilb"), want{Accept, "ports"}},
		{"!= with a named interval set", Forward,
			fwd(tcp("203.0.113.10", podB, 8443), "ext0", "vcoilb"), want{Drop, "outside blocks"}},
		{"a range of the interval set", Forward,
			fwd(tcp("172.16.0.9", podB, 443), "ext0", "vcoilb"), want{Reject, "low ports"}},
		{"past the range of the interval set", Forward,
			fwd(tcp("172.16.0.10", podB, 443), "ext0", "vcoilb"), want{Drop, "outside blocks"}},
		{"reject, and < on a port", Forward,
			fwd(tcp(podA, podB, 443), "vcoila", "vcoilb"), want{Reject, "low ports"}},
		{"the end of a chain reached by goto applies the base chain's policy, then the later chain runs", Forward,
			fwd(tcp(podA, podB, 8443), "vcoila", "vcoilb"), want{Accept, "policy late"}},
		{"an ip saddr match does not apply to IPv6, even with !=", Forward,
			fwd(tcp("fd00:1::5", "fd00:1::6", 8443), "vcoila", "vcoilb"), want{Accept, "policy late"}},
		{"sctp ports", Forward,
			with(fwd(tcp(podA, "198.18.0.9", 5000), "ext1", "peer0"), func(p *Packet) { p.Proto = SCTP }), want{Accept, "sctp"}},
		{"a jump's chain ends and the caller goes on", Forward,
			with(fwd(tcp(podA, "198.18.0.9", 5001), "ext1", "peer0"), func(p *Packet) { p.Proto = SCTP }), want{Accept, "policy late"}},
		{"a later base chain drops what the first accepted", Forward,
			fwd(tcp("203.0.113.10", "198.18.0.9", 8080), "ext0", "peer0"), want{Drop, "late drop"}},
		{"an interface name wildcard", Forward,
			fwd(tcp("203.0.113.10", "10.1.0.7", 8080), "ext2", "vcoilc"), want{Drop, "other pods"}},
		{"an ICMP packet misses a concatenation with th dport by its protocol", Forward,
			fwd(Packet{Src: netip.MustParseAddr(other), Dst: netip.MustParseAddr(podA), Proto: ICMP, ICMPType: 8}, "vcoilb", "vcoila"),
			want{Drop, "other pods"}},
		{"fib saddr type local", Postrouting,
			with(tcp("10.9.9.9", podB, 80), func(p *Packet) { p.OIF, p.SrcLocal = "vcoilb", true }), want{Accept, "from the node"}},
		{"not from the node", Postrouting,
			fwd(tcp("10.9.9.9", podB, 80), "ext0", "vcoilb"), want{Drop, "post drop"}},
		{"fib daddr type local", Input,
			with(tcp("203.0.113.10", "198.18.0.1", 22), func(p *Packet) { p.IIF, p.DstLocal = "ext0", true }), want{Accept, "ssh"}},
		{"an input chain's drop policy", Input,
			with(tcp("203.0.113.10", "198.18.0.1", 23), func(p *Packet) { p.IIF, p.DstLocal = "ext0", true }), want{Drop, "policy input"}},
		{"an IPv6 literal", Input,
			with(tcp("::1", "::1", 23), func(p *Packet) { p.IIF, p.DstLocal = "lo", true }), want{Accept, "v6 loopback"}},
		{"an ICMP type", Input,
			with(Packet{Src: netip.MustParseAddr(podA), Dst: netip.MustParseAddr("169.254.1.1"), Proto: ICMP, ICMPType: 8}, func(p *Packet) { p.IIF, p.DstLocal = "vcoila", true }),
			want{Accept, "ping"}},
		{"an ICMP type of IPv4 does not match ICMPv6", Input,
			with(Packet{Src: netip.MustParseAddr("fd00:1::5"), Dst: netip.MustParseAddr("fd00::1"), Proto: ICMPv6, ICMPType: 8}, func(p *Packet) { p.IIF, p.DstLocal = "vcoila", true }),
			want{Drop, "policy input"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := tbl.Evaluate(c.hook, c.p)
			if err != nil {
				t.Fatalf("Evaluate(%s, %s): %v", c.hook, c.p, err)
			}
			if got.Verdict != c.want.verdict || byOf(got.By) != c.want.by || !got.Applies {
				t.Errorf("Evaluate(%s, %s) = %s, want %s by %q", c.hook, c.p, got, c.want.verdict, c.want.by)
			}
		})
	}

	t.Run("the path names the chains a jump and a goto went through", func(t *testing.T) {
		got, err := tbl.Evaluate(Forward, fwd(tcp(podA, podB, 443), "vcoila", "vcoilb"))
		if err != nil {
			t.Fatal(err)
		}
		if p := strings.Join(got.By.Path, ">"); p != "forward>pod_b>tail" {
			t.Errorf("path %s, want forward>pod_b>tail", p)
		}
		if got.By.Handle == 0 || got.By.Chain != "tail" {
			t.Errorf("decision %+v, want a rule of chain tail with its handle", got.By)
		}
	})
	t.Run("the rules whose return the packet took are named", func(t *testing.T) {
		got, err := tbl.Evaluate(Forward, fwd(tcp(other, podA, 91), "vcoilb", "vcoila"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.By.Returned) != 1 || !strings.HasPrefix(got.By.Returned[0], "pod_a#") {
			t.Errorf("returned %v, want the return rule of chain pod_a", got.By.Returned)
		}
	})
	t.Run("each base chain's decision is reported in priority order", func(t *testing.T) {
		got, err := tbl.Evaluate(Forward, fwd(tcp("203.0.113.10", "198.18.0.9", 8080), "ext0", "peer0"))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Chains) != 2 || byOf(got.Chains[0]) != "policy forward" || byOf(got.Chains[1]) != "late drop" {
			t.Errorf("chains %v, want the forward chain's policy, then late's drop", got.Chains)
		}
	})
	t.Run("a hook without base chains lets the packet pass", func(t *testing.T) {
		got, err := tbl.Evaluate(Output, tcp("198.18.0.1", podA, 80))
		if err != nil {
			t.Fatal(err)
		}
		if got.Applies || !got.Allowed() {
			t.Errorf("output: %+v, want accept without a base chain", got)
		}
	})
	t.Run("th ports of an ICMP packet are an error, not a guess", func(t *testing.T) {
		p := fwd(Packet{Src: netip.MustParseAddr(other), Dst: netip.MustParseAddr(podA), Proto: ICMP, ICMPType: 8}, "ext2", "vcoila")
		if got, err := tbl.Evaluate(Forward, p); err == nil || !strings.Contains(err.Error(), "th dport") {
			t.Errorf("Evaluate(%s) = %v, %v; want an error naming th dport", p, got, err)
		}
	})
}

func TestWhatTheEvaluatorDoesNotModelIsAnError(t *testing.T) {
	requireNft(t)
	ns := netnstest.New(t, "eval")
	for _, c := range []struct {
		name, rule, want string
	}{
		{"a ct key other than state", `ct mark 1 accept`, "ct"},
		{"a meta key it does not read", `meta skuid 0 accept`, "meta"},
		{"a payload field it does not read", `tcp flags syn accept`, "payload"},
		{"a raw payload", `@th,0,8 1 accept`, "payload"},
		{"an IP header field it does not read", `ip dscp 1 accept`, "payload"},
		{"a fib lookup other than the destination's type", `fib saddr . iif oif missing drop`, "fib"},
		{"a fib type other than local", `fib daddr type unicast accept`, "local"},
		{"a limit before a verdict", `limit rate 1/second accept`, "limit"},
		{"a statement that changes the packet", `meta mark set 1`, "mangle"},
		{"a conntrack bypass", `notrack`, "notrack"},
		{"a conntrack mark being set", `ct mark set 1`, "mangle"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns.Exec("nft", "add table inet t; delete table inet t")
			js := load(t, ns, "table inet t {\n chain c {\n type filter hook prerouting priority filter\n "+c.rule+"\n }\n}\n")
			_, err := Parse(js)
			if err == nil || !strings.Contains(err.Error(), "chain c") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse of %q: %v, want an error naming chain c and %q", c.rule, err, c.want)
			}
		})
	}
	t.Run("a set of a type it does not read", func(t *testing.T) {
		ns.Exec("nft", "add table inet t; delete table inet t")
		js := load(t, ns, "table inet t {\n set s {\n type ether_addr\n }\n}\n")
		if _, err := Parse(js); err == nil || !strings.Contains(err.Error(), "set s") {
			t.Errorf("Parse: %v, want an error naming set s", err)
		}
	})
	t.Run("a limit before statements that change nothing is read", func(t *testing.T) {
		ns.Exec("nft", "add table inet t; delete table inet t")
		js := load(t, ns, "table inet t {\n chain c {\n type filter hook forward priority filter; policy drop\n limit rate 1/second log prefix \"x\"\n }\n}\n")
		tbl, err := Parse(js)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tbl.Evaluate(Forward, fwd(tcp("10.0.0.1", "10.0.0.2", 80), "a", "b"))
		if err != nil || got.Verdict != Drop || !got.By.Policy {
			t.Errorf("Evaluate: %v, %v; want the policy's drop", got, err)
		}
	})
	t.Run("a set the rules add to is read, and looking it up is an error", func(t *testing.T) {
		set := " set d4 {\n type ipv4_addr; flags dynamic; size 16; counter\n elements = { 10.0.0.9 counter packets 1 bytes 60 }\n }\n"
		ns.Exec("nft", "add table inet t; delete table inet t")
		js := load(t, ns, "table inet t {\n"+set+" chain c {\n type filter hook forward priority filter\n meta nfproto ipv4 update @d4 { ip daddr }\n ip daddr 10.0.0.2 drop\n }\n}\n")
		tbl, err := Parse(js)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := tbl.Evaluate(Forward, fwd(tcp("10.0.0.1", "10.0.0.2", 80), "a", "b")); err != nil || got.Verdict != Drop {
			t.Errorf("Evaluate: %v, %v; want the drop after the update", got, err)
		}
		ns.Exec("nft", "add table inet t; delete table inet t")
		js = load(t, ns, "table inet t {\n"+set+" chain c {\n type filter hook forward priority filter\n ip saddr @d4 drop\n update @d4 { ip daddr }\n }\n}\n")
		if _, err := Parse(js); err == nil || !strings.Contains(err.Error(), "chain c") || !strings.Contains(err.Error(), "@d4") {
			t.Errorf("Parse of a lookup of a set rules add to: %v, want an error naming chain c and @d4", err)
		}
	})
	t.Run("a chain of another type than filter at the hook evaluated", func(t *testing.T) {
		ns.Exec("nft", "add table inet t; delete table inet t")
		js := load(t, ns, "table inet t {\n chain n {\n type nat hook prerouting priority dstnat\n }\n}\n")
		tbl, err := Parse(js)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Evaluate(Prerouting, tcp("10.0.0.1", "10.0.0.2", 80)); err == nil || !strings.Contains(err.Error(), "chain n") {
			t.Errorf("Evaluate at prerouting: %v, want an error naming chain n", err)
		}
		if _, err := tbl.Evaluate(Forward, fwd(tcp("10.0.0.1", "10.0.0.2", 80), "a", "b")); err != nil {
			t.Errorf("Evaluate at forward (no chain): %v", err)
		}
	})
}

// A packet that no hook can see is refused rather than evaluated; these
// checks need no kernel.
func TestAPacketThatNoHookCanSeeIsAnError(t *testing.T) {
	tbl, err := Parse([]byte(`{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
		{"table": {"family": "inet", "name": "t", "handle": 1}},
		{"chain": {"family": "inet", "table": "t", "name": "c", "handle": 1, "type": "filter", "hook": "forward", "prio": 0, "policy": "accept"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		hook Hook
		p    Packet
	}{
		{"no addresses", Forward, Packet{Proto: TCP}},
		{"two families", Forward, tcp("10.0.0.1", "fd00::1", 80)},
		{"an IPv4-mapped address", Forward, tcp("::ffff:10.0.0.1", "::ffff:10.0.0.2", 80)},
		{"ICMPv6 over IPv4", Forward, Packet{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), Proto: ICMPv6}},
		{"an unmodelled protocol", Forward, with(tcp("10.0.0.1", "10.0.0.2", 80), func(p *Packet) { p.Proto = 47 })},
		{"a local destination at forward", Forward, with(tcp("10.0.0.1", "10.0.0.2", 80), func(p *Packet) { p.DstLocal = true })},
		{"a destination that is not local at input", Input, tcp("10.0.0.1", "10.0.0.2", 80)},
		{"an output interface at input", Input, with(tcp("10.0.0.1", "10.0.0.2", 80), func(p *Packet) { p.DstLocal, p.OIF = true, "eth0" })},
		{"an input interface at output", Output, with(tcp("10.0.0.1", "10.0.0.2", 80), func(p *Packet) { p.IIF = "eth0" })},
		{"two conntrack states", Forward, with(tcp("10.0.0.1", "10.0.0.2", 80), func(p *Packet) { p.Ct = CtNew | CtEstablished })},
		{"an unknown hook", "ingress", tcp("10.0.0.1", "10.0.0.2", 80)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, err := tbl.Evaluate(c.hook, c.p); err == nil {
				t.Errorf("Evaluate(%s, %s) = %s, want an error", c.hook, c.p, got)
			}
		})
	}
}
