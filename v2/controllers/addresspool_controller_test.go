package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
