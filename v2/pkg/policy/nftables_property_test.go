package policy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/nfteval"
	"github.com/vcoil/vcoil/v2/internal/policyoracle"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/nftables"
)

// nftTable is the table the renderer writes in the test's node namespace.
const nftTable = "vcoil-policy"

// nftDefaultClusters is the number of clusters of the nftables stage when
// neither -policy.clusters nor VCOIL_POLICY_CLUSTERS says: each cluster is
// rendered into the kernel and listed, which costs more than the cache
// stage's clusters.
const nftDefaultClusters = 300

// TestRandomClustersInTheKernelAgreeWithKubernetesSemantics is the property
// test's renderer stage for nftables: random clusters go through the whole
// stack (cache, processor, configurator) into the nftables renderer in a
// namespace of the test; the table, as `nft -j list` reports it, is read by
// nfteval (an evaluator written apart from the renderer), and every
// connection the cache stage checks, plus each local pod reaching itself
// through a service and connections to the ends of the cluster's port
// ranges, must get from the kernel's hooks the verdict the Kubernetes
// oracle gives (policyoracle.Kubernetes.NodeVerdict). Then random changes are
// rendered incrementally and the check is repeated. Two clusters in three
// have ClusterNetworkPolicies (Admin and Baseline tiers, every action), so
// the oracle's tiers are checked through the kernel too.
//
// Each cluster gets a new renderer on the namespace of the previous one, as
// a restarted vcoild would: its first Render adopts the table it finds, or
// replaces it when the drop log was switched (one cluster in three logs).
//
// Cluster number i uses seed+i, as in the cache stage; replay with
// -policy.seed=<seed> -policy.clusters=1.
func TestRandomClustersInTheKernelAgreeWithKubernetesSemantics(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("skipped: the nft tool is not installed; this stage reads the table as nft lists it")
	}
	first, n := propertySettings(t, nftDefaultClusters)
	node := netnstest.New(t, "policy-node")
	t.Logf("checking %d random clusters in the kernel from seed %d", n, first)
	start := time.Now()
	var conns int
	for i := range n {
		seed := first + uint64(i)
		checked, msg := checkClusterInKernel(t, node, seed, seed%10 == 9)
		if msg != "" {
			t.Fatalf("cluster with seed %d (replay: go test ./v2/pkg/policy -run %s -policy.seed=%d -policy.clusters=1):\n%s",
				seed, t.Name(), seed, msg)
		}
		conns += checked
	}
	t.Logf("%d clusters, %d connections evaluated in the kernel's table, in %v", n, conns, time.Since(start))
}

// nodeStack is the stack of one node with the nftables renderer at its end.
type nodeStack struct {
	cache *pcache.Cache
	r     *nftables.Renderer
}

// newNodeStack builds the stack of cluster c into the renderer's table in
// node; logDrops switches the renderer's drop log (a rule with a limit and
// a log before each group's drop).
func newNodeStack(ctx context.Context, node *netnstest.NS, c *policyoracle.Cluster, logDrops bool) (*nodeStack, error) {
	conf, err := configurator.New(configurator.Config{NATLoopback: c.NATLoopback, NodeAddresses: c.NodeAddresses})
	if err != nil {
		return nil, err
	}
	r, err := nftables.New(nftables.Config{Netns: node.Path(), Table: nftTable, PodIfPrefix: "vcoil", LogDrops: logDrops, Log: logr.Discard()})
	if err != nil {
		return nil, fmt.Errorf("the nftables renderer: %w", err)
	}
	s := &nodeStack{cache: pcache.New(), r: r}
	conf.Register("nftables", r)
	s.cache.Watch(processor.New(c.Node, s.cache, conf, logr.Discard()))
	if err := s.cache.ReplaceAll(ctx, pcache.Contents{Pods: c.Pods, Namespaces: c.Namespaces, Policies: c.Policies, ClusterPolicies: c.ClusterPolicies}); err != nil {
		r.Close()
		return nil, err
	}
	return s, nil
}

// checkClusterInKernel checks the cluster of one seed and returns the number
// of connections evaluated, or what went wrong.
func checkClusterInKernel(t *testing.T, node *netnstest.NS, seed uint64, large bool) (int, string) {
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	g := policyoracle.NewGenerator(rng)
	g.Large = large
	// Two clusters in three have ClusterNetworkPolicies.
	g.ClusterPolicies = seed%3 != 1
	c := g.Cluster()
	// One cluster in three logs its drops: the next cluster's renderer
	// then finds groups of the other kind, which it replaces.
	logDrops := seed%3 == 0
	s, err := newNodeStack(ctx, node, c, logDrops)
	if err != nil {
		return 0, fmt.Sprintf("building the stack (drop log %v): %v\ncluster:\n%s", logDrops, err, c)
	}
	defer s.r.Close()
	n, msg := kernelDisagreement(ctx, node, c, rng.IntN)
	if msg != "" {
		return n, "after the initial resync: " + msg + "\ncluster:\n" + c.String()
	}
	before := c.String()
	var changes string
	for range 1 + rng.IntN(8) {
		ch := g.Mutate(c)
		changes += ch.Description + "\n"
		if err := ch.Apply(ctx, s.cache); err != nil {
			return n, "applying " + ch.Description + ": " + err.Error()
		}
	}
	m, msg := kernelDisagreement(ctx, node, c, rng.IntN)
	if msg != "" {
		return n + m, "after the changes:\n" + changes + msg + "\ncluster before:\n" + before + "cluster after:\n" + c.String()
	}
	return n + m, ""
}

// kernelDisagreement lists the table and compares the kernel's verdict of
// every connection with the oracle's; it describes the first disagreement.
func kernelDisagreement(ctx context.Context, node *netnstest.NS, c *policyoracle.Cluster, pick func(int) int) (int, string) {
	js, err := node.TryExec(ctx, "nft", "-j", "list", "table", "inet", nftTable)
	if err != nil {
		return 0, "listing the table: " + err.Error()
	}
	tbl, err := nfteval.Parse([]byte(js))
	if err != nil {
		return 0, "reading the table: " + err.Error()
	}
	k := policyoracle.NewKubernetes(c)
	m := nodeModel{c: c, k: k}
	conns := append(connections(c, k, pick), selfConnections(c, k, pick)...)
	conns = append(conns, rangeEndConnections(c, k, pick)...)
	for _, conn := range conns {
		want, responsible := k.NodeVerdict(conn)
		if !responsible {
			return 0, fmt.Sprintf("connection %s: the oracle says the node is not responsible for it, but the connections were chosen with a local pod at one end", connString(conn))
		}
		got, trace, err := m.kernelVerdict(tbl, conn)
		if err != nil {
			return 0, fmt.Sprintf("connection %s: %v", connString(conn), err)
		}
		if got != want {
			listing, _ := node.TryExec(ctx, "nft", "-a", "list", "table", "inet", nftTable)
			return 0, fmt.Sprintf("connection %s: Kubernetes says allowed=%v, the kernel's table says allowed=%v:\n%s\ntable:\n%s",
				connString(conn), want, got, trace, listing)
		}
	}
	return len(conns), ""
}

// selfConnections are each local pod reaching itself, which only happens
// through a service: the connections of the cache stage leave them out.
func selfConnections(c *policyoracle.Cluster, k *policyoracle.Kubernetes, pick func(int) int) []policyoracle.Connection {
	var out []policyoracle.Connection
	for _, a := range c.Addresses() {
		if !k.IsLocalPod(a) {
			continue
		}
		out = append(out, policyoracle.Connection{Src: a, Dst: a, Protocol: policyoracle.ICMP})
		for _, proto := range []policyoracle.Protocol{policyoracle.TCP, policyoracle.UDP, policyoracle.SCTP} {
			port := policyoracle.SamplePorts[pick(len(policyoracle.SamplePorts))]
			out = append(out, policyoracle.Connection{Src: a, Dst: a, Protocol: proto, SrcPort: uint16(32768 + pick(28000)), DstPort: port})
		}
	}
	return out
}

// rangeEndConnections sample the ends of the cluster's port ranges
// (endPort and the port after it), which policyoracle.SamplePorts cannot know:
// the generator draws them at random, and a renderer that wrote a range
// one port too long or too short would pass the fixed samples.
func rangeEndConnections(c *policyoracle.Cluster, k *policyoracle.Kubernetes, pick func(int) int) []policyoracle.Connection {
	var ends []uint16
	for _, pol := range c.Policies {
		var ports []networkingv1.NetworkPolicyPort
		for _, r := range pol.Spec.Ingress {
			ports = append(ports, r.Ports...)
		}
		for _, r := range pol.Spec.Egress {
			ports = append(ports, r.Ports...)
		}
		for _, p := range ports {
			if p.EndPort != nil && *p.EndPort < 65535 {
				ends = append(ends, uint16(*p.EndPort), uint16(*p.EndPort+1))
			}
		}
	}
	if len(ends) == 0 {
		return nil
	}
	var out []policyoracle.Connection
	addrs := c.Addresses()
	for _, src := range addrs {
		for _, dst := range addrs {
			if src.Is4() != dst.Is4() || (!k.IsLocalPod(src) && !k.IsLocalPod(dst)) {
				continue
			}
			for _, proto := range []policyoracle.Protocol{policyoracle.TCP, policyoracle.UDP, policyoracle.SCTP} {
				port := ends[pick(len(ends))]
				out = append(out, policyoracle.Connection{Src: src, Dst: dst, Protocol: proto, SrcPort: uint16(32768 + pick(28000)), DstPort: port})
			}
		}
	}
	return out
}

func connString(conn policyoracle.Connection) string {
	return fmt.Sprintf("%s %s:%d -> %s", conn.Protocol, conn.Src, conn.SrcPort, netip.AddrPortFrom(conn.Dst, conn.DstPort))
}

// nodeModel says which packets a connection's first packet is at each hook
// of the node, the way the Linux dataplane carries it: a pod's interface
// on the node is named after its address, everything else comes and goes
// through the uplink.
type nodeModel struct {
	c *policyoracle.Cluster
	k *policyoracle.Kubernetes
}

const uplink = "eth0"

func (m nodeModel) ifname(a netip.Addr) string {
	if m.k.IsLocalPod(a) {
		// Interface names are at most 15 bytes; the table does not read
		// them, but the packets must carry plausible ones.
		p := m.k.PodAt(a)
		return "vcoil" + strings.TrimPrefix(p.Name, "pod")
	}
	return uplink
}

func (m nodeModel) loopback(v4 bool) netip.Addr {
	for _, a := range m.c.NATLoopback {
		if a.Is4() == v4 {
			return a
		}
	}
	return netip.Addr{}
}

type hop struct {
	hook nfteval.Hook
	p    nfteval.Packet
}

// hops are the hooks the connection's first packet meets with a table
// verdict, in order:
//
//   - a pod reaching itself (source and destination the pod, or the NAT
//     loopback as source): through a service, so forward sees the pod to
//     itself (after DNAT) and postrouting the NAT loopback to the pod
//     (after the hairpin's source NAT);
//   - the node's own address as source: output, then postrouting;
//   - the node's own address as destination: input;
//   - anything else is forwarded: forward, then postrouting.
func (m nodeModel) hops(conn policyoracle.Connection) ([]hop, error) {
	p := nfteval.Packet{Src: conn.Src, Dst: conn.Dst, Ct: nfteval.CtNew}
	switch conn.Protocol {
	case policyoracle.TCP:
		p.Proto = nfteval.TCP
	case policyoracle.UDP:
		p.Proto = nfteval.UDP
	case policyoracle.SCTP:
		p.Proto = nfteval.SCTP
	case policyoracle.ICMP:
		p.Proto, p.ICMPType = nfteval.ICMP, 8
		if !conn.Src.Is4() {
			p.Proto, p.ICMPType = nfteval.ICMPv6, 128
		}
	default:
		return nil, fmt.Errorf("protocol %q", conn.Protocol)
	}
	if p.Proto != nfteval.ICMP && p.Proto != nfteval.ICMPv6 {
		p.SrcPort, p.DstPort = conn.SrcPort, conn.DstPort
	}
	lo := m.loopback(conn.Src.Is4())
	switch {
	case conn.Src == conn.Dst || (conn.Src == lo && m.k.IsLocalPod(conn.Dst)):
		pod := conn.Dst
		if !m.k.IsLocalPod(pod) {
			return nil, fmt.Errorf("%s reaching itself is not a local pod", pod)
		}
		if !lo.IsValid() {
			return nil, fmt.Errorf("no NAT loopback of the family of %s", pod)
		}
		in := p
		in.Src, in.Dst, in.IIF, in.OIF = pod, pod, m.ifname(pod), m.ifname(pod)
		out := in
		out.Src = lo
		return []hop{{nfteval.Forward, in}, {nfteval.Postrouting, out}}, nil
	case slices.Contains(m.c.NodeAddresses, conn.Src):
		p.SrcLocal, p.OIF = true, m.ifname(conn.Dst)
		return []hop{{nfteval.Output, p}, {nfteval.Postrouting, p}}, nil
	case slices.Contains(m.c.NodeAddresses, conn.Dst):
		p.DstLocal, p.IIF = true, m.ifname(conn.Src)
		return []hop{{nfteval.Input, p}}, nil
	}
	p.IIF, p.OIF = m.ifname(conn.Src), m.ifname(conn.Dst)
	return []hop{{nfteval.Forward, p}, {nfteval.Postrouting, p}}, nil
}

// kernelVerdict is whether the table lets the connection's first packet
// through every hook it meets, with the decisions for messages.
func (m nodeModel) kernelVerdict(tbl *nfteval.Table, conn policyoracle.Connection) (bool, string, error) {
	hops, err := m.hops(conn)
	if err != nil {
		return false, "", err
	}
	var trace strings.Builder
	for _, h := range hops {
		r, err := tbl.Evaluate(h.hook, h.p)
		if err != nil {
			return false, "", err
		}
		fmt.Fprintf(&trace, "  %s at %s: %s\n", h.p, h.hook, r)
		if !r.Allowed() {
			return false, trace.String(), nil
		}
	}
	return true, trace.String(), nil
}
