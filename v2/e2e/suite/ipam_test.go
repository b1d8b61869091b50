package suite

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

const (
	groupIPAM       = "IP address management"
	groupResilience = "Restarts and failures"
)

// smallPool creates a pool of 4-address blocks (2 for pods) and a namespace
// that uses it, so that a few pods fill blocks.
func smallPool(t *testing.T, k *cluster, name, cidr string) string {
	t.Helper()
	c := ctx(t, time.Minute)
	p := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: 2, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To(cidr)}}},
	}
	if err := k.c.Create(c, p); err != nil {
		t.Fatalf("create pool %s: %v", name, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{vcoilv2.AnnotationPool: name}}}
	if err := k.c.Create(c, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := context.Background()
		_ = k.c.Delete(c, ns)
		// The pool goes once its blocks are released.
		_ = k.c.Delete(c, p)
	})
	return name
}

func blocksOf(c context.Context, k *cluster, node, pool string) ([]vcoilv2.AddressBlock, error) {
	sel := client.MatchingLabels{}
	if node != "" {
		sel[vcoilv2.LabelNode] = node
	}
	if pool != "" {
		sel[vcoilv2.LabelPool] = pool
	}
	var l vcoilv2.AddressBlockList
	err := k.c.List(c, &l, sel)
	return l.Items, err
}

// TestIPAM checks the node subnets, their NAT loopbacks, that pods get
// addresses of their node's blocks, and that blocks come and go with pods.
func TestIPAM(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	c := ctx(t, 5*time.Minute)

	record(t, groupIPAM, "every node has one node subnet, and its NAT loopback is published", byVcoil, func(t *testing.T) error {
		for _, n := range []*corev1.Node{w.nodeA, w.nodeB} {
			blocks, err := blocksOf(c, k, n.Name, "")
			if err != nil {
				return err
			}
			var subnets []vcoilv2.AddressBlock
			for _, b := range blocks {
				if b.NodeSubnet {
					subnets = append(subnets, b)
				}
			}
			if len(subnets) != 1 {
				return fmt.Errorf("node %s has %d node subnets", n.Name, len(subnets))
			}
			blk, err := ipam.ParseBlock(ptr.Deref(subnets[0].IPv4, ""), ptr.Deref(subnets[0].IPv6, ""))
			if err != nil {
				return err
			}
			loop, err := blk.NATLoopback()
			if err != nil {
				return err
			}
			node := &corev1.Node{}
			if err := k.c.Get(c, client.ObjectKeyFromObject(n), node); err != nil {
				return err
			}
			if got := node.Annotations[vcoilv2.AnnotationNATLoopback]; got != loop.String() {
				return fmt.Errorf("node %s: annotation %s = %q, want %q", n.Name, vcoilv2.AnnotationNATLoopback, got, loop)
			}
		}
		return nil
	})

	record(t, groupIPAM, "pods get addresses of their node's blocks, never a NAT loopback", byVcoil, func(t *testing.T) error {
		var pods corev1.PodList
		if err := k.c.List(c, &pods); err != nil {
			return err
		}
		loopbacks := map[string]string{}
		var nodes corev1.NodeList
		if err := k.c.List(c, &nodes); err != nil {
			return err
		}
		for _, n := range nodes.Items {
			for _, a := range strings.Split(n.Annotations[vcoilv2.AnnotationNATLoopback], ",") {
				if a != "" {
					loopbacks[a] = n.Name
				}
			}
		}
		checked := 0
		for _, p := range pods.Items {
			if p.Spec.HostNetwork || p.Status.PodIP == "" {
				continue
			}
			for _, ip := range p.Status.PodIPs {
				if node, ok := loopbacks[ip.IP]; ok {
					return fmt.Errorf("pod %s/%s has %s, the NAT loopback of %s", p.Namespace, p.Name, ip.IP, node)
				}
			}
			blocks, err := blocksOf(c, k, p.Spec.NodeName, "")
			if err != nil {
				return err
			}
			if !inBlocks(podIP(&p), blocks) {
				return fmt.Errorf("pod %s/%s on %s has %s, outside its node's blocks", p.Namespace, p.Name, p.Spec.NodeName, p.Status.PodIP)
			}
			checked++
		}
		if checked == 0 {
			return fmt.Errorf("no pod to check")
		}
		return nil
	})

	pool := smallPool(t, k, "vcoil-e2e-small", spareSubnet(k, 0))
	record(t, groupIPAM, "a node acquires blocks as pods fill them and releases them when the pods go", byVcoil, func(t *testing.T) error {
		var pods []*corev1.Pod
		for i := 0; i < 3; i++ { // two per block: three pods need two blocks
			p := k.agentPod(t, pool, fmt.Sprintf("small-%d", i), w.nodeA.Name, false, nil)
			pods = append(pods, p)
		}
		for _, p := range pods {
			k.waitRunning(t, p)
		}
		blocks, err := blocksOf(c, k, w.nodeA.Name, pool)
		if err != nil {
			return err
		}
		// The pods' addresses are in two blocks; vcoild may hold a third
		// one ahead (its low watermark: half a block free).
		used := 0
		for _, b := range blocks {
			for _, p := range pods {
				if inBlocks(podIP(p), []vcoilv2.AddressBlock{b}) {
					used++
					break
				}
			}
		}
		if used != 2 || len(blocks) > 3 {
			return fmt.Errorf("node %s has %d blocks of pool %s for 3 pods, %d of them used: want 2 used and at most one ahead", w.nodeA.Name, len(blocks), pool, used)
		}
		for _, p := range pods {
			if !inBlocks(podIP(p), blocks) {
				return fmt.Errorf("pod %s got %s outside the pool's blocks", p.Name, p.Status.PodIP)
			}
		}
		for _, p := range pods {
			if err := k.c.Delete(c, p, client.GracePeriodSeconds(0)); err != nil {
				return err
			}
		}
		return poll.Until(c, 2*time.Minute, pollInterval, func(context.Context) error {
			blocks, err := blocksOf(c, k, w.nodeA.Name, pool)
			if err == nil && len(blocks) != 0 {
				err = fmt.Errorf("%d blocks of pool %s left on %s after its pods went", len(blocks), pool, w.nodeA.Name)
			}
			return err
		})
	})

	record(t, groupIPAM, "the node's blocks are exported to routing table 119", byVcoil, func(t *testing.T) error {
		blocks, err := blocksOf(c, k, w.nodeA.Name, vcoilv2.DefaultPool)
		if err != nil {
			return err
		}
		out, err := k.exec(c, w.hostA, "/agent", "routes", "--table", "119")
		if err != nil {
			return err
		}
		for _, b := range blocks {
			if b.IPv4 != nil && !strings.Contains(out, *b.IPv4) {
				return fmt.Errorf("table 119 of %s lacks block %s:\n%s", w.nodeA.Name, *b.IPv4, out)
			}
		}
		return nil
	})
}

func inBlocks(a netip.Addr, blocks []vcoilv2.AddressBlock) bool {
	for _, b := range blocks {
		for _, s := range []*string{b.IPv4, b.IPv6} {
			if s == nil {
				continue
			}
			if p, err := netip.ParsePrefix(*s); err == nil && p.Contains(a) {
				return true
			}
		}
	}
	return false
}

// TestResilience restarts vcoild under running pods, fails the controller's
// leader over, and deletes a node.
func TestResilience(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	c := ctx(t, 10*time.Minute)

	record(t, groupResilience, "vcoild restarted while pods run: pods keep addresses and connectivity", byVcoil, func(t *testing.T) error {
		before := w.a1.Status.PodIP
		var ds corev1.PodList
		if err := k.c.List(c, &ds, client.MatchingLabels{"app.kubernetes.io/name": "vcoild"}); err != nil {
			return err
		}
		var victim *corev1.Pod
		for i := range ds.Items {
			if ds.Items[i].Spec.NodeName == w.nodeA.Name {
				victim = &ds.Items[i]
			}
		}
		if victim == nil {
			return fmt.Errorf("no vcoild pod on %s", w.nodeA.Name)
		}
		if err := k.c.Delete(c, victim); err != nil {
			return err
		}
		if err := poll.Until(c, 3*time.Minute, pollInterval, func(context.Context) error { return vcoildReady(c, k, w.nodeA.Name, victim.UID) }); err != nil {
			return err
		}
		if err := k.c.Get(c, client.ObjectKeyFromObject(w.a1), w.a1); err != nil {
			return err
		}
		if w.a1.Status.PodIP != before {
			return fmt.Errorf("pod a1 changed address from %s to %s", before, w.a1.Status.PodIP)
		}
		if err := k.connect(t, w.a1, "tcp", hostPortAddr(podIP(w.b1), portTCP)); err != nil {
			return err
		}
		// The restarted vcoild serves new pods.
		p := k.agentPod(t, w.ns, "after-restart", w.nodeA.Name, false, nil)
		k.waitRunning(t, p)
		return k.connect(t, p, "tcp", hostPortAddr(podIP(w.a1), portTCP))
	})

	record(t, groupResilience, "vcoil-controller leader failover: the new leader answers block requests", byVcoil, func(t *testing.T) error {
		return leaderFailover(t, c, k)
	})

	record(t, groupResilience, "a deleted node's blocks and requests are collected", byVcoil, func(t *testing.T) error {
		name := fmt.Sprintf("vcoil-e2e-gone-%d", time.Now().Unix())
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := k.c.Create(c, node); err != nil {
			return err
		}
		pool := smallPool(t, k, "vcoil-e2e-gone", spareSubnet(k, 1))
		for i := 0; i < 2; i++ {
			br := &vcoilv2.BlockRequest{
				ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-"},
				Spec:       vcoilv2.BlockRequestSpec{NodeName: name, PoolName: pool},
			}
			if err := k.c.Create(c, br); err != nil {
				return err
			}
		}
		if err := poll.Until(c, time.Minute, pollInterval, func(context.Context) error {
			blocks, err := blocksOf(c, k, name, "")
			if err == nil && len(blocks) != 2 {
				err = fmt.Errorf("%d blocks carved for %s, want 2", len(blocks), name)
			}
			return err
		}); err != nil {
			return err
		}
		if err := k.c.Delete(c, node); err != nil {
			return err
		}
		return poll.Until(c, 2*time.Minute, pollInterval, func(context.Context) error {
			blocks, err := blocksOf(c, k, name, "")
			if err != nil {
				return err
			}
			var reqs vcoilv2.BlockRequestList
			if err := k.c.List(c, &reqs); err != nil {
				return err
			}
			n := 0
			for _, r := range reqs.Items {
				if r.Spec.NodeName == name {
					n++
				}
			}
			if len(blocks)+n != 0 {
				return fmt.Errorf("deleted node %s still has %d blocks and %d requests", name, len(blocks), n)
			}
			return nil
		})
	})
}

// vcoildReady waits for a vcoild pod on node other than old to be ready.
func vcoildReady(c context.Context, k *cluster, node string, old interface{}) error {
	var ds corev1.PodList
	if err := k.c.List(c, &ds, client.MatchingLabels{"app.kubernetes.io/name": "vcoild"}); err != nil {
		return err
	}
	for _, p := range ds.Items {
		if p.Spec.NodeName != node || p.UID == old || !p.DeletionTimestamp.IsZero() {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("the new vcoild on %s is not ready: %s", node, podReason(&p))
	}
	return fmt.Errorf("no new vcoild pod on %s yet", node)
}

// leaderFailover deletes the controller replica that holds the leader
// lease, waits for another holder and checks that a block request is
// answered. Deleting a standby would leave the lease where it is, and the
// wait for it to move would run out.
func leaderFailover(t *testing.T, c context.Context, k *cluster) error {
	var pods corev1.PodList
	if err := k.c.List(c, &pods, client.MatchingLabels{"app.kubernetes.io/name": "vcoil-controller"}); err != nil {
		return err
	}
	if len(pods.Items) == 0 {
		return fmt.Errorf("no vcoil-controller pods")
	}
	lease := &coordinationv1.Lease{}
	leaseKey := client.ObjectKey{Namespace: pods.Items[0].Namespace, Name: constants.ControllerLeaderElectionID}
	if err := k.c.Get(c, leaseKey, lease); err != nil {
		return fmt.Errorf("leader lease %s: %w", leaseKey, err)
	}
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	var nodes corev1.NodeList
	if err := k.c.List(c, &nodes); err != nil {
		return err
	}
	candidates, err := leaseHolderPods(holder, pods.Items, nodes.Items)
	if err != nil {
		return err
	}
	// One pod, but for replicas that share the holder's node, which cannot
	// be told apart: then one after the other, until the lease moves.
	for _, p := range candidates {
		t.Logf("deleting %s: lease %s is held by %q", p.Name, leaseKey, holder)
		if err := k.c.Delete(c, p); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err = poll.Until(c, 90*time.Second, time.Second, func(c context.Context) error {
			if err := k.c.Get(c, leaseKey, lease); err != nil {
				return err
			}
			if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h == "" || h == holder {
				return fmt.Errorf("the lease is held by %q", h)
			}
			return nil
		})
		if err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("after deleting the leader: %w", err)
	}
	node := fmt.Sprintf("vcoil-e2e-failover-%d", time.Now().Unix())
	if err := k.c.Create(c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}); err != nil {
		return err
	}
	defer func() { _ = k.c.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}) }()
	br := &vcoilv2.BlockRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-"},
		Spec:       vcoilv2.BlockRequestSpec{NodeName: node, PoolName: vcoilv2.DefaultPool},
	}
	if err := k.c.Create(c, br); err != nil {
		return err
	}
	return poll.Until(c, 2*time.Minute, pollInterval, func(context.Context) error {
		if err := k.c.Get(c, client.ObjectKeyFromObject(br), br); err != nil {
			return err
		}
		if !br.Completed() {
			return fmt.Errorf("block request not answered after the failover: %+v", br.Status)
		}
		return nil
	})
}

// leaseHolderPods finds the pod of a controller-runtime lease holder, whose
// identity is its host name, "_", and a UUID. A pod's host name is its own
// name, or on the host network (as vcoil-controller runs) its node's: when
// replicas share a node, every one of them there is returned.
func leaseHolderPods(holder string, pods []corev1.Pod, nodes []corev1.Node) ([]*corev1.Pod, error) {
	host, _, ok := strings.Cut(holder, "_")
	if !ok || host == "" {
		return nil, fmt.Errorf("lease holder %q is not HOSTNAME_UUID", holder)
	}
	hostOf := map[string]string{} // node name -> host name
	for _, n := range nodes {
		hostOf[n.Name] = n.Name
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeHostName {
				hostOf[n.Name] = a.Address
			}
		}
	}
	var found []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		match := p.Name == host
		if p.Spec.HostNetwork {
			match = hostOf[p.Spec.NodeName] == host || p.Spec.NodeName == host
		}
		if match && p.DeletionTimestamp == nil {
			found = append(found, p)
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no vcoil-controller pod has the host name %s of lease holder %q", host, holder)
	}
	return found, nil
}

// spareSubnet is the i-th /26 of the spare prefix.
func spareSubnet(k *cluster, i int) string {
	a := k.settings.spare.Addr().As4()
	a[3] = byte(64 * i)
	return netip.PrefixFrom(netip.AddrFrom4(a), 26).String()
}
