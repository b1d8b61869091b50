package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// nodeObjects counts the blocks and requests left for node.
func nodeObjects(node string) (blocks, requests int, err error) {
	ctx := context.Background()
	var bl vcoilv2.AddressBlockList
	if err := env.Client.List(ctx, &bl, client.MatchingLabels{vcoilv2.LabelNode: node}); err != nil {
		return 0, 0, err
	}
	var rl vcoilv2.BlockRequestList
	if err := env.Client.List(ctx, &rl); err != nil {
		return 0, 0, err
	}
	for _, r := range rl.Items {
		if r.Spec.NodeName == node {
			requests++
		}
	}
	return len(bl.Items), requests, nil
}

func TestDeletedNodeLosesItsBlocksAndRequests(t *testing.T) {
	cleanAPIServer(t)
	startController(t, time.Hour) // no sweep during the test: the watch acts
	createPool(t, "default", 5, v4("10.76.0.0/24"))
	n1 := env.CreateNode(t, "node-1", "")
	env.CreateNode(t, "node-2", "")
	allocate(t, "node-1", "default")
	allocate(t, "node-1", "default")
	allocate(t, "node-2", "default")

	if err := env.Client.Delete(context.Background(), n1); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		b, r, err := nodeObjects("node-1")
		if err != nil {
			return err
		}
		if b != 0 || r != 0 {
			return fmt.Errorf("node-1 still has %d blocks and %d requests", b, r)
		}
		return nil
	})
	if b, r, err := nodeObjects("node-2"); err != nil || b != 1 || r != 1 {
		t.Fatalf("node-2 has %d blocks and %d requests (%v), want 1 and 1", b, r, err)
	}
}

func TestPeriodicSweepCollectsNodesDeletedWhileNoControllerRan(t *testing.T) {
	cleanAPIServer(t)
	c := startController(t, time.Hour)
	createPool(t, "default", 5, v4("10.77.0.0/24"))
	n := env.CreateNode(t, "node-1", "")
	allocate(t, "node-1", "default")
	c.stop()
	if err := env.Client.Delete(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	// A request of a node that never existed is collected too.
	createRequest(t, "never-existed", "default")

	startController(t, 200*time.Millisecond)
	poll.Eventually(t, 10*time.Second, func() error {
		for _, node := range []string{"node-1", "never-existed"} {
			b, r, err := nodeObjects(node)
			if err != nil {
				return err
			}
			if b != 0 || r != 0 {
				return fmt.Errorf("%s still has %d blocks and %d requests", node, b, r)
			}
		}
		return nil
	})
}
