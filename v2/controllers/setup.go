package controllers

import (
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Options configure vcoil-controller's reconcilers.
type Options struct {
	// NodeGCInterval is the period of the sweep for deleted nodes' blocks.
	NodeGCInterval time.Duration
	// BlockRequestConcurrency is the number of requests answered at once.
	BlockRequestConcurrency int
	// Webhooks registers the AddressPool webhooks with the manager's server.
	Webhooks bool
	// Metrics receives the pool gauges.
	Metrics *PoolMetrics
	// LoadBalancer configures the addresses of Services of type
	// LoadBalancer.
	LoadBalancer LoadBalancerOptions
	// Egress configures the routers of Egresses.
	Egress EgressOptions
}

// EgressOptions configure the Egress reconciler.
type EgressOptions struct {
	// Enabled runs the router pods of Egresses. The Egress webhooks are
	// served with the others whatever it says: the webhook configuration
	// names them, and Egress writes would fail without them.
	Enabled bool
	// Image is the router pods' image.
	Image string
}

// LoadBalancerOptions configure the LoadBalancer address allocator.
type LoadBalancerOptions struct {
	// Enabled gives Services of type LoadBalancer addresses from
	// LoadBalancer pools (and keeps those pools).
	Enabled bool
	// ClassOnly serves only Services whose loadBalancerClass is
	// vcoil.io/lb, leaving those without a class to another implementation.
	ClassOnly bool
	// DefaultPool is the pool of Services without the vcoil.io/lb-pool
	// annotation.
	DefaultPool string
}

// Leader election and the webhook certificate live in the controller's own
// namespace ("system" is replaced by kustomize).
// Creation cannot be limited to names; reads and writes are.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=create,namespace=system
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;update,resourceNames=vcoil-controller-leader,namespace=system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=create,namespace=system
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;update,resourceNames=vcoil-webhook-cert,namespace=system
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch,namespace=system
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;update;patch,resourceNames=vcoil-mutating-webhook-configuration;vcoil-validating-webhook-configuration

// Setup registers every reconciler (and the webhooks) of vcoil-controller
// with mgr. vcoil-controller's main and the tests use the same wiring.
func Setup(mgr ctrl.Manager, opts Options) error {
	if opts.NodeGCInterval <= 0 || opts.BlockRequestConcurrency <= 0 || opts.Metrics == nil {
		return fmt.Errorf("controller options need a positive GC interval, a positive concurrency and metrics: %+v", opts)
	}
	if opts.LoadBalancer.Enabled && opts.LoadBalancer.DefaultPool == "" {
		return fmt.Errorf("the LoadBalancer allocator needs a default pool name")
	}
	if opts.Egress.Enabled && opts.Egress.Image == "" {
		return fmt.Errorf("the Egress reconciler needs a router image")
	}
	if err := (&BlockRequestReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("vcoil-controller"),
	}).SetupWithManager(mgr, opts.BlockRequestConcurrency); err != nil {
		return fmt.Errorf("set up the block request reconciler: %w", err)
	}
	if err := (&AddressPoolReconciler{Client: mgr.GetClient(), Metrics: opts.Metrics}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the address pool reconciler: %w", err)
	}
	if err := (&NodeCollector{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Interval:  opts.NodeGCInterval,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("set up the node garbage collector: %w", err)
	}
	if opts.LoadBalancer.Enabled {
		if err := (&LoadBalancerReconciler{
			Client:      mgr.GetClient(),
			Recorder:    mgr.GetEventRecorder("vcoil-controller"),
			ClassOnly:   opts.LoadBalancer.ClassOnly,
			DefaultPool: opts.LoadBalancer.DefaultPool,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up the LoadBalancer address reconciler: %w", err)
		}
		if err := (&LoadBalancerPoolReconciler{Client: mgr.GetClient(), Metrics: opts.Metrics}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up the LoadBalancer pool reconciler: %w", err)
		}
	}
	if opts.Egress.Enabled {
		if err := (&EgressReconciler{
			Client:    mgr.GetClient(),
			APIReader: mgr.GetAPIReader(),
			Scheme:    mgr.GetScheme(),
			Recorder:  mgr.GetEventRecorder("vcoil-controller"),
			Image:     opts.Egress.Image,
		}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up the egress reconciler: %w", err)
		}
	}
	if opts.Webhooks {
		if err := (&AddressPoolWebhook{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up the address pool webhooks: %w", err)
		}
		if err := (&EgressWebhook{}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("set up the egress webhooks: %w", err)
		}
	}
	return nil
}
