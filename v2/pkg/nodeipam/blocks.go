package nodeipam

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// Reconcile follows the node's AddressBlocks in the apiserver: a block whose
// pool is being deleted drains (no new addresses) and is released once its
// last address is freed; a block deleted behind vcoild's back gives no more
// addresses.
func (m *NodeIPAM) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &vcoilv2.AddressBlock{}
	err := m.client.Get(ctx, req.NamespacedName, b)
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	m.mu.Lock()
	if !m.alloc.HasBlock(req.Name) {
		m.mu.Unlock()
		return ctrl.Result{}, nil
	}
	if err != nil { // gone from the apiserver
		inUse := m.alloc.InUse(req.Name)
		m.alloc.Drain(req.Name)
		m.mu.Unlock()
		if inUse > 0 {
			m.log.Info("address block was deleted while pods use it; it gives no more addresses", "block", req.Name, "inUse", inUse)
		}
		return ctrl.Result{}, nil
	}
	if b.DeletionTimestamp.IsZero() {
		m.mu.Unlock()
		return ctrl.Result{}, nil
	}
	m.alloc.Drain(b.Name)
	empty := m.alloc.InUse(b.Name) == 0
	if empty {
		m.forgetBlockLocked(b.Name)
	}
	m.mu.Unlock()
	if !empty {
		m.log.Info("address block is being deleted; draining it", "block", b.Name)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, m.releaseBlock(ctx, b.Name)
}

// SetupWithManager watches the node's blocks.
func (m *NodeIPAM) SetupWithManager(mgr ctrl.Manager) error {
	mine := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[vcoilv2.LabelNode] == m.cfg.NodeName
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&vcoilv2.AddressBlock{}, builder.WithPredicates(mine)).
		Named("node-blocks").
		Complete(m)
}
