// Package router plays, in the lab's fabric, the part of the network that
// BIRD (or a top-of-rack router) plays in production: it watches the
// AddressBlocks in the apiserver and keeps one route per block, via the
// InternalIP of the block's node, in the fabric namespace's main table. With
// it, traffic from a pod to the external host finds its way back. It also
// learns the LoadBalancer addresses the nodes export (LBRouter), as BIRD
// would from each node's export table, and routes each across all the
// nodes announcing it. It runs inside the fabric namespace (lab router) and
// changes only that namespace; the nodes' namespaces it only reads.
package router

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
	"github.com/vcoil/vcoil/v2/pkg/routes"
)

// Protocol marks the router's routes (RTPROT numbers above 200 are free).
const Protocol = 201

// resyncPeriod bounds how long a route stays wrong if an event is missed.
const resyncPeriod = 30 * time.Second

// Route is one block's route.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// DesiredRoutes maps every block subnet with a known node to that node's
// InternalIP of the subnet's family (a dual-stack block gets one route per
// family), as vcoild's direct routes do. Blocks being deleted, blocks of
// unknown nodes, and subnets whose family the node has no InternalIP of,
// get no route.
func DesiredRoutes(blocks []vcoilv2.AddressBlock, nodes []corev1.Node) map[netip.Prefix]netip.Addr {
	var live []vcoilv2.AddressBlock
	for _, b := range blocks {
		if b.DeletionTimestamp == nil {
			live = append(live, b)
		}
	}
	out := map[netip.Prefix]netip.Addr{}
	for dst, via := range routes.BlockNextHops(live, nodes) {
		out[dst.Masked()] = via
	}
	return out
}

// Run keeps the routes of the blocks and of the LoadBalancer addresses the
// peers export until ctx ends, in the namespace it runs in. It starts before
// vcoil's CRDs exist and outlives apiserver hiccups: every failure is
// retried after a pause.
func Run(ctx context.Context, cfg *rest.Config, peers []Peer, log logr.Logger) error {
	fabric, err := netlink.NewHandle()
	if err != nil {
		return fmt.Errorf("netlink handle of the fabric: %w", err)
	}
	defer fabric.Close()
	lb := NewLBRouter(fabric, peers, log.WithName("lb"))
	lbDone := make(chan struct{})
	go func() {
		defer close(lbDone)
		lb.Run(ctx, LBPeriod)
	}()
	defer func() { <-lbDone }()
	for {
		err := runOnce(ctx, cfg, log)
		if ctx.Err() != nil {
			return nil
		}
		log.Error(err, "router stopped; retrying in 5s")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

func runOnce(ctx context.Context, cfg *rest.Config, log logr.Logger) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	scheme, err := kubescheme.New()
	if err != nil {
		return err
	}
	c, err := cache.New(cfg, cache.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	kick := make(chan struct{}, 1)
	trigger := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger() },
		UpdateFunc: func(any, any) { trigger() },
		DeleteFunc: func(any) { trigger() },
	}
	for _, obj := range []client.Object{&vcoilv2.AddressBlock{}, &corev1.Node{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return fmt.Errorf("router: caches did not sync")
	}
	log.Info("routing pod blocks in the fabric")
	tick := time.NewTicker(resyncPeriod)
	defer tick.Stop()
	for {
		if err := sync(ctx, c, log); err != nil {
			log.Error(err, "sync routes")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-tick.C:
		}
	}
}

func sync(ctx context.Context, c client.Reader, log logr.Logger) error {
	var blocks vcoilv2.AddressBlockList
	if err := c.List(ctx, &blocks); err != nil {
		return err
	}
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return err
	}
	want := DesiredRoutes(blocks.Items, nodes.Items)
	have, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: Protocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return err
	}
	for _, r := range have {
		dst, _ := netip.ParsePrefix(r.Dst.String())
		via, _ := netip.AddrFromSlice(r.Gw)
		if w, ok := want[dst]; ok && w == via.Unmap() {
			delete(want, dst)
			continue
		}
		if err := netlink.RouteDel(&r); err != nil {
			return fmt.Errorf("delete route %s: %w", r.Dst, err)
		}
		log.Info("removed route", "block", dst, "via", via)
	}
	for dst, via := range want {
		r := &netlink.Route{
			Dst:      &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
			Gw:       via.AsSlice(),
			Protocol: Protocol,
		}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s via %s: %w", dst, via, err)
		}
		log.Info("added route", "block", dst, "via", via)
	}
	return nil
}
