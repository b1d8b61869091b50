package healthcheck

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vcoil/vcoil/v2/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

func TestNodeEligibilityFollowsTheNodeInTheAPIServer(t *testing.T) {
	ctx := t.Context()
	c := env.Client
	node := env.CreateNode(t, "eligibility", "")
	t.Cleanup(func() {
		var n corev1.Node
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(node), &n); err == nil {
			controllerutil.RemoveFinalizer(&n, "vcoil.io/test")
			_ = c.Update(context.Background(), &n)
			_ = c.Delete(context.Background(), &n)
		}
	})
	eligible := NodeEligibility(c, node.Name)
	update := func(change func(*corev1.Node)) {
		t.Helper()
		var n corev1.Node
		if err := c.Get(ctx, client.ObjectKeyFromObject(node), &n); err != nil {
			t.Fatal(err)
		}
		change(&n)
		if err := c.Update(ctx, &n); err != nil {
			t.Fatal(err)
		}
	}

	if !eligible(ctx) {
		t.Error("a plain node: want eligible")
	}
	if NodeEligibility(c, "no-such-node")(ctx) {
		t.Error("a node that does not exist: want not eligible")
	}
	update(func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: ToBeDeletedTaint, Value: "1700000000", Effect: corev1.TaintEffectNoSchedule})
	})
	if eligible(ctx) {
		t.Error("tainted by the autoscaler: want not eligible")
	}
	update(func(n *corev1.Node) {
		n.Spec.Taints = nil
		controllerutil.AddFinalizer(n, "vcoil.io/test")
	})
	if !eligible(ctx) {
		t.Error("taint removed: want eligible again")
	}
	if err := c.Delete(ctx, node); err != nil {
		t.Fatal(err)
	}
	if eligible(ctx) {
		t.Error("being deleted: want not eligible")
	}
}
