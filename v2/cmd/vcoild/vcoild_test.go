package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// The tests share one default pool of /29 blocks (8 addresses; a node
// subnet gives 5 to pods), so that blocks fill, are acquired and released
// within a few pods. Each test uses its own nodes.
func defaultPool(t *testing.T) {
	t.Helper()
	err := env.Client.Create(context.Background(), &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 3, Subnets: []vcoilv2.SubnetSet{
			{IPv4: ptr.To("10.100.0.0/22"), IPv6: ptr.To("fd00:100::/118")},
		}},
	})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

func TestPodsGetAddressesRoutesAndTalk(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 1)
	if err := n.status(); err != nil {
		t.Fatalf("STATUS of a ready vcoild: %v", err)
	}

	a, b := newPod(t, "pod-a"), newPod(t, "pod-b")
	n.mustAdd(a)
	n.mustAdd(b)
	subnet := nodeSubnet(t, n.name)
	for _, p := range []*pod{a, b} {
		if !subnet.IPv4.Contains(p.ipv4()) || !subnet.IPv6.Contains(p.ipv6()) {
			t.Fatalf("%s got %s/%s, outside the node subnet %s", p.name, p.ipv4(), p.ipv6(), subnet)
		}
		if err := n.check(p); err != nil {
			t.Fatalf("CHECK %s: %v", p.name, err)
		}
	}

	expectPodInterface(t, a)

	// TCP pod <-> pod (both families), pod -> node, node -> pod.
	serve(t, b.ns, ":8080")
	serve(t, a.ns, ":8080")
	serve(t, n.ns, n.addr.String()+":9090")
	for _, c := range []struct {
		from *netnstest.NS
		to   string
	}{
		{a.ns, hostPort(b.ipv4(), 8080)},
		{a.ns, hostPort(b.ipv6(), 8080)},
		{b.ns, hostPort(a.ipv4(), 8080)},
		{a.ns, hostPort(n.addr, 9090)},
		{n.ns, hostPort(a.ipv4(), 8080)},
		{n.ns, hostPort(b.ipv6(), 8080)},
	} {
		if err := talk(c.from, c.to); err != nil {
			t.Fatal(err)
		}
	}

	// The node's blocks are exported to table 119 with protocol 30.
	exported := n.ns.IP("route", "show", "table", "119")
	if !strings.Contains(exported, "blackhole "+subnet.IPv4.String()+" proto 30") {
		t.Fatalf("table 119 lacks the node subnet:\n%s", exported)
	}
	if n.metric(`vcoil_node_addresses_in_use{pool="default"}`) != "2" {
		t.Fatalf("metrics: %q", n.metric(`vcoil_node_addresses_in_use{pool="default"}`))
	}
	// Each ADD timed each of its phases once (CHECK times none).
	for _, phase := range []string{"read", "allocate", "wire", "policies", "egress"} {
		if got := n.metric(`vcoil_cni_add_phase_duration_seconds_count{phase="` + phase + `"}`); got != "2" {
			t.Errorf("ADDs timed in phase %s: %q, want 2", phase, got)
		}
	}
	for _, p := range []*pod{a, b} {
		if err := n.del(p); err != nil {
			t.Fatalf("DEL %s: %v", p.name, err)
		}
	}
	if err := n.del(a); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
	if left := n.podVeths(); len(left) != 0 {
		t.Fatalf("veths left after DEL: %v", left)
	}
}

// expectPodInterface checks the inside of a pod: eth0 with the pod's /32
// and /128 only, and the gateway routes of the contract.
func expectPodInterface(t *testing.T, p *pod) {
	t.Helper()
	h := p.ns.Netlink()
	link, err := h.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := h.AddrList(link, netlink.FAMILY_ALL)
	var got []string
	for _, ad := range addrs {
		if !ad.IP.IsLinkLocalUnicast() {
			got = append(got, ad.IPNet.String())
		}
	}
	sort.Strings(got)
	want := []string{p.ipv4().String() + "/32", p.ipv6().String() + "/128"}
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pod eth0 addresses = %v, want %v", got, want)
	}
	routes := p.ns.IP("route", "show")
	for _, r := range []string{"default via 169.254.1.1 dev eth0", "169.254.1.1 dev eth0 scope link"} {
		if !strings.Contains(routes, r) {
			t.Fatalf("pod routes lack %q:\n%s", r, routes)
		}
	}
	if r6 := p.ns.IP("-6", "route", "show", "default"); !strings.Contains(r6, "default via fe80::1 dev eth0") {
		t.Fatalf("pod IPv6 default route = %q", r6)
	}
}

func TestNATLoopbackIsNeverGivenAndBlocksComeAndGo(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 2)
	subnet := nodeSubnet(t, n.name)
	loop, err := subnet.NATLoopback()
	if err != nil {
		t.Fatal(err)
	}
	// vcoild publishes the annotation after it has the node subnet: wait.
	poll.Eventually(t, 10*time.Second, func() error {
		node := &corev1.Node{}
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: n.name}, node); err != nil {
			return err
		}
		if got := node.Annotations[vcoilv2.AnnotationNATLoopback]; got != loop.String() {
			return fmt.Errorf("Node annotation %s = %q, want %q", vcoilv2.AnnotationNATLoopback, got, loop)
		}
		return nil
	})

	// 5 pods fill the node subnet to its last assignable address; the
	// next ones need a second block.
	var pods []*pod
	for i := 0; i < 7; i++ {
		p := newPod(t, fmt.Sprintf("fill-%d", i))
		n.mustAdd(p)
		if p.ipv4() == loop.IPv4 || p.ipv6() == loop.IPv6 {
			t.Fatalf("pod %d got the NAT loopback %s", i, loop)
		}
		pods = append(pods, p)
	}
	last := pods[4]
	if off, _ := subnet.Offset(last.ipv4()); off != subnet.Size()-3 {
		t.Fatalf("the 5th pod got offset %d, want the last assignable one (%d)", off, subnet.Size()-3)
	}
	if bs := blocksOf(t, n.name); len(bs) != 2 {
		t.Fatalf("node has %d blocks after 7 pods, want 2", len(bs))
	}
	// Freeing the second block's pods empties it, but it stays as the
	// pool's spare: the node subnet is full (the low watermark).
	for _, p := range pods[5:] {
		if err := n.del(p); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if bs := blocksOf(t, n.name); len(bs) != 2 {
		t.Fatalf("node has %d blocks after the second one emptied, want 2 (the spare kept)", len(bs))
	}
	// The pool's last address freed: the spare goes; the node subnet stays.
	for _, p := range pods[:5] {
		if err := n.del(p); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if bs := blocksOf(t, n.name); len(bs) != 1 || !bs[0].NodeSubnet {
			return fmt.Errorf("blocks after freeing every pod: %d", len(bs))
		}
		return nil
	})
	poll.Eventually(t, 10*time.Second, func() error {
		out := n.ns.IP("route", "show", "table", "119") + n.ns.IP("-6", "route", "show", "table", "119")
		if strings.Count(out, "blackhole") != 2 || !strings.Contains(out, subnet.IPv4.String()) || !strings.Contains(out, subnet.IPv6.String()) {
			return fmt.Errorf("exported routes, want the node subnet's two prefixes only:\n%s", out)
		}
		return nil
	})
}

func TestHostPortReachesThePodThroughPortmap(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 3)
	p := newPod(t, "web")
	serve(t, p.ns, ":80")
	n.mustAdd(p, map[string]any{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"})
	// A client on the node network (the fabric) reaches the pod through the
	// node's address and the host port.
	if err := talk(f.ns, hostPort(n.addr, 8080)); err != nil {
		t.Fatal(err)
	}
	if err := n.del(p); err != nil {
		t.Fatal(err)
	}
	if err := talk(f.ns, hostPort(n.addr, 8080)); err == nil {
		t.Fatal("the host port still answers after DEL")
	}
}

func TestHundredConcurrentAdds(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 4)
	const count = 100
	pods := make([]*pod, count)
	for i := range pods {
		pods[i] = newPod(t, fmt.Sprintf("c%03d", i))
	}
	start := time.Now()
	errs := parallel(count, func(i int) error { return n.add(pods[i]) })
	elapsed := time.Since(start)
	seen := map[netip.Addr]string{}
	for i, p := range pods {
		if errs[i] != nil {
			t.Fatalf("ADD %s: %v", p.name, errs[i])
		}
		for _, a := range []netip.Addr{p.ipv4(), p.ipv6()} {
			if other, dup := seen[a]; dup {
				t.Fatalf("%s given to %s and %s", a, other, p.name)
			}
			seen[a] = p.name
		}
	}
	t.Logf("100 concurrent ADDs took %s, using %d blocks", elapsed.Round(time.Millisecond), len(blocksOf(t, n.name)))
	// Every pod answers: a sample across blocks.
	serve(t, pods[99].ns, ":7000")
	if err := talk(pods[0].ns, hostPort(pods[99].ipv4(), 7000)); err != nil {
		t.Fatal(err)
	}
	errs = parallel(count, func(i int) error { return n.del(pods[i]) })
	for i, err := range errs {
		if err != nil {
			t.Fatalf("DEL %s: %v", pods[i].name, err)
		}
	}
	poll.Eventually(t, 20*time.Second, func() error {
		if bs := blocksOf(t, n.name); len(bs) != 1 {
			return fmt.Errorf("%d blocks after every pod is gone, want the node subnet only", len(bs))
		}
		return nil
	})
}

// TestKillDuringConcurrentAddsLosesAndDuplicatesNothing kills vcoild with
// SIGKILL while 50 ADDs run, restarts it, and does what a runtime does with
// the sandboxes whose ADD failed: DEL them. Every surviving pod keeps its
// address, no address is given twice, and after GC nothing leaks.
func TestKillDuringConcurrentAddsLosesAndDuplicatesNothing(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 5)
	const count = 50
	pods := make([]*pod, count)
	for i := range pods {
		pods[i] = newPod(t, fmt.Sprintf("k%02d", i))
	}
	errs := addAllAndKillMidway(t, n, pods)
	n.start()

	var ok, failed []*pod
	for i, p := range pods {
		if errs[i] == nil {
			ok = append(ok, p)
			continue
		}
		failed = append(failed, p)
		// A failed ADD must have told the runtime to try again, not lied.
		var ce *types.Error
		if errors.As(errs[i], &ce) && ce.Code != 11 && ce.Code != 100 {
			t.Errorf("ADD %s failed with code %d: %v", p.name, ce.Code, errs[i])
		}
	}
	t.Logf("SIGKILL during 50 ADDs: %d succeeded, %d failed and were deleted", len(ok), len(failed))
	if len(ok) < 10 || len(failed) == 0 {
		t.Logf("the kill did not land mid-flight (%d ok); the test still checks consistency", len(ok))
	}
	// Survivors keep their addresses and connectivity.
	seen := map[netip.Addr]string{}
	for _, p := range ok {
		if err := n.check(p); err != nil {
			t.Fatalf("CHECK %s after the restart: %v", p.name, err)
		}
		if other, dup := seen[p.ipv4()]; dup {
			t.Fatalf("%s given to %s and %s", p.ipv4(), other, p.name)
		}
		seen[p.ipv4()] = p.name
	}
	serve(t, ok[0].ns, ":7100")
	if err := talk(ok[len(ok)-1].ns, hostPort(ok[0].ipv4(), 7100)); err != nil {
		t.Fatal(err)
	}
	// The runtime deletes the failed sandboxes and creates them again.
	for _, p := range failed {
		if err := n.del(p); err != nil {
			t.Fatalf("DEL of failed %s: %v", p.name, err)
		}
	}
	for _, p := range failed {
		n.mustAdd(p)
		if other, dup := seen[p.ipv4()]; dup {
			t.Fatalf("%s given to %s and %s", p.ipv4(), other, p.name)
		}
		seen[p.ipv4()] = p.name
	}
	// GC with every pod valid keeps all; then the first half goes away
	// from the runtime's view and GC collects it.
	if err := n.gc(pods); err != nil {
		t.Fatal(err)
	}
	if got := n.metric(`vcoil_node_addresses_in_use{pool="default"}`); got != fmt.Sprint(count) {
		t.Fatalf("addresses in use after GC of nothing = %s, want %d", got, count)
	}
	if err := n.gc(pods[count/2:]); err != nil {
		t.Fatal(err)
	}
	if got := n.metric(`vcoil_node_addresses_in_use{pool="default"}`); got != fmt.Sprint(count/2) {
		t.Fatalf("addresses in use after GC = %s, want %d", got, count/2)
	}
	veths := len(n.podVeths())
	if veths != count/2 {
		t.Fatalf("%d pod veths after GC, want %d", veths, count/2)
	}
}

// addAllAndKillMidway ADDs every pod at once and kills vcoild with SIGKILL
// once some ADDs are through and others are in flight; it returns each
// ADD's result when all have returned.
func addAllAndKillMidway(t *testing.T, n *node, pods []*pod) []error {
	t.Helper()
	var done sync.WaitGroup
	errs := make([]error, len(pods))
	var finished sync.Map
	for i := range pods {
		done.Add(1)
		go func() {
			defer done.Done()
			errs[i] = n.add(pods[i])
			finished.Store(i, true)
		}()
	}
	poll.Eventually(t, 60*time.Second, func() error {
		k := 0
		finished.Range(func(any, any) bool { k++; return true })
		if k < 10 {
			return fmt.Errorf("%d ADDs finished", k)
		}
		return nil
	})
	n.kill()
	done.Wait()
	return errs
}

func TestBadInputGivesClearErrorsAndLeavesNothing(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 6)
	ctx := context.Background()
	// A name of its own per run: envtest has no namespace controller, so a
	// deleted namespace would stay Terminating and block the next -count.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "typo-", Annotations: map[string]string{vcoilv2.AnnotationPool: "defualt"}}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}

	p := newPod(t, "bad")
	p.namespace = ns.Name
	wantCNIError(t, n.add(p), 102, `address pool "defualt"`)
	// `kubectl describe pod` says so too: an Event on the Pod, by its UID.
	bad := &corev1.Pod{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "bad"}, bad); err != nil {
		t.Fatal(err)
	}
	env.WaitForEvent(t, 20*time.Second, testenv.EventOf{Kind: "Pod", Namespace: ns.Name, Name: "bad", UID: bad.UID,
		Type: corev1.EventTypeWarning, Reason: vcoilv2.ReasonPoolNotFound,
		Note: `address pool "defualt" (the pool named by annotation vcoil.io/pool of namespace "` + ns.Name + `") does not exist`})

	p = newPod(t, "gone")
	p.ns.Remove()
	wantCNIError(t, n.add(p), 4, "network namespace")

	// A conflist with an mtu that is not a number.
	saved := n.conf
	broken := strings.Replace(string(saved.Bytes), `"type": "vcoil",`, `"type": "vcoil", "mtu": "big",`, 1)
	conf, err := confFromBytes(broken)
	if err != nil {
		t.Fatal(err)
	}
	n.conf = conf
	wantCNIError(t, n.add(newPod(t, "badconf")), 6, "mtu")
	n.conf = saved

	// A dead daemon: ADD says try again later.
	n.kill()
	wantCNIError(t, n.add(newPod(t, "nodaemon")), 11, "unreachable")
	n.start()

	if got := n.metric(`vcoil_node_addresses_in_use{pool="default"}`); got != "0" {
		t.Fatalf("addresses in use after failed ADDs = %q", got)
	}
	if left := n.podVeths(); len(left) != 0 {
		t.Fatalf("veths left: %v", left)
	}
	entries, _ := os.ReadDir(daemon.CheckpointDir(filepath.Join(n.dir, "state")))
	if len(entries) != 0 {
		t.Fatalf("%d checkpoint entries left", len(entries))
	}
}

func TestDirectRoutingConnectsPodsOfTwoNodes(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n7 := newNode(t, f, 7, "--direct-routing")
	n8 := newNode(t, f, 8, "--direct-routing")
	a, b := newPod(t, "on7"), newPod(t, "on8")
	n7.mustAdd(a)
	n8.mustAdd(b)
	serve(t, b.ns, ":8080")
	serve(t, a.ns, ":8080")
	poll.Eventually(t, 10*time.Second, func() error {
		if err := talk(a.ns, hostPort(b.ipv4(), 8080)); err != nil {
			return err
		}
		return talk(b.ns, hostPort(a.ipv4(), 8080))
	})
}

// nodeSubnet is the node's node subnet block.
func nodeSubnet(t *testing.T, node string) ipam.Block {
	t.Helper()
	for _, b := range blocksOf(t, node) {
		if b.NodeSubnet {
			blk, err := ipam.ParseBlock(ptr.Deref(b.IPv4, ""), ptr.Deref(b.IPv6, ""))
			if err != nil {
				t.Fatal(err)
			}
			return blk
		}
	}
	t.Fatalf("node %s has no node subnet", node)
	return ipam.Block{}
}

func wantCNIError(t *testing.T, err error, code uint, msg string) {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a CNI error", err, err)
	}
	if ce.Code != code || !strings.Contains(ce.Msg+" "+ce.Details, msg) {
		t.Fatalf("CNI error %d %q (%s), want code %d mentioning %q", ce.Code, ce.Msg, ce.Details, code, msg)
	}
}

func parallel(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(i) }()
	}
	wg.Wait()
	return errs
}

func TestConflistMTUReachesThePod(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 9)
	conf, err := confFromBytes(strings.Replace(string(n.conf.Bytes), `"type": "vcoil",`, `"type": "vcoil", "mtu": 1400,`, 1))
	if err != nil {
		t.Fatal(err)
	}
	n.conf = conf
	p := newPod(t, "mtu")
	n.mustAdd(p)
	link, err := p.ns.Netlink().LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if link.Attrs().MTU != 1400 || p.result.Interfaces[1].Mtu != 1400 {
		t.Fatalf("pod eth0 MTU = %d, result says %d; want the conflist's 1400", link.Attrs().MTU, p.result.Interfaces[1].Mtu)
	}
	if err := n.check(p); err != nil {
		t.Fatalf("CHECK with the conflist's MTU: %v", err)
	}
}
