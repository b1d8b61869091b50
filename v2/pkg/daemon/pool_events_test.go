package daemon

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// createPod creates the Pod object of a CNI ADD of n.args(id, namespace).
func createPod(t *testing.T, id, namespace string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pod-" + id},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	return pod
}

// A pod whose pool has no free block gets a Warning Event PoolExhausted
// naming the pool, on the Pod with its UID (where `kubectl describe pod`
// shows it); the controller records PoolExhausted on the AddressPool too.
func TestAPodOfAnExhaustedPoolGetsAnEventNamingThePool(t *testing.T) {
	ctx := context.Background()
	pool := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "tiny"},
		// Two blocks of one address.
		Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 0, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.61.0.0/31")}}},
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "cramped", Annotations: map[string]string{vcoilv2.AnnotationPool: "tiny"}}}
	for _, o := range []client.Object{pool, ns} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	ensureNode(t, "node-x")
	n := startNode(t, "node-x", t.TempDir(), newFakeDataplane())
	n.add(t, "e0000001", "cramped")
	n.add(t, "e0000002", "cramped")
	pod := createPod(t, "e0000003", "cramped")
	_, err := n.srv.Add(ctx, n.args("e0000003", "cramped"))
	if cniCode(err) != cnirpc.ErrorCode_POOL_EXHAUSTED {
		t.Fatalf("third pod of a pool of two addresses: %v, want POOL_EXHAUSTED", err)
	}
	env.WaitForEvent(t, 20*time.Second, testenv.EventOf{
		Kind: "Pod", Namespace: "cramped", Name: pod.Name, UID: pod.UID,
		Type: corev1.EventTypeWarning, Reason: vcoilv2.ReasonPoolExhausted,
		Note: `address pool "tiny" (the pool named by annotation vcoil.io/pool of namespace "cramped") has no free block`,
	})
	env.WaitForEvent(t, 20*time.Second, testenv.EventOf{
		Kind: "AddressPool", Name: "tiny", UID: pool.UID,
		Type: corev1.EventTypeWarning, Reason: vcoilv2.ReasonPoolExhausted, Note: `all 2 blocks of address pool "tiny" are allocated`,
	})
}

// A pod of a namespace whose annotation names a pool that does not exist
// gets a Warning Event PoolNotFound naming the pool and the annotation.
func TestAPodOfAMissingPoolGetsAnEventNamingThePool(t *testing.T) {
	ensureNode(t, "node-y")
	n := startNode(t, "node-y", t.TempDir(), newFakeDataplane())
	pod := createPod(t, "f0000001", "broken")
	if _, err := n.srv.Add(context.Background(), n.args("f0000001", "broken")); cniCode(err) != cnirpc.ErrorCode_POOL_NOT_FOUND {
		t.Fatalf("pod of a namespace naming a missing pool: %v, want POOL_NOT_FOUND", err)
	}
	env.WaitForEvent(t, 20*time.Second, testenv.EventOf{
		Kind: "Pod", Namespace: "broken", Name: pod.Name, UID: pod.UID,
		Type: corev1.EventTypeWarning, Reason: vcoilv2.ReasonPoolNotFound,
		Note: `address pool "nope" (the pool named by annotation vcoil.io/pool of namespace "broken") does not exist`,
	})
}

// A pod the apiserver does not know (yet) still gets its Event, by the UID
// the runtime passes in CNI_ARGS.
func TestAPodNotInTheAPIGetsItsEventByTheRuntimesUID(t *testing.T) {
	ensureNode(t, "node-y")
	n := startNode(t, "node-y", t.TempDir(), newFakeDataplane())
	args := n.args("f0000002", "broken")
	args.Args[argPodUID] = "0d1c6f7e-5b1a-4c43-9c4e-7f2f0a0b0c0d"
	if _, err := n.srv.Add(context.Background(), args); cniCode(err) != cnirpc.ErrorCode_POOL_NOT_FOUND {
		t.Fatalf("ADD: %v, want POOL_NOT_FOUND", err)
	}
	env.WaitForEvent(t, 20*time.Second, testenv.EventOf{
		Kind: "Pod", Namespace: "broken", Name: "pod-f0000002", UID: "0d1c6f7e-5b1a-4c43-9c4e-7f2f0a0b0c0d",
		Type: corev1.EventTypeWarning, Reason: vcoilv2.ReasonPoolNotFound, Note: `address pool "nope"`,
	})
}
