package proxy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/conntrack"
	"github.com/vcoil/vcoil/v2/pkg/service/processor"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// On the VPP dataplane the service proxy renders with NAT44 and leaves the
// kernel's conntrack settings alone (they would fail here: the namespace
// does not exist); on Linux it applies them first.
func TestVPPDataplaneGetsTheNAT44RendererAndNoConntrackSettings(t *testing.T) {
	dp, err := vpp.New(vpp.Config{APISocket: "/nonexistent/api.sock", PodInterface: vpp.AFPacket}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	ct := conntrack.DefaultConfig()
	ct.Netns = "/nonexistent/netns"
	opts := Options{VPP: dp, Conntrack: ct, Log: testr.New(t)}
	r, how, release, err := dataplaneRenderer(context.Background(), opts)
	if err != nil {
		t.Fatalf("renderer on VPP: %v", err)
	}
	release()
	if _, ok := r.(*nat44.Renderer); !ok {
		t.Fatalf("renderer on VPP is a %T, want the NAT44 renderer", r)
	}
	if how.Name != "nat44" || !how.IPv4Only {
		t.Errorf("the NAT44 renderer's rendering is %+v", how)
	}
	opts.VPP = nil
	if _, _, _, err := dataplaneRenderer(context.Background(), opts); err == nil {
		t.Fatal("on Linux the conntrack settings were not applied (they cannot be here)")
	}
}

// resyncedDataplane is a VPP dataplane whose Resynced channel the test
// feeds.
type resyncedDataplane struct {
	vpp.Dataplane
	resynced chan vpp.Incarnation
}

func (d resyncedDataplane) Resynced() <-chan vpp.Incarnation { return d.resynced }

// countingRenderer counts the Resyncs it gets.
type countingRenderer struct {
	mu      sync.Mutex
	resyncs int
}

func (r *countingRenderer) Resync(context.Context, *service.State) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resyncs++
	return nil
}

func (r *countingRenderer) Update(context.Context, *service.Changes) error { return nil }

func (r *countingRenderer) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.resyncs
}

// A new VPP incarnation makes the processor resync at once, not at its
// (here hour-long) sync period.
func TestANewVPPIncarnationResyncsTheServicesAtOnce(t *testing.T) {
	r := &countingRenderer{}
	p, err := processor.New(processor.Options{NodeName: "node-a", Renderers: []service.Renderer{r}, SyncPeriod: time.Hour, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	dp := resyncedDataplane{resynced: make(chan vpp.Incarnation, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	wg.Go(func() { _ = p.Run(ctx) })
	wg.Go(func() { _ = resyncOnVPPRestart{dp: dp, p: p, log: testr.New(t)}.Start(ctx) })
	<-p.Synced()
	if n := r.count(); n != 1 {
		t.Fatalf("%d resyncs after the first sync", n)
	}
	for inc := vpp.Incarnation(2); inc <= 3; inc++ {
		dp.resynced <- inc
		want := int(inc)
		poll.Eventually(t, 5*time.Second, func() error {
			if n := r.count(); n != want {
				return fmt.Errorf("%d resyncs after incarnation %d, want %d", n, inc, want)
			}
			return nil
		})
	}
}
