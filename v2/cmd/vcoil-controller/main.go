// Command vcoil-controller answers BlockRequests with AddressBlocks, keeps
// AddressPools and their metrics, collects the blocks of deleted nodes,
// gives Services of type LoadBalancer their addresses, runs the router pods
// of Egresses and serves the AddressPool and Egress webhooks. See
// docs/vcoil-controller.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/controllers"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
	"github.com/vcoil/vcoil/v2/pkg/webhookcert"
)

type flags struct {
	metricsAddr, healthAddr   string
	webhookPort               int
	certDir                   string
	selfSignedCert            bool
	leaderElect               bool
	namespace                 string
	gcInterval                time.Duration
	concurrency               int
	webhookSecret, webhookSvc string
	lb                        bool
	lbClassOnly               bool
	defaultLBPool             string
	egress                    bool
	egressImage               string
}

func main() {
	var f flags
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:          "vcoil-controller",
		Short:        "vcoil's cluster controller: address pools, blocks, requests and their webhooks",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			return run(ctrl.SetupSignalHandler(), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.metricsAddr, "metrics-addr", constants.ControllerMetricsAddr, "address of the Prometheus /metrics endpoint")
	fs.StringVar(&f.healthAddr, "health-addr", constants.ControllerHealthAddr, "address of /healthz and /readyz")
	fs.IntVar(&f.webhookPort, "webhook-port", constants.ControllerWebhookPort, "port of the webhook server")
	fs.StringVar(&f.certDir, "cert-dir", constants.ControllerCertDir, "directory of the webhook server's tls.crt and tls.key")
	fs.BoolVar(&f.selfSignedCert, "self-signed-cert", true, "issue the webhook certificate into a Secret and inject its CA into the webhook configurations (turn off when cert-manager or another tool provides them)")
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader among the replicas; only the leader reconciles")
	fs.StringVar(&f.namespace, "namespace", envOr("POD_NAMESPACE", constants.ControllerNamespace), "namespace of the leader election Lease and the webhook certificate Secret")
	fs.DurationVar(&f.gcInterval, "gc-interval", constants.NodeGCInterval, "period of the sweep that releases the blocks of deleted nodes")
	fs.IntVar(&f.concurrency, "block-request-concurrency", constants.BlockRequestConcurrency, "number of BlockRequests answered at once")
	fs.StringVar(&f.webhookSecret, "webhook-cert-secret", constants.WebhookCertSecret, "Secret holding the webhook certificate (with --self-signed-cert)")
	fs.StringVar(&f.webhookSvc, "webhook-service", constants.WebhookService, "Service in front of the webhook server; its DNS names go into the certificate")
	fs.BoolVar(&f.lb, "lb", true, "give Services of type LoadBalancer addresses from LoadBalancer AddressPools")
	fs.BoolVar(&f.lbClassOnly, "lb-class-only", false, "serve only LoadBalancer Services whose loadBalancerClass is "+vcoilv2.LoadBalancerClass+", not those without a class")
	fs.StringVar(&f.defaultLBPool, "default-lb-pool", vcoilv2.DefaultLBPool, "LoadBalancer AddressPool of Services without the "+vcoilv2.AnnotationLBPool+" annotation")
	fs.BoolVar(&f.egress, "egress", true, "run the router pods (Deployment, Service, PodDisruptionBudget) of Egresses")
	fs.StringVar(&f.egressImage, "egress-image", envOr("VCOIL_IMAGE", constants.EgressImage), "image of the Egress router pods (default: $VCOIL_IMAGE, the controller's own image, when set)")
	goFlags := flag.NewFlagSet("", flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	// --kubeconfig, registered by controller-runtime on the standard flag set.
	fs.AddGoFlagSet(flag.CommandLine)

	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, f flags) error {
	log := ctrl.Log.WithName("setup")
	scheme, err := kubescheme.New()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}

	if f.selfSignedCert {
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("create client: %w", err)
		}
		issuer := &webhookcert.Issuer{
			Client:                          direct,
			Namespace:                       f.namespace,
			SecretName:                      f.webhookSecret,
			ServiceName:                     f.webhookSvc,
			CertDir:                         f.certDir,
			MutatingWebhookConfigurations:   []string{constants.MutatingWebhookConfig},
			ValidatingWebhookConfigurations: []string{constants.ValidatingWebhookConfig},
		}
		if err := issuer.Ensure(ctx); err != nil {
			return fmt.Errorf("prepare the webhook certificate: %w", err)
		}
	}

	egressRouters, err := labels.Parse(vcoilv2.LabelEgress)
	if err != nil {
		return fmt.Errorf("parse the egress router selector: %w", err)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:  f.healthAddr,
		WebhookServer:           webhook.NewServer(webhook.Options{Port: f.webhookPort, CertDir: f.certDir}),
		LeaderElection:          f.leaderElect,
		LeaderElectionID:        constants.ControllerLeaderElectionID,
		LeaderElectionNamespace: f.namespace,
		// The leader steps down on shutdown so that the other replica takes
		// over at once rather than after the lease expires.
		LeaderElectionReleaseOnCancel: true,
		// Only the Deployments and PodDisruptionBudgets of Egress routers
		// are cached, not every one in the cluster.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&appsv1.Deployment{}:            {Label: egressRouters},
			&policyv1.PodDisruptionBudget{}: {Label: egressRouters},
		}},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	poolMetrics, err := controllers.NewPoolMetrics(metrics.Registry)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if err := controllers.Setup(mgr, controllers.Options{
		NodeGCInterval:          f.gcInterval,
		BlockRequestConcurrency: f.concurrency,
		Webhooks:                true,
		Metrics:                 poolMetrics,
		LoadBalancer: controllers.LoadBalancerOptions{
			Enabled:     f.lb,
			ClassOnly:   f.lbClassOnly,
			DefaultPool: f.defaultLBPool,
		},
		Egress: controllers.EgressOptions{Enabled: f.egress, Image: f.egressImage},
	}); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready only once the webhook server serves: the apiserver calls it for
	// every AddressPool write.
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	log.Info("starting vcoil-controller", "leaderElect", f.leaderElect, "namespace", f.namespace,
		"lb", f.lb, "lbClassOnly", f.lbClassOnly, "defaultLBPool", f.defaultLBPool,
		"egress", f.egress, "egressImage", f.egressImage)
	return mgr.Start(ctx)
}
