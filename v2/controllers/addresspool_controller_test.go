package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

func getPool(t *testing.T, name string) (*vcoilv2.AddressPool, error) {
	t.Helper()
	p := &vcoilv2.AddressPool{}
	return p, env.Client.Get(context.Background(), client.ObjectKey{Name: name}, p)
}

func waitPoolStatus(t *testing.T, name string, max, allocated int64, available metav1.ConditionStatus) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, func() error {
		p, err := getPool(t, name)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, vcoilv2.PoolAvailable)
		if p.Status.BlocksMax != max || p.Status.BlocksAllocated != allocated || c == nil || c.Status != available || p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("status = %+v, want max %d allocated %d available %s", p.Status, max, allocated, available)
		}
		return nil
	})
}

func TestAddressPoolStatusMetricsAndFinalizer(t *testing.T) {
	cleanAPIServer(t)
	c := startController(t, time.Hour)
	env.CreateNode(t, "node-1", "")
	createPool(t, "p", 5, v4("10.75.0.0/26")) // 2 blocks

	poll.Eventually(t, 10*time.Second, func() error {
		p, err := getPool(t, "p")
		if err != nil {
			return err
		}
		if len(p.Finalizers) != 1 || p.Finalizers[0] != vcoilv2.Finalizer {
			return fmt.Errorf("finalizers = %v", p.Finalizers)
		}
		return nil
	})
	waitPoolStatus(t, "p", 2, 0, metav1.ConditionTrue)

	b0 := allocate(t, "node-1", "p")
	allocate(t, "node-1", "p")
	waitPoolStatus(t, "p", 2, 2, metav1.ConditionFalse)
	p, _ := getPool(t, "p")
	if c := meta.FindStatusCondition(p.Status.Conditions, vcoilv2.PoolAvailable); c.Reason != vcoilv2.ReasonPoolExhausted {
		t.Errorf("Available condition = %+v, want reason PoolExhausted", c)
	}
	wantMetrics := `
# HELP vcoil_pool_blocks_allocated The number of address blocks carved from the pool.
# TYPE vcoil_pool_blocks_allocated gauge
vcoil_pool_blocks_allocated{pool="p"} 2
# HELP vcoil_pool_blocks_max The number of address blocks the pool's subnets can hold.
# TYPE vcoil_pool_blocks_max gauge
vcoil_pool_blocks_max{pool="p"} 2
`
	if err := testutil.GatherAndCompare(c.registry, strings.NewReader(wantMetrics)); err != nil {
		t.Errorf("metrics: %v", err)
	}

	// Appending a subnet grows the pool.
	p.Spec.Subnets = append(p.Spec.Subnets, v4("10.75.1.0/27"))
	if err := env.Client.Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	waitPoolStatus(t, "p", 3, 2, metav1.ConditionTrue)

	// Deletion waits for the blocks.
	if err := env.Client.Delete(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	var blocks vcoilv2.AddressBlockList
	if err := env.Client.List(context.Background(), &blocks); err != nil {
		t.Fatal(err)
	}
	releaseBlockNow(t, b0)
	// Once the controller has counted the remaining block, the pool is
	// still there, held by its finalizer.
	waitPoolStatus(t, "p", 3, 1, metav1.ConditionTrue)
	if p, err := getPool(t, "p"); err != nil || p.DeletionTimestamp.IsZero() {
		t.Fatalf("pool with a block left: %v, %+v", err, p)
	}
	for i := range blocks.Items {
		releaseBlockNow(t, &blocks.Items[i])
	}
	poll.Eventually(t, 10*time.Second, func() error {
		_, err := getPool(t, "p")
		if err == nil {
			return fmt.Errorf("pool still exists")
		}
		return client.IgnoreNotFound(err)
	})
	// The controller forgets the pool's metrics just after it lets the
	// pool go.
	poll.Eventually(t, 10*time.Second, func() error {
		if n := testutil.CollectAndCount(c.registry); n != 0 {
			return fmt.Errorf("%d metric series remain after the pool is gone", n)
		}
		return nil
	})
}

// TestAddressPoolReconcilerLeavesLoadBalancerPoolsAlone calls the reconciler
// itself, so that "it wrote nothing" is a fact when Reconcile returns, not a
// wait for something that should not happen; the LoadBalancer reconciler,
// which owns such pools, does not run here.
func TestAddressPoolReconcilerLeavesLoadBalancerPoolsAlone(t *testing.T) {
	cleanAPIServer(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	metrics, err := NewPoolMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := &AddressPoolReconciler{Client: env.Client, Metrics: metrics}
	reconcile := func(name string) {
		t.Helper()
		if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatalf("reconcile %s: %v", name, err)
		}
	}

	// The control: the same call finalizes a Pods pool and counts its blocks.
	createPool(t, "pods", 5, v4("10.97.0.0/26"))
	reconcile("pods")
	if p, err := getPool(t, "pods"); err != nil || !controllerutil.ContainsFinalizer(p, vcoilv2.Finalizer) || p.Status.BlocksMax != 2 {
		t.Fatalf("Pods pool after reconcile: %v, %+v", err, p)
	}

	if err := env.Client.Create(ctx, lbPoolObject("bare", v4("198.51.100.96/28"))); err != nil {
		t.Fatal(err)
	}
	bare, _ := getPool(t, "bare")
	reconcile("bare")
	if p, err := getPool(t, "bare"); err != nil || p.ResourceVersion != bare.ResourceVersion {
		t.Fatalf("a LoadBalancer pool was written: %v, finalizers %v, status %+v", err, p.Finalizers, p.Status)
	}

	// A pool as the LoadBalancer reconciler keeps it: its finalizer, its
	// counts. A Pods pool of the same name had gauges before.
	lb := lbPoolObject("lb", v4("198.51.100.112/28"))
	lb.Finalizers = []string{vcoilv2.Finalizer}
	if err := env.Client.Create(ctx, lb); err != nil {
		t.Fatal(err)
	}
	lb.Status = vcoilv2.AddressPoolStatus{
		ObservedGeneration: lb.Generation, AddressesMax: 16, AddressesAllocated: 3,
		Conditions: []metav1.Condition{{Type: vcoilv2.PoolAvailable, Status: metav1.ConditionTrue,
			Reason: vcoilv2.ReasonAddressesFree, Message: "13 of 16 addresses are free", LastTransitionTime: metav1.Now()}},
	}
	if err := env.Client.Status().Update(ctx, lb); err != nil {
		t.Fatal(err)
	}
	metrics.set("lb", 4, 1)
	reconcile("lb")
	if p, err := getPool(t, "lb"); err != nil || p.ResourceVersion != lb.ResourceVersion {
		t.Fatalf("a LoadBalancer pool was written: %v, finalizers %v, status %+v", err, p.Finalizers, p.Status)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP vcoil_pool_blocks_allocated The number of address blocks carved from the pool.
# TYPE vcoil_pool_blocks_allocated gauge
vcoil_pool_blocks_allocated{pool="pods"} 0
# HELP vcoil_pool_blocks_max The number of address blocks the pool's subnets can hold.
# TYPE vcoil_pool_blocks_max gauge
vcoil_pool_blocks_max{pool="pods"} 2
`)); err != nil {
		t.Errorf("metrics: the LoadBalancer pools must not be block pools: %v", err)
	}

	// Being deleted without blocks, a Pods pool would lose its finalizer
	// here; a LoadBalancer pool keeps it until its owner lets it go.
	if err := env.Client.Delete(ctx, lb); err != nil {
		t.Fatal(err)
	}
	deleting, err := getPool(t, "lb")
	if err != nil || deleting.DeletionTimestamp.IsZero() {
		t.Fatalf("pool being deleted: %v, %+v", err, deleting)
	}
	reconcile("lb")
	if p, err := getPool(t, "lb"); err != nil || p.ResourceVersion != deleting.ResourceVersion || !controllerutil.ContainsFinalizer(p, vcoilv2.Finalizer) {
		t.Fatalf("the reconciler released a LoadBalancer pool: %v, %+v", err, p)
	}
}
