package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/routes"
)

// BlockExporter puts the node's blocks into the kernel table BIRD reads
// (routes.Exporter).
type BlockExporter interface {
	Sync(ctx context.Context, blocks []netip.Prefix) error
}

// DirectRouter routes other nodes' blocks via their InternalIP
// (routes.DirectRouter).
type DirectRouter interface {
	Sync(ctx context.Context, routes map[netip.Prefix]netip.Addr) error
}

// RouteSync keeps the exported block routes, the dataplane's routes for the
// node's own blocks (when Local is set) and the direct routes (when Direct is
// set) equal to the AddressBlocks in the apiserver. Every event coalesces
// into one full sync.
type RouteSync struct {
	Client   client.Reader
	NodeName string
	Exporter BlockExporter
	// Local routes the node's own blocks in the dataplane (routes.LocalBlocks
	// for the Linux dataplane); nil when the dataplane needs none.
	Local  BlockExporter
	Direct DirectRouter // nil: direct routing off
	Log    logr.Logger
}

var routeSyncKey = reconcile.Request{NamespacedName: types.NamespacedName{Name: "routes"}}

// Reconcile computes the routes from the cache and syncs them.
func (r *RouteSync) Reconcile(ctx context.Context, _ ctrl.Request) (ctrl.Result, error) {
	var blocks vcoilv2.AddressBlockList
	if err := r.Client.List(ctx, &blocks); err != nil {
		return ctrl.Result{}, fmt.Errorf("list address blocks: %w", err)
	}
	var nodes corev1.NodeList
	if r.Direct != nil {
		if err := r.Client.List(ctx, &nodes); err != nil {
			return ctrl.Result{}, fmt.Errorf("list nodes: %w", err)
		}
	}
	own, direct := routesOf(blocks.Items, nodes.Items, r.NodeName)
	var errs []error
	if err := r.Exporter.Sync(ctx, own); err != nil {
		errs = append(errs, fmt.Errorf("export block routes: %w", err))
	}
	if r.Local != nil {
		if err := r.Local.Sync(ctx, own); err != nil {
			errs = append(errs, fmt.Errorf("route the node's blocks: %w", err))
		}
	}
	if r.Direct != nil {
		if err := r.Direct.Sync(ctx, direct); err != nil {
			errs = append(errs, fmt.Errorf("sync direct routes: %w", err))
		}
	}
	return ctrl.Result{}, errors.Join(errs...)
}

// routesOf splits the blocks into the node's own prefixes and the other
// nodes' prefixes with their InternalIP of the same family as next hop.
func routesOf(blocks []vcoilv2.AddressBlock, nodes []corev1.Node, self string) ([]netip.Prefix, map[netip.Prefix]netip.Addr) {
	var own []netip.Prefix
	var others []vcoilv2.AddressBlock
	for _, b := range blocks {
		if b.Labels[vcoilv2.LabelNode] != self {
			others = append(others, b)
			continue
		}
		for _, s := range []string{ptr.Deref(b.IPv4, ""), ptr.Deref(b.IPv6, "")} {
			if p, err := netip.ParsePrefix(s); err == nil {
				own = append(own, p)
			}
		}
	}
	return own, routes.BlockNextHops(others, nodes)
}

// SetupWithManager triggers a sync on any block or node change.
func (r *RouteSync) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{routeSyncKey}
	})
	b := ctrl.NewControllerManagedBy(mgr).
		Named("routes").
		Watches(&vcoilv2.AddressBlock{}, all)
	if r.Direct != nil {
		b = b.Watches(&corev1.Node{}, all)
	}
	return b.Complete(r)
}
