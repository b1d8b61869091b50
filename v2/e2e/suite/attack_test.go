package suite

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/egress"
)

const groupSourceValidation = "Source validation"

// The attacks, each a row of every dataplane and family the cluster has
// (the IPv6 ones in IPv6 alone).
var attackRows = []struct {
	id, name string
	v6Only   bool
}{
	{"control", "control: the attacker's own address reaches a pod of each node (TCP SYN and UDP)", false},
	{"admitted", "forged source: a pod a NetworkPolicy admits, to the pod the policy protects", false},
	{"external", "forged source: an address outside the cluster, from a pod isolated for egress, to the external host", false},
	{"node", "forged source: the pod's node's address, to a pod of the other node", false},
	{"natloopback", "forged source: the node's NAT loopback (vcoil.io/nat-loopback), to a pod of the other node", false},
	{"othernode", "forged source: the other node's address, to a pod of the attacker's node", false},
	{"clusterip", "forged source: a ClusterIP, to a pod of the other node", false},
	{"lb", "forged source: a LoadBalancer address, to a pod of the other node", false},
	{"vxlan", "VXLAN from a pod that is no Egress client to an Egress router's tunnel port: not NATed to the external host", false},
	{"ra", "router advertisements from a pod, to another pod and to the node", true},
	{"redirect", "redirects from a pod, to another pod and to the node", true},
}

const rowAdmission = "a pod naming vcoil.io/allowed-source-prefixes in a Namespace without the grant is refused at admission"

// Ports of the forged packets and of the barrier: the attacker's packets
// from its own address that follow the forged ones along the same path, so
// that a listener that has seen the barrier would have seen them.
const (
	attackPortBase = 40100
	barrierPort    = 9999
	// External sources the attacks forge: outside every range of the
	// cluster, in the documentation networks the lab calls external.
	forgedExternal4 = "198.51.100.77"
	forgedExternal6 = "2001:db8:113::77"
	// forgedRouter is the link-local address of the router the IPv6 router
	// advertisements and redirects pretend to come from.
	forgedRouter = "fe80::bad"
)

// TestSourceValidation attacks the cluster from a pod, as a compromised pod
// would: packets with forged sources (the address of a pod a NetworkPolicy
// admits, an address outside the cluster, the node's, its NAT loopback's,
// another node's, a ClusterIP, a LoadBalancer address), VXLAN to an Egress
// router by a pod that is no client of it, and IPv6 router advertisements
// and redirects. Each row listens where the forged packets would arrive
// and asserts that none did and that vcoild's source-validation drop
// counter (vcoil_source_validation_drops_total) moved. The attacker runs
// on a node of each dataplane the suite's nodes have.
func TestSourceValidation(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	record(t, groupSourceValidation, rowAdmission, byVcoil, func(t *testing.T) error { return k.refusesSourcePrefixes(t) })
	dps := k.dataplanes(t, w)
	for _, dp := range []string{"linux", "vpp"} {
		group := groupSourceValidation + ", Linux nodes"
		if dp == "vpp" {
			group = groupSourceValidation + ", VPP nodes"
		}
		attacker, other := w.nodeA, w.nodeB
		if dps[attacker.Name] != dp {
			attacker, other = w.nodeB, w.nodeA
		}
		if dps[attacker.Name] != dp {
			listAttacks(w, group, statusNotApplicable, fmt.Sprintf("neither %s nor %s is a %s node", w.nodeA.Name, w.nodeB.Name, dp))
			continue
		}
		t.Run(dp, func(t *testing.T) { attacks(t, k, w, group, dp, attacker, other) })
	}
}

// listAttacks lists every attack row of group with the same status.
func listAttacks(w *world, group, status, reason string) {
	for _, f := range []family{ipv4, ipv6} {
		for _, r := range attackRows {
			if r.v6Only && !f.v6 {
				continue
			}
			if f.v6 && !slices.Contains(w.families(), ipv6) {
				listed(f.group(group), r.name, statusNotApplicable, "the cluster's pods or nodes have no IPv6 addresses")
				continue
			}
			listed(f.group(group), r.name, status, reason)
		}
	}
}

// dataplanes is each node's dataplane, as its vcoild runs it.
func (k *cluster) dataplanes(t *testing.T, w *world) map[string]string {
	t.Helper()
	out := map[string]string{w.nodeA.Name: "linux", w.nodeB.Name: "linux"}
	for _, n := range []string{w.nodeA.Name, w.nodeB.Name} {
		p, err := vcoildOn(ctx(t, 30*time.Second), k, n)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.Containers) > 0 && slices.Contains(p.Spec.Containers[0].Args, "--dataplane=vpp") {
			out[n] = "vpp"
		}
	}
	return out
}

// attackEnv is one dataplane's attack: the attacker on node, the pods it
// attacks, and where the listeners run.
type attackEnv struct {
	k        *cluster
	ns       string
	dp       string
	node     *corev1.Node // the attacker's
	other    *corev1.Node
	attacker *corev1.Pod
	friend   *corev1.Pod // on other, admitted by the victim's policy
	victim   *corev1.Pod // on node, admits friend alone (and the barrier)
	near     *corev1.Pod // on node
	far      *corev1.Pod // on other
	netns    map[string]string
	// extNetns and nodeNetns are the lab's namespaces of the external host
	// and of the attacker's node ("" where the suite has none).
	extNetns, nodeNetns string
}

func attacks(t *testing.T, k *cluster, w *world, group, dp string, node, other *corev1.Node) {
	c := ctx(t, 15*time.Minute)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vcoil-e2e-attack-"}}
	if err := k.c.Create(c, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.c.Delete(context.Background(), ns) })
	e := &attackEnv{k: k, ns: ns.Name, dp: dp, node: node, other: other, netns: map[string]string{}}
	e.attacker = k.agentPod(t, e.ns, "attacker", node.Name, false, nil)
	e.friend = k.agentPod(t, e.ns, "friend", other.Name, false, nil)
	e.victim = k.agentPod(t, e.ns, "victim", node.Name, false, nil)
	e.near = k.agentPod(t, e.ns, "near", node.Name, false, nil)
	e.far = k.agentPod(t, e.ns, "far", other.Name, false, nil)
	extHost, _, _ := net.SplitHostPort(k.settings.external)
	ext := map[family]netip.Addr{ipv4: mustAddr(extHost)}
	if a, err := netip.ParseAddrPort(k.settings.external6); err == nil {
		ext[ipv6] = a.Addr()
	}
	dests := []string{}
	for _, a := range ext {
		if a.IsValid() {
			dests = append(dests, netip.PrefixFrom(a, a.BitLen()).String())
		}
	}
	if len(dests) > 0 {
		if err := k.c.Create(c, egressObject(e.ns, "nat", 1, dests...)); err != nil {
			t.Fatalf("create egress %s/nat: %v", e.ns, err)
		}
	}
	for _, p := range []*corev1.Pod{e.attacker, e.friend, e.victim, e.near, e.far} {
		k.waitRunning(t, p)
	}
	for _, p := range []*corev1.Pod{e.attacker, e.victim, e.near, e.far} {
		path, err := podNetns(p)
		if errors.Is(err, errNoNetns) {
			listAttacks(w, group, statusNotApplicable, "the suite does not run on the nodes' machine: it enters the attacker pod's network namespace (make e2e's lab)")
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		e.netns[p.Name] = path
	}
	if ens := os.Getenv("VCOIL_LAB_EXTERNAL_NETNS"); ens != "" {
		e.extNetns = ens
		if dp == "linux" {
			// The lab names the namespaces alike: vcoil-lab-ext, vcoil-lab-node1.
			if p := strings.TrimSuffix(ens, "ext") + node.Name; p != ens {
				if _, err := os.Stat(p); err == nil {
					e.nodeNetns = p
				}
			}
		}
	}

	// The victim admits friend (and the attacker's barrier alone); the
	// attacker may reach the namespace's pods, and the external host only
	// with its barrier.
	udp := corev1.ProtocolUDP
	bp := intstr.FromInt32(barrierPort)
	byName := func(n string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"name": n}}
	}
	barrierOnly := []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &bp}}
	var extPeers []networkingv1.NetworkPolicyPeer
	for _, a := range ext {
		if a.IsValid() {
			extPeers = append(extPeers, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: netip.PrefixFrom(a, a.BitLen()).String()}})
		}
	}
	pe := &policyEnv{k: k, t: t, c: c, ns: e.ns}
	for _, np := range []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "victim-in"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *byName("victim"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{
				{From: []networkingv1.NetworkPolicyPeer{{PodSelector: byName("friend")}}},
				{From: []networkingv1.NetworkPolicyPeer{{PodSelector: byName("attacker")}}, Ports: barrierOnly},
			}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "attacker-out"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *byName("attacker"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}},
				{To: extPeers, Ports: barrierOnly},
			}}},
	} {
		if err := pe.apply(np); err != nil {
			t.Fatal(err)
		}
	}

	for _, f := range w.families() {
		g := f.group(group)
		t.Run(f.String(), func(t *testing.T) { e.rows(t, c, g, f, ext[f], pe) })
	}
	for _, f := range []family{ipv4, ipv6} {
		if !slices.Contains(w.families(), f) {
			for _, r := range attackRows {
				if !r.v6Only || f.v6 {
					listed(f.group(group), r.name, statusNotApplicable, fmt.Sprintf("the cluster's pods or nodes have no %s addresses", f))
				}
			}
		}
	}
}

// rows runs the attack rows of family f.
func (e *attackEnv) rows(t *testing.T, c context.Context, g string, f family, ext netip.Addr, pe *policyEnv) {
	k := e.k
	me := f.podIP(e.attacker)
	for i, r := range attackRows {
		if r.v6Only && !f.v6 {
			continue
		}
		port := uint16(attackPortBase + i)
		a := &attack{f: f, name: r.id, from: e.netns[e.attacker.Name], counters: []*corev1.Node{e.node}}
		toPod := func(p *corev1.Pod, src netip.Addr) {
			a.forged = forge(src, f.podIP(p), port, a.tok())
			a.listeners = append(a.listeners, listener{name: "pod " + p.Name, netns: e.netns[p.Name],
				barrier:      [][]byte{udpDatagram(netip.AddrPortFrom(me, barrierPort), netip.AddrPortFrom(f.podIP(p), barrierPort), a.barrierTok(p.Name))},
				barrierToken: a.barrierTok(p.Name)})
		}
		toExternal := func() {
			a.listeners = append(a.listeners, listener{name: "the external host " + ext.String(), netns: e.extNetns,
				barrier:      [][]byte{udpDatagram(netip.AddrPortFrom(me, barrierPort), netip.AddrPortFrom(ext, barrierPort), a.barrierTok("ext"))},
				barrierToken: a.barrierTok("ext")})
		}
		var skip string
		switch r.id {
		case "control":
			recordDetail(t, g, r.name, byVcoil, func(t *testing.T) (string, error) {
				for _, p := range []*corev1.Pod{e.near, e.far} {
					ca := &attack{f: f, name: "control-" + p.Name, from: a.from}
					ca.forged = forge(me, f.podIP(p), port, ca.tok())
					ca.listeners = []listener{{name: "pod " + p.Name, netns: e.netns[p.Name]}}
					if err := ca.arrives(c); err != nil {
						return "", err
					}
				}
				return fmt.Sprintf("%s: the attacker's own packets arrived at %s and %s", e.dp, e.near.Name, e.far.Name), nil
			})
			continue
		case "admitted":
			toPod(e.victim, f.podIP(e.friend))
			a.before = func() error {
				return all(
					func() error { return pe.allowed(e.friend, "tcp", hostPortAddr(f.podIP(e.victim), portTCP)) },
					func() error { return pe.denied(e.attacker, "tcp", hostPortAddr(f.podIP(e.victim), portTCP)) },
				)
			}
		case "external":
			if !ext.IsValid() || e.extNetns == "" {
				skip = fmt.Sprintf("no %s external host given (VCOIL_E2E_EXTERNAL, VCOIL_LAB_EXTERNAL_NETNS)", f)
				break
			}
			src := mustAddr(forgedExternal4)
			if f.v6 {
				src = mustAddr(forgedExternal6)
			}
			a.forged = forge(src, ext, port, a.tok())
			toExternal()
		case "node":
			toPod(e.far, f.nodeIP(e.node))
		case "natloopback":
			nl := f.first(strings.Split(e.node.Annotations[vcoilv2.AnnotationNATLoopback], ",")...)
			if !nl.IsValid() {
				skip = fmt.Sprintf("node %s publishes no %s NAT loopback (%s)", e.node.Name, f, vcoilv2.AnnotationNATLoopback)
				break
			}
			toPod(e.far, nl)
		case "othernode":
			toPod(e.near, f.nodeIP(e.other))
		case "clusterip":
			s := k.serviceOf(t, &f, e.ns, f.prefix()+"far", map[string]string{"name": "far"}, 80, portTCP, corev1.ServiceTypeClusterIP, false)
			toPod(e.far, mustAddr(s.Spec.ClusterIP))
		case "lb":
			s := k.serviceOf(t, &f, e.ns, f.prefix()+"far-lb", map[string]string{"name": "far"}, 80, portTCP, corev1.ServiceTypeLoadBalancer, false)
			ips, err := k.waitIngress(t, f, map[string]*corev1.Service{"lb": s})
			if err != nil {
				skip = fmt.Sprintf("no %s LoadBalancer address: %v", f, err)
				break
			}
			toPod(e.far, ips["lb"])
		case "vxlan":
			if !ext.IsValid() || e.extNetns == "" {
				skip = fmt.Sprintf("no %s external host given (VCOIL_E2E_EXTERNAL, VCOIL_LAB_EXTERNAL_NETNS)", f)
				break
			}
			router, err := e.router(c)
			if err != nil {
				recordDetail(t, g, r.name, byVcoil, func(*testing.T) (string, error) { return "", err })
				continue
			}
			vni := egress.VNI(types.NamespacedName{Namespace: e.ns, Name: "nat"})
			me4 := ipv4.podIP(e.attacker)
			inner := forge(me, ext, port, a.tok())
			for _, p := range inner {
				a.forged = append(a.forged, vxlanFrame(netip.AddrPortFrom(me4, port), netip.AddrPortFrom(router, 4789), vni,
					egress.RouterMAC(vni), egress.ClientMAC([]netip.Addr{me4}), p))
			}
			toExternal()
			a.counters = []*corev1.Node{e.node, e.other}
			a.noBarrierPath = "the barrier reaches the external host directly, not through the router"
			// The outer source is the attacker's own: the router, not the
			// pod's interface, has to refuse it, and counts it.
			a.counterOptional = "the VXLAN datagram's source is the attacker's own address"
			a.routerDrops = e.routerDrops
		case "ra", "redirect":
			lla := mustAddr(forgedRouter)
			near6 := f.podIP(e.near)
			tok := a.tok()
			if r.id == "ra" {
				a.forged = [][]byte{
					routerAdvertisement(lla, mustAddr("ff02::1"), tok),
					routerAdvertisement(lla, near6, tok),
					routerAdvertisement(me, near6, tok),
				}
			} else {
				a.forged = [][]byte{
					redirect(lla, near6, lla, f.podIP(e.far), tok),
					redirect(me, near6, lla, f.podIP(e.far), tok),
					redirect(lla, f.nodeIP(e.node), lla, f.podIP(e.far), tok),
				}
			}
			a.ifname = "eth0"
			a.listeners = []listener{{name: "pod " + e.near.Name, netns: e.netns[e.near.Name],
				barrier:      [][]byte{udpDatagram(netip.AddrPortFrom(me, barrierPort), netip.AddrPortFrom(near6, barrierPort), a.barrierTok("near"))},
				barrierToken: a.barrierTok("near")}}
			if e.nodeNetns != "" {
				// The node's stack: what an ICMPv6 socket there receives got
				// past every rule of the node.
				a.listeners = append(a.listeners, listener{name: "node " + e.node.Name, netns: e.nodeNetns, icmp6: true,
					barrier:      [][]byte{echoRequest(me, f.nodeIP(e.node), a.barrierTok("node"))},
					barrierToken: a.barrierTok("node")})
			}
		}
		if skip != "" {
			listed(g, r.name, statusNotApplicable, skip)
			continue
		}
		recordDetail(t, g, r.name, byVcoil, func(t *testing.T) (string, error) {
			if a.before != nil {
				if err := a.before(); err != nil {
					return "", fmt.Errorf("the policy is not in force yet: %w", err)
				}
			}
			d, err := a.blocked(c, k)
			if err != nil {
				return "", fmt.Errorf("%s: %w", e.dp, err)
			}
			t.Log(d)
			return e.dp + ": " + d, nil
		})
	}
}

// router is the IPv4 address of the Egress nat's router pod, once ready.
func (e *attackEnv) router(c context.Context) (netip.Addr, error) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "nat"}}
	if err := poll.Until(c, 3*time.Minute, pollInterval, func(c context.Context) error { return e.k.rolledOut(c, d) }); err != nil {
		return netip.Addr{}, fmt.Errorf("the routers of egress %s/nat: %w", e.ns, err)
	}
	ips, err := e.k.routerIPs(c, e.ns, "nat", ipv4)
	if err != nil {
		return netip.Addr{}, err
	}
	return ips[0], nil
}

// forge is a TCP SYN and a UDP datagram from src to dst's port, twice,
// each carrying tok.
func forge(src, dst netip.Addr, port uint16, tok []byte) [][]byte {
	s, d := netip.AddrPortFrom(src, port), netip.AddrPortFrom(dst, port)
	syn, dgram := tcpSYN(s, d, tok), udpDatagram(s, d, tok)
	return [][]byte{syn, dgram, syn, dgram}
}

// echoRequest is an ICMPv6 echo request carrying tok.
func echoRequest(src, dst netip.Addr, tok []byte) []byte {
	m := make([]byte, 8)
	m[0] = 128
	binary.BigEndian.PutUint16(m[4:], 0x5c5c)
	binary.BigEndian.PutUint16(m[6:], 1)
	return ipPacket(src, dst, protoICMPv6, 64, append(m, tok...), 2)
}

// attack is one row's packets and listeners.
type attack struct {
	f      family
	name   string
	from   string // the attacker's network namespace
	ifname string
	forged [][]byte
	// listeners are where the forged packets would arrive.
	listeners []listener
	// counters are the nodes whose source-validation drop counter must
	// move.
	counters []*corev1.Node
	// before checks what the row presumes (a policy in force).
	before func() error
	// noBarrierPath, when set, says why the barrier does not follow the
	// forged packets' path.
	noBarrierPath string
	// counterOptional, when set, says why the drop counter need not move.
	counterOptional string
	// routerDrops, when set, reads a counter of the Egress routers' that
	// must move too.
	routerDrops func(context.Context) (float64, error)
	token       []byte
	nonce       string
}

type listener struct {
	name, netns  string
	icmp6        bool
	barrier      [][]byte
	barrierToken []byte
}

func (a *attack) id() string {
	if a.nonce == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		a.nonce = hex.EncodeToString(b)
	}
	return a.nonce
}

// tok is the token of the row's forged packets.
func (a *attack) tok() []byte {
	if a.token == nil {
		a.token = []byte("vcoil-attack-" + a.name + "-" + a.f.String() + "-" + a.id())
	}
	return a.token
}

func (a *attack) barrierTok(where string) []byte {
	return []byte("vcoil-barrier-" + a.name + "-" + where + "-" + a.f.String() + "-" + a.id())
}

// arrives sends the packets (from the attacker's own address) and waits
// until every listener saw them.
func (a *attack) arrives(c context.Context) error {
	var caps []*capture
	for _, l := range a.listeners {
		cp, err := listen(l.netns, l.icmp6, a.tok())
		if err != nil {
			return err
		}
		defer cp.close()
		caps = append(caps, cp)
	}
	return poll.Until(c, 15*time.Second, pollInterval, func(context.Context) error {
		if err := sendRaw(a.from, a.ifname, a.forged...); err != nil {
			return err
		}
		for i, cp := range caps {
			if cp.seen(a.tok()) == 0 {
				return fmt.Errorf("none of the attacker's own packets arrived at %s", a.listeners[i].name)
			}
		}
		return nil
	})
}

// blocked sends the forged packets and then the barriers, and fails when a
// listener saw a forged packet before its barrier, or when the drop
// counters of the row's nodes did not move. It returns what it saw.
func (a *attack) blocked(c context.Context, k *cluster) (string, error) {
	var caps []*capture
	for _, l := range a.listeners {
		cp, err := listen(l.netns, l.icmp6, a.tok(), l.barrierToken)
		if err != nil {
			return "", err
		}
		defer cp.close()
		caps = append(caps, cp)
	}
	before, berr := k.drops(c, a.counters, a.f)
	var routerBefore float64
	if a.routerDrops != nil {
		var err error
		if routerBefore, err = a.routerDrops(c); err != nil {
			return "", err
		}
	}
	if err := sendRaw(a.from, a.ifname, a.forged...); err != nil {
		return "", err
	}
	// Every barrier arrives through the path the forged packets took: past
	// it, a forged packet not seen never arrives.
	for i, l := range a.listeners {
		err := poll.Until(c, 15*time.Second, pollInterval, func(context.Context) error {
			if err := sendRaw(a.from, "", l.barrier...); err != nil {
				return err
			}
			if caps[i].seen(l.barrierToken) == 0 {
				return fmt.Errorf("the attacker's packets from its own address did not reach %s: the row cannot tell what arrived", l.name)
			}
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	var problems []string
	for i, l := range a.listeners {
		if n := caps[i].seen(a.tok()); n > 0 {
			problems = append(problems, fmt.Sprintf("%d of %d forged packets arrived at %s", n, len(a.forged), l.name))
		}
	}
	var after dropCount
	var aerr error
	if berr == nil {
		aerr = poll.Until(c, 10*time.Second, pollInterval, func(c context.Context) error {
			var err error
			if after, err = k.drops(c, a.counters, a.f); err != nil {
				return err
			}
			if after.total <= before.total {
				return fmt.Errorf("the source-validation drop counter did not move (%s)", before.delta(after))
			}
			return nil
		})
	}
	switch {
	case berr != nil:
		problems = append(problems, berr.Error())
	case aerr != nil && a.counterOptional == "":
		problems = append(problems, aerr.Error())
	}
	var routerAfter float64
	if a.routerDrops != nil {
		err := poll.Until(c, 10*time.Second, pollInterval, func(c context.Context) error {
			var err error
			if routerAfter, err = a.routerDrops(c); err != nil {
				return err
			}
			if routerAfter <= routerBefore {
				return fmt.Errorf("%s of the Egress's routers did not move (%g)", routerDropsMetric, routerBefore)
			}
			return nil
		})
		if err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "; "))
	}
	d := "nothing arrived, dropped: " + before.delta(after)
	if a.counterOptional != "" {
		d = fmt.Sprintf("nothing arrived (%s: %s)", a.counterOptional, before.delta(after))
	}
	if a.routerDrops != nil {
		d += fmt.Sprintf("; the router dropped them: %s %g -> %g", routerDropsMetric, routerBefore, routerAfter)
	}
	if a.noBarrierPath != "" {
		d += " (" + a.noBarrierPath + ")"
	}
	return d, nil
}

const routerDropsMetric = "vcoil_egress_router_unknown_client_drops_total"

// routerDrops sums the unknown-client drop counter of the Egress nat's
// router pods, read from their metrics port through the apiserver's proxy.
func (e *attackEnv) routerDrops(c context.Context) (float64, error) {
	pods, err := e.k.runningPods(c, e.ns, map[string]string{vcoilv2.LabelEgress: "nat"})
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, p := range pods {
		body, err := e.k.cs.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, strconv.Itoa(constants.EgressMetricsPort), "/metrics", nil).DoRaw(c)
		if err != nil {
			return 0, fmt.Errorf("metrics of router pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		found := false
		for line := range strings.SplitSeq(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, routerDropsMetric+" "); ok {
				n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return 0, fmt.Errorf("metrics of router pod %s/%s: %q: %w", p.Namespace, p.Name, line, err)
				}
				sum, found = sum+n, true
			}
		}
		if !found {
			return 0, fmt.Errorf("metrics of router pod %s/%s: no %s", p.Namespace, p.Name, routerDropsMetric)
		}
	}
	return sum, nil
}

// dropCount is vcoil_source_validation_drops_total of a family, by node.
type dropCount struct {
	byNode map[string]float64
	total  float64
}

func (b dropCount) delta(a dropCount) string {
	var parts []string
	for n, v := range b.byNode {
		parts = append(parts, fmt.Sprintf("%s %g -> %g", n, v, a.byNode[n]))
	}
	slices.Sort(parts)
	return "vcoil_source_validation_drops_total " + strings.Join(parts, ", ")
}

// drops reads vcoild's source-validation drop counter of family f on each
// node, from its metrics endpoint (the node's address, hostNetwork).
func (k *cluster) drops(c context.Context, nodes []*corev1.Node, f family) (dropCount, error) {
	out := dropCount{byNode: map[string]float64{}}
	for _, n := range nodes {
		addr := ipv4.nodeIP(n)
		if !addr.IsValid() {
			addr = ipv6.nodeIP(n)
		}
		_, port, _ := net.SplitHostPort(constants.DaemonMetricsAddr)
		url := "http://" + net.JoinHostPort(addr.String(), port) + "/metrics"
		v, err := scrapeDrops(c, url, f)
		if err != nil {
			return out, fmt.Errorf("vcoild on %s: %w", n.Name, err)
		}
		out.byNode[n.Name] = v
		out.total += v
	}
	return out, nil
}

const dropsMetric = "vcoil_source_validation_drops_total"

func scrapeDrops(c context.Context, url string, f family) (float64, error) {
	req, err := http.NewRequestWithContext(c, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, dropsMetric) {
			continue
		}
		rest := strings.TrimPrefix(line, dropsMetric)
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		} else if !strings.HasPrefix(rest, " ") {
			continue
		}
		if !familyLabel(labels, f) {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", url, line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s has no %s{family=%q}", url, dropsMetric, strings.ToLower(f.String()))
	}
	return sum, nil
}

// familyLabel says whether a series' labels are of family f (every family
// when it has no family label).
func familyLabel(labels string, f family) bool {
	for _, l := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(k) != "family" {
			continue
		}
		v = strings.ToLower(strings.Trim(v, `"`))
		want := "4"
		if f.v6 {
			want = "6"
		}
		return strings.HasSuffix(v, want) || (v == "inet" && !f.v6) || (v == "inet6" && f.v6)
	}
	return true
}

// refusesSourcePrefixes creates, as a dry run, a pod with an allowed
// source prefix in a namespace that grants none: admission must refuse it.
func (k *cluster) refusesSourcePrefixes(t *testing.T) error {
	c := ctx(t, time.Minute)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vcoil-e2e-prefixes-"}}
	if err := k.c.Create(c, ns); err != nil {
		return err
	}
	t.Cleanup(func() { _ = k.c.Delete(context.Background(), ns) })
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "spoofer",
			Annotations: map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: "198.51.100.0/24"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: k.settings.agentImage, Command: []string{"/agent"}}}},
	}
	err := k.c.Create(c, p, client.DryRunAll)
	if err == nil {
		return fmt.Errorf("pod %s/spoofer with %s=198.51.100.0/24 was admitted, its namespace grants no prefix (%s)",
			ns.Name, vcoilv2.AnnotationAllowedSourcePrefixes, vcoilv2.AnnotationPermittedSourcePrefixes)
	}
	if !strings.Contains(err.Error(), "source-prefixes") {
		return fmt.Errorf("pod %s/spoofer refused, but not for its source prefixes: %w", ns.Name, err)
	}
	t.Logf("refused: %v", err)
	return nil
}
