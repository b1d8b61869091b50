package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// NodeCollector releases the AddressBlocks and deletes the BlockRequests of
// Nodes that no longer exist (Coil v2 design, "Garbage Collection"): vcoild,
// which normally does this, died with its node. It reacts to Node deletions
// and also sweeps every Interval, which catches nodes deleted while no
// controller was running.
type NodeCollector struct {
	// Client reads from the cache and writes to the apiserver.
	Client client.Client
	// APIReader confirms that a node is gone before its blocks are released:
	// a cache that has not seen a new Node yet must not cost it its blocks.
	APIReader client.Reader
	Interval  time.Duration
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=vcoil.io,resources=addressblocks,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=vcoil.io,resources=blockrequests,verbs=get;list;watch;delete

// Reconcile collects what a Node left behind when it is gone.
func (c *NodeCollector) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, c.collectNode(ctx, req.Name)
}

// Start runs the periodic sweep; it is a manager.Runnable.
func (c *NodeCollector) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("node-gc")
	ticker := time.NewTicker(c.Interval)
	defer ticker.Stop()
	for {
		if err := c.Sweep(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "sweep of deleted nodes' blocks failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// NeedLeaderElection makes only the leader sweep.
func (c *NodeCollector) NeedLeaderElection() bool { return true }

// Sweep collects the blocks and requests of every node that is gone.
func (c *NodeCollector) Sweep(ctx context.Context) error {
	nodes := map[string]bool{}
	blocks := &vcoilv2.AddressBlockList{}
	if err := c.Client.List(ctx, blocks); err != nil {
		return fmt.Errorf("list address blocks: %w", err)
	}
	for _, b := range blocks.Items {
		if n := b.Labels[vcoilv2.LabelNode]; n != "" {
			nodes[n] = true
		}
	}
	reqs := &vcoilv2.BlockRequestList{}
	if err := c.Client.List(ctx, reqs); err != nil {
		return fmt.Errorf("list block requests: %w", err)
	}
	for _, r := range reqs.Items {
		nodes[r.Spec.NodeName] = true
	}
	var errs []error
	for n := range nodes {
		if err := c.collectNode(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *NodeCollector) collectNode(ctx context.Context, name string) error {
	err := c.APIReader.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get node %q: %w", name, err)
	}
	logger := log.FromContext(ctx)

	blocks := &vcoilv2.AddressBlockList{}
	if err := c.Client.List(ctx, blocks, client.MatchingLabels{vcoilv2.LabelNode: name}); err != nil {
		return fmt.Errorf("list address blocks of deleted node %q: %w", name, err)
	}
	for i := range blocks.Items {
		b := &blocks.Items[i]
		if err := releaseBlock(ctx, c.Client, b); err != nil {
			return fmt.Errorf("release address block %q of deleted node %q: %w", b.Name, name, err)
		}
		logger.Info("released address block of deleted node", "node", name, "block", b.Name)
	}

	reqs := &vcoilv2.BlockRequestList{}
	if err := c.Client.List(ctx, reqs); err != nil {
		return fmt.Errorf("list block requests: %w", err)
	}
	for i := range reqs.Items {
		r := &reqs.Items[i]
		if r.Spec.NodeName != name {
			continue
		}
		if err := c.Client.Delete(ctx, r); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete block request %q of deleted node %q: %w", r.Name, name, err)
		}
		logger.Info("deleted block request of deleted node", "node", name, "request", r.Name)
	}
	return nil
}

// releaseBlock removes vcoil's finalizer from a block and deletes it.
func releaseBlock(ctx context.Context, c client.Client, b *vcoilv2.AddressBlock) error {
	if controllerutil.ContainsFinalizer(b, vcoilv2.Finalizer) {
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.RemoveFinalizer(b, vcoilv2.Finalizer)
		if err := c.Patch(ctx, b, patch); err != nil {
			return client.IgnoreNotFound(err)
		}
	}
	return client.IgnoreNotFound(c.Delete(ctx, b))
}

// SetupWithManager registers the Node watch (deletions only) and the sweep.
func (c *NodeCollector) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(c); err != nil {
		return err
	}
	onlyDeletes := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Node{}, builder.WithPredicates(onlyDeletes), builder.OnlyMetadata).
		Named("node-gc").
		Complete(c)
}
