package announce

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// RBAC of vcoild for the pool watch.
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools,verbs=get;list;watch

// LoadBalancerSubnets returns the subnets of the LoadBalancer pools among
// pools, sorted. A subnet that does not parse (the webhook refuses them) is
// skipped and named in the error, so that the others are still announced.
func LoadBalancerSubnets(pools []vcoilv2.AddressPool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var bad []string
	for i := range pools {
		p := &pools[i]
		if !p.Spec.IsLoadBalancer() {
			continue
		}
		for _, set := range p.Spec.Subnets {
			for _, s := range []*string{set.IPv4, set.IPv6} {
				if s == nil {
					continue
				}
				prefix, err := netip.ParsePrefix(*s)
				if err != nil {
					bad = append(bad, fmt.Sprintf("pool %q: subnet %q", p.Name, *s))
					continue
				}
				out = append(out, prefix.Masked())
			}
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out = slices.Compact(out)
	if len(bad) > 0 {
		return out, fmt.Errorf("LoadBalancer pools: %v do not parse", bad)
	}
	return out, nil
}

// poolWatch tells the Announcer the LoadBalancer pools: once the
// AddressPool informer has synced (even when there is no pool, so that a
// start withdraws what a previous run announced from pools that are gone),
// and after every change of a pool.
type poolWatch struct {
	cache     cache.Cache
	announcer *Announcer
	log       logr.Logger
	kick      chan struct{}
	synced    toolscache.InformerSynced
}

// Retry bounds of a pool sync that failed.
const (
	retryMin = time.Second
	retryMax = time.Minute
)

// SetupPoolWatch adds to mgr the watch of AddressPools that feeds a. The
// manager's cache then holds every AddressPool (a few small objects).
func SetupPoolWatch(mgr manager.Manager, a *Announcer, log logr.Logger) error {
	w := &poolWatch{cache: mgr.GetCache(), announcer: a, log: log, kick: make(chan struct{}, 1)}
	inf, err := w.cache.GetInformer(context.Background(), &vcoilv2.AddressPool{})
	if err != nil {
		return fmt.Errorf("LoadBalancer announcement: informer of AddressPools: %w", err)
	}
	kick := func(any) { w.wake() }
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    kick,
		UpdateFunc: func(_, obj any) { kick(obj) },
		DeleteFunc: kick,
	})
	if err != nil {
		return fmt.Errorf("LoadBalancer announcement: AddressPool event handler: %w", err)
	}
	w.synced = reg.HasSynced
	if err := mgr.Add(w); err != nil {
		return fmt.Errorf("LoadBalancer announcement: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every node announces for itself.
func (w *poolWatch) NeedLeaderElection() bool { return false }

func (w *poolWatch) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Start syncs the pools at start and on every kick, retrying a failure
// with a backoff; every run reads all pools from the cache, so kicks that
// come together are one sync.
func (w *poolWatch) Start(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), w.synced) {
		return nil // the manager is stopping
	}
	w.wake()
	retry := time.NewTimer(0)
	<-retry.C
	backoff := retryMin
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
		case <-retry.C:
		}
		if err := w.sync(ctx); err != nil {
			w.log.Error(err, "Syncing the LoadBalancer pools' announcements failed; retrying", "retryIn", backoff)
			retry.Reset(backoff)
			backoff = min(2*backoff, retryMax)
			continue
		}
		retry.Stop()
		backoff = retryMin
	}
}

func (w *poolWatch) sync(ctx context.Context) error {
	var pools vcoilv2.AddressPoolList
	if err := w.cache.List(ctx, &pools); err != nil {
		return fmt.Errorf("list AddressPools: %w", err)
	}
	subnets, perr := LoadBalancerSubnets(pools.Items)
	if perr != nil {
		// Announce the pools that parse; the error is logged, not retried:
		// the pool's next change brings a new event.
		w.log.Error(perr, "Skipped LoadBalancer pool subnets")
	}
	if err := w.announcer.SetPools(ctx, subnets); err != nil {
		return err
	}
	return nil
}
