package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/controllertest"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// failingDeletes makes the deletes of AddressBlocks fail while it is on,
// as an apiserver that refuses them would.
type failingDeletes struct {
	on       atomic.Bool
	attempts atomic.Int32
}

func (f *failingDeletes) wrap(c client.Client) client.Client { return deleteFailing{Client: c, f: f} }

type deleteFailing struct {
	client.Client
	f *failingDeletes
}

func (d deleteFailing) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	if _, ok := obj.(*vcoilv2.AddressBlock); ok {
		d.f.attempts.Add(1)
		if d.f.on.Load() {
			return errors.New("injected: the apiserver refuses the delete")
		}
	}
	return d.Client.Delete(ctx, obj, opts...)
}

// startNodeWith is startNode with a client wrapper and a request timeout.
func startNodeWith(t *testing.T, node string, wrap func(client.Client) client.Client, timeout time.Duration) *NodeIPAM {
	t.Helper()
	return startNodeConfig(t, node, wrap, timeout, nil)
}

// startNodeConfig is startNodeWith with changes to the NodeIPAM's
// configuration.
func startNodeConfig(t *testing.T, node string, wrap func(client.Client) client.Client, timeout time.Duration, change func(*Config)) *NodeIPAM {
	t.Helper()
	mgr, err := controllertest.NewManager(env)
	if err != nil {
		t.Fatal(err)
	}
	c := mgr.GetClient()
	if wrap != nil {
		c = wrap(c)
	}
	cfg := Config{
		NodeName: node, RequestTimeout: timeout, PollInterval: 20 * time.Millisecond,
		ReleaseBackoff: 20 * time.Millisecond, ReleaseBackoffCap: 200 * time.Millisecond,
	}
	if change != nil {
		change(&cfg)
	}
	m := New(c, mgr.GetAPIReader(), cfg, testr.New(t))
	if err := m.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	runManager(t, mgr)
	if err := m.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func blockOf(m *NodeIPAM, name string) (found, draining bool) {
	for _, b := range m.Blocks() {
		if b.Name == name {
			return true, b.Draining
		}
	}
	return false, false
}

// A block whose release fails stays known (draining: it gives no address)
// and its release is tried again, with backoff, until it succeeds.
func TestAFailedReleaseIsKeptAndRetried(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.60.0.0/24", "")
	createPool(t, "small", 3, "10.61.0.0/24", "")
	fails := &failingDeletes{}
	m := startNodeWith(t, "node-1", fails.wrap, 5*time.Second)
	ctx := context.Background()
	if err := m.EnsureNodeSubnet(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := m.Allocate(ctx, "small")
	if err != nil {
		t.Fatal(err)
	}
	fails.on.Store(true)
	_ = m.Free(ctx, a) // the release fails; whether Free says so is not the point

	// Retried without anyone asking again, and kept known meanwhile.
	poll.Eventually(t, 10*time.Second, func() error {
		if n := fails.attempts.Load(); n < 3 {
			return fmt.Errorf("%d attempts to delete the block, want 3 or more", n)
		}
		return nil
	})
	if found, draining := blockOf(m, a.Block); !found || !draining {
		t.Fatalf("block %s whose release fails: known %v, draining %v; want it kept and draining", a.Block, found, draining)
	}
	if _, err := m.Allocate(ctx, "small"); err != nil {
		t.Fatal(err)
	} else if found, _ := blockOf(m, a.Block); !found {
		t.Fatal("the block went away")
	}

	fails.on.Store(false)
	poll.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Name: a.Block}, &vcoilv2.AddressBlock{})
		if err == nil {
			return fmt.Errorf("block %s is still in the apiserver", a.Block)
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		if found, _ := blockOf(m, a.Block); found {
			return fmt.Errorf("block %s is released but still known", a.Block)
		}
		return nil
	})
}

// A BlockRequest answered after vcoild stopped waiting for it: its block
// serves the next allocations of the pool, which needs it.
func TestALateAnsweredRequestsBlockIsAdopted(t *testing.T) {
	cleanAPIServer(t)
	stopController := startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.62.0.0/24", "")
	createPool(t, "other", 3, "10.63.0.0/24", "")
	m := startNodeWith(t, "node-1", nil, time.Second)
	ctx := context.Background()
	if err := m.EnsureNodeSubnet(ctx); err != nil {
		t.Fatal(err)
	}
	stopController()
	if _, err := m.Allocate(ctx, "other"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("allocation without a controller: %v, want ErrTimeout", err)
	}
	startController(t)
	poll.Eventually(t, 10*time.Second, func() error {
		for _, b := range m.Blocks() {
			if b.Pool == "other" {
				return nil
			}
		}
		return fmt.Errorf("no block of pool other: %+v", m.Blocks())
	})
	var blocks vcoilv2.AddressBlockList
	if err := env.Client.List(ctx, &blocks, client.MatchingLabels{vcoilv2.LabelPool: "other"}); err != nil || len(blocks.Items) != 1 {
		t.Fatalf("blocks of pool other: %d (%v), want 1", len(blocks.Items), err)
	}
	got, err := m.Allocate(ctx, "other")
	if err != nil || got.Block != blocks.Items[0].Name {
		t.Fatalf("allocation = %+v %v, want one of the adopted block %s", got, err, blocks.Items[0].Name)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		var reqs vcoilv2.BlockRequestList
		if err := env.Client.List(ctx, &reqs); err != nil || len(reqs.Items) != 0 {
			return fmt.Errorf("requests left: %d (%v)", len(reqs.Items), err)
		}
		return nil
	})
}

// A BlockRequest answered late for a pool that has free addresses again:
// its block is released, not hoarded.
func TestALateAnsweredRequestsBlockIsReleasedWhenNotNeeded(t *testing.T) {
	cleanAPIServer(t)
	stopController := startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.64.0.0/24", "")
	m := startNodeWith(t, "node-1", nil, time.Second)
	ctx := context.Background()
	if err := m.EnsureNodeSubnet(ctx); err != nil {
		t.Fatal(err)
	}
	stopController()
	// The node subnet has free addresses: this request is one nobody needs
	// once it is answered.
	if _, err := m.requestBlock(ctx, vcoilv2.DefaultPool); !errors.Is(err, ErrTimeout) {
		t.Fatalf("request without a controller: %v, want ErrTimeout", err)
	}
	startController(t)
	poll.Eventually(t, 10*time.Second, func() error {
		var reqs vcoilv2.BlockRequestList
		if err := env.Client.List(ctx, &reqs); err != nil || len(reqs.Items) != 0 {
			return fmt.Errorf("requests left: %d (%v)", len(reqs.Items), err)
		}
		var blocks vcoilv2.AddressBlockList
		if err := env.Client.List(ctx, &blocks); err != nil {
			return err
		}
		// The request may have been answered (then its block released) or
		// not yet (then it is still listed above).
		if len(blocks.Items) != 1 || blocks.Items[0].Name != nodeSubnetName(m) {
			return fmt.Errorf("%d blocks, want only the node subnet", len(blocks.Items))
		}
		return nil
	})
	if len(m.Blocks()) != 1 {
		t.Fatalf("blocks known: %+v, want only the node subnet", m.Blocks())
	}
}

func nodeSubnetName(m *NodeIPAM) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.nodeSubnet
}

// A BlockRequest an earlier vcoild left (answered while no vcoild ran) is
// handled at start: its block is taken, the request deleted.
func TestARequestLeftByAnEarlierVcoildIsHandledAtStart(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	node := env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.65.0.0/24", "")
	createPool(t, "other", 3, "10.66.0.0/24", "")
	ctx := context.Background()
	br := &vcoilv2.BlockRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-1-other-", Labels: map[string]string{vcoilv2.LabelNode: "node-1", vcoilv2.LabelPool: "other"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: "node-1", UID: node.UID}}},
		Spec: vcoilv2.BlockRequestSpec{NodeName: "node-1", PoolName: "other"},
	}
	if err := env.Client.Create(ctx, br); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(br), br); err != nil {
			return err
		}
		if !br.Done() {
			return errors.New("the request is not answered yet")
		}
		return nil
	})
	m := startNodeWith(t, "node-1", nil, 5*time.Second)
	poll.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(br), &vcoilv2.BlockRequest{})
		if err == nil {
			return errors.New("the request left by an earlier vcoild is still there")
		}
		return client.IgnoreNotFound(err)
	})
	if found, _ := blockOf(m, br.Status.AddressBlockName); !found {
		t.Fatalf("block %s of the request is not known: %+v", br.Status.AddressBlockName, m.Blocks())
	}
}
