package config_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// vcoild's rights on Nodes, AddressBlocks and BlockRequests are the whole
// cluster's in RBAC; admission narrows them to the node its token is bound
// to. The requests are the ones vcoild sends (merge patches, deletes,
// creates of package nodeipam).
func TestVcoildChangesOnlyItsOwnNode(t *testing.T) {
	e := admissionEnv(t)
	ctx := context.Background()
	const own, other = "adm-node-a", "adm-node-b"
	for _, n := range []string{own, other} {
		e.CreateNode(t, n, "")
	}
	vcoild := serviceAccount(t, e, "vcoil-daemon", own)

	annotate := func(c client.Client, node string, mutate func(*corev1.Node)) error {
		n := &corev1.Node{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(n.DeepCopy())
		mutate(n)
		return c.Patch(ctx, n, patch)
	}
	loopback := func(addr string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[vcoilv2.AnnotationNATLoopback] = addr
		}
	}

	// In force once another node's annotation is refused.
	poll.Eventually(t, 30*time.Second, func() error {
		err := annotate(vcoild, other, loopback("10.1.0.31"))
		if err == nil {
			return errors.New("vcoild of one node annotated another")
		}
		if !byPolicy(err) {
			return poll.Stop(err)
		}
		refused(t, "another node's annotation", err, true, own, "only its own Node", other)
		return nil
	})
	admitted(t, "its node's NAT loopback", annotate(vcoild, own, loopback("10.1.0.63")))
	admitted(t, "its node's NAT loopback changed", annotate(vcoild, own, loopback("10.1.0.63,fd00:1::3f")))
	refused(t, "another annotation of its node", annotate(vcoild, own, func(n *corev1.Node) {
		n.Annotations["example.com/other"] = "x"
	}), true, "only the annotation vcoil.io/nat-loopback")
	refused(t, "a label of its node", annotate(vcoild, own, func(n *corev1.Node) {
		n.Labels = map[string]string{"node-role.kubernetes.io/control-plane": ""}
	}), true, "only the annotation vcoil.io/nat-loopback")
	refused(t, "its node's spec", annotate(vcoild, own, func(n *corev1.Node) {
		n.Spec.Unschedulable = true
	}), true, "only the annotation vcoil.io/nat-loopback")
	refused(t, "a token bound to no pod", annotate(serviceAccount(t, e, "vcoil-daemon", ""), own, loopback("10.1.0.1")),
		true, "no node name")
	// Other users are not vcoild: the policy leaves them alone.
	admitted(t, "an administrator's label", annotate(e.Client, other, func(n *corev1.Node) {
		n.Labels = map[string]string{"example.com/rack": "1"}
	}))

	// AddressBlocks: vcoild removes the finalizer of its node's block and
	// deletes it; others' it leaves alone.
	block := func(name, node string) *vcoilv2.AddressBlock {
		b := &vcoilv2.AddressBlock{
			ObjectMeta: metav1.ObjectMeta{
				Name:       name,
				Labels:     map[string]string{vcoilv2.LabelNode: node, vcoilv2.LabelPool: "adm"},
				Finalizers: []string{vcoilv2.Finalizer},
			},
			IPv4: ptr.To("10.99." + map[string]string{own: "1", other: "2"}[node] + ".0/27"),
		}
		if err := e.Client.Create(ctx, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	ownBlock, otherBlock := block("adm-0", own), block("adm-1", other)
	changeBlock := func(b *vcoilv2.AddressBlock, mutate func(*vcoilv2.AddressBlock)) error {
		cur := &vcoilv2.AddressBlock{}
		if err := e.Client.Get(ctx, client.ObjectKeyFromObject(b), cur); err != nil {
			t.Fatal(err)
		}
		patch := client.MergeFrom(cur.DeepCopy())
		mutate(cur)
		return vcoild.Patch(ctx, cur, patch)
	}
	unfinalize := func(b *vcoilv2.AddressBlock) { controllerutil.RemoveFinalizer(b, vcoilv2.Finalizer) }
	refused(t, "another node's block released", changeBlock(otherBlock, unfinalize), true, "only its node's AddressBlocks", otherBlock.Name)
	refused(t, "another node's block deleted", vcoild.Delete(ctx, otherBlock), true, "only its node's AddressBlocks")
	refused(t, "its block given to another node", changeBlock(ownBlock, func(b *vcoilv2.AddressBlock) {
		b.Labels[vcoilv2.LabelNode] = other
	}), true, "only remove finalizers")
	refused(t, "another node's block taken", changeBlock(otherBlock, func(b *vcoilv2.AddressBlock) {
		b.Labels[vcoilv2.LabelNode] = own
	}), true, "only its node's AddressBlocks")
	refused(t, "a finalizer added to its block", changeBlock(ownBlock, func(b *vcoilv2.AddressBlock) {
		b.Finalizers = append(b.Finalizers, "example.com/keep")
	}), true, "only remove finalizers")
	admitted(t, "its block released", changeBlock(ownBlock, unfinalize))
	admitted(t, "its block deleted", vcoild.Delete(ctx, ownBlock))

	// BlockRequests: vcoild creates and deletes its node's.
	request := func(node string) *vcoilv2.BlockRequest {
		return &vcoilv2.BlockRequest{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: node + "-adm-",
				Labels:       map[string]string{vcoilv2.LabelNode: node, vcoilv2.LabelPool: "adm"},
			},
			Spec: vcoilv2.BlockRequestSpec{NodeName: node, PoolName: "adm"},
		}
	}
	refused(t, "a request for another node", vcoild.Create(ctx, request(other)), true, "only BlockRequests for its node", other)
	mislabelled := request(own)
	mislabelled.Labels[vcoilv2.LabelNode] = other
	refused(t, "a request labelled for another node", vcoild.Create(ctx, mislabelled), true, "only BlockRequests for its node")
	ownRequest := request(own)
	admitted(t, "a request for its node", vcoild.Create(ctx, ownRequest))
	admitted(t, "its request deleted", vcoild.Delete(ctx, ownRequest))
	otherRequest := request(other)
	if err := e.Client.Create(ctx, otherRequest); err != nil {
		t.Fatal(err)
	}
	refused(t, "another node's request deleted", vcoild.Delete(ctx, otherRequest), true, "only BlockRequests for its node")
}

// Every node's NetworkPolicies read the PodEndpoints, so vcoild writes
// only those of its node's pods: created, updated and deleted with
// spec.nodeName and the label vcoil.io/node its own, never moved to or
// taken from another node.
func TestVcoildWritesOnlyItsNodesPodEndpoints(t *testing.T) {
	e := admissionEnv(t)
	ctx := context.Background()
	const own, other = "adm-ep-node-a", "adm-ep-node-b"
	vcoild := serviceAccount(t, e, "vcoil-daemon", own)
	ns := namespace(t, e, nil)
	endpoint := func(name, node, label string) *vcoilv2.PodEndpoint {
		return &vcoilv2.PodEndpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{vcoilv2.LabelNode: label}},
			Spec: vcoilv2.PodEndpointSpec{
				PodUID: "uid-" + types.UID(name), NodeName: node, Addresses: []string{"10.1.0.5"},
				PodLabels: map[string]string{"app": "web"},
			},
		}
	}

	// In force once another node's endpoint is refused.
	poll.Eventually(t, 30*time.Second, func() error {
		err := vcoild.Create(ctx, endpoint("foreign", other, other))
		if err == nil {
			return errors.New("vcoild of one node created another node's PodEndpoint")
		}
		if !byPolicy(err) {
			return poll.Stop(err)
		}
		refused(t, "another node's endpoint created", err, true, own, "only PodEndpoints of its node", other)
		return nil
	})
	refused(t, "an endpoint labelled for another node", vcoild.Create(ctx, endpoint("mislabelled", own, other)), true, "only PodEndpoints of its node")

	mine := endpoint("mine", own, own)
	admitted(t, "its node's endpoint created", vcoild.Create(ctx, mine))
	mine.Spec.PodLabels["app"] = "db"
	admitted(t, "its node's endpoint updated", vcoild.Update(ctx, mine))
	moved := mine.DeepCopy()
	moved.Spec.NodeName = other
	refused(t, "its endpoint given to another node", vcoild.Update(ctx, moved), true, "only PodEndpoints of its node")
	relabelled := mine.DeepCopy()
	relabelled.Labels[vcoilv2.LabelNode] = other
	refused(t, "its endpoint labelled for another node", vcoild.Update(ctx, relabelled), true, "only PodEndpoints of its node")

	theirs := endpoint("theirs", other, other)
	if err := e.Client.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	taken := theirs.DeepCopy()
	taken.Spec.NodeName, taken.Labels[vcoilv2.LabelNode] = own, own
	refused(t, "another node's endpoint taken", vcoild.Update(ctx, taken), true, "only PodEndpoints of its node", other)
	forged := theirs.DeepCopy()
	forged.Spec.PodLabels = map[string]string{"role": "admin"}
	refused(t, "another node's endpoint changed", vcoild.Update(ctx, forged), true, "only PodEndpoints of its node")
	refused(t, "another node's endpoint deleted", vcoild.Delete(ctx, theirs), true, "only PodEndpoints of its node")
	admitted(t, "its node's endpoint deleted", vcoild.Delete(ctx, mine))
}
