package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// vcoild records Events on NetworkPolicies and its Node (role "daemon").
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reasons of the agent's Warning Events.
const (
	// ReasonPolicyRenderFailed is on the Node: the dataplane's renderer
	// refused a transaction, so some pods' rules are not as the policies
	// say (and new pods' ADDs fail until it works again).
	ReasonPolicyRenderFailed = "PolicyRenderFailed"
	// ReasonPolicyPartIgnored is on a NetworkPolicy with parts vcoil
	// leaves out (processor.Problems): they permit nothing.
	ReasonPolicyPartIgnored = "PolicyPartIgnored"
)

// setupEvents makes the agent report what an operator must see: opts's
// renderer is wrapped to report its failures on the Node, and
// NetworkPolicies are checked for parts vcoil leaves out as they arrive.
// opts.Recorder defaults to the manager's.
func setupEvents(ctx context.Context, mgr manager.Manager, opts *Options) error {
	if opts.Recorder == nil {
		opts.Recorder = mgr.GetEventRecorder("vcoild")
	}
	opts.Renderer = renderReport{r: opts.Renderer, name: opts.RendererName, events: nodeevents.New(opts.Recorder, opts.NodeName)}
	inf, err := mgr.GetCache().GetInformer(ctx, &networkingv1.NetworkPolicy{})
	if err != nil {
		return fmt.Errorf("policy agent: NetworkPolicy informer: %w", err)
	}
	pp := newPolicyProblems(opts.Recorder)
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    pp.check,
		UpdateFunc: func(_, obj any) { pp.check(obj) },
		DeleteFunc: pp.forget,
	}); err != nil {
		return fmt.Errorf("policy agent: NetworkPolicy informer: %w", err)
	}
	return nil
}

// renderReport is the renderer reporting its failures on the Node, once
// per distinct error until a transaction succeeds. A dataplane that is
// not ready (VPP restarting) is not reported here: the dataplane's own
// Events say so.
type renderReport struct {
	r      renderer.Renderer
	name   string
	events *nodeevents.Recorder
}

func (r renderReport) Render(ctx context.Context, txn renderer.Txn) error {
	err := r.r.Render(ctx, txn)
	switch {
	case err == nil:
		r.events.Recovered(ReasonPolicyRenderFailed)
	case !errors.Is(err, dataplane.ErrNotReady):
		r.events.Failed(ReasonPolicyRenderFailed, "Render", fmt.Sprintf(
			"the %s renderer refused the network policies: %v; pods keep the rules they had, new pods' ADDs fail, vcoild is not ready, and a resync retries with backoff", r.name, err))
	}
	return err
}

// policyProblems records a Warning on each NetworkPolicy with parts the
// processor leaves out, once per resourceVersion.
type policyProblems struct {
	rec      events.EventRecorder
	mu       sync.Mutex
	reported map[types.UID]string
}

func newPolicyProblems(rec events.EventRecorder) *policyProblems {
	return &policyProblems{rec: rec, reported: map[types.UID]string{}}
}

func (p *policyProblems) check(obj any) {
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return
	}
	problems := processor.Problems(np)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(problems) == 0 {
		delete(p.reported, np.UID)
		return
	}
	if p.reported[np.UID] == np.ResourceVersion {
		return
	}
	p.reported[np.UID] = np.ResourceVersion
	parts := make([]string, len(problems))
	for i, e := range problems {
		parts[i] = e.Error()
	}
	p.rec.Eventf(np, nil, corev1.EventTypeWarning, ReasonPolicyPartIgnored, "Render",
		"vcoil leaves out parts of this NetworkPolicy, which then permit nothing: %s", strings.Join(parts, "; "))
}

func (p *policyProblems) forget(obj any) {
	var uid types.UID
	switch v := obj.(type) {
	case *networkingv1.NetworkPolicy:
		uid = v.UID
	case toolscache.DeletedFinalStateUnknown:
		if np, ok := v.Obj.(*networkingv1.NetworkPolicy); ok {
			uid = np.UID
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.reported, uid)
}
