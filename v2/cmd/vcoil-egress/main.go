// Command vcoil-egress is the program of an Egress's router pods: it sets
// up the pod's network namespace to SNAT what client pods tunnel to it
// (package egress), and keeps the router's destinations and peers in step
// with the Egress and the pods that name it (package egress/routerwatch).
// vcoil-controller runs it in the Deployment of every Egress. See
// docs/egress.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/egress"
	"github.com/vcoil/vcoil/v2/pkg/egress/routerwatch"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
)

type flags struct {
	egressNamespace, egressName string
	podNamespace, podName       string
	podIPs                      []string
	metricsAddr, healthAddr     string
	fou                         string
	netns                       string
}

func main() {
	var f flags
	zapOpts := zap.Options{}
	cmd := &cobra.Command{
		Use:          "vcoil-egress",
		Short:        "vcoil's Egress router: SNATs the traffic client pods tunnel to it",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			return run(ctrl.SetupSignalHandler(), f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.egressNamespace, "egress-namespace", os.Getenv("EGRESS_NAMESPACE"), "namespace of the router's Egress (default $EGRESS_NAMESPACE)")
	fs.StringVar(&f.egressName, "egress-name", os.Getenv("EGRESS_NAME"), "name of the router's Egress (default $EGRESS_NAME)")
	fs.StringVar(&f.podNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "namespace of this router pod (default $POD_NAMESPACE); with --pod-name, the pod's addresses of both families are read from it")
	fs.StringVar(&f.podName, "pod-name", os.Getenv("POD_NAME"), "name of this router pod (default $POD_NAME)")
	fs.StringSliceVar(&f.podIPs, "pod-ip", envList("POD_IP"), "this router pod's address (repeatable; default $POD_IP); used when the pod cannot be read")
	fs.StringVar(&f.metricsAddr, "metrics-addr", fmt.Sprintf(":%d", constants.EgressMetricsPort), "address of the Prometheus /metrics endpoint")
	fs.StringVar(&f.healthAddr, "health-addr", fmt.Sprintf(":%d", constants.EgressHealthPort), "address of /healthz and /readyz")
	fs.StringVar(&f.netns, "netns", "", "network namespace (path) to set up, when it is not the program's own: for tests")
	fs.StringVar(&f.fou, "fou", "auto", "accept FoU tunnels besides VXLAN: auto (when the kernel has the fou and ipip modules), on (fail without them) or off")
	goFlags := flag.NewFlagSet("", flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	fs.AddGoFlagSet(flag.CommandLine) // --kubeconfig
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}

func envList(key string) []string {
	if v := os.Getenv(key); v != "" {
		return []string{v}
	}
	return nil
}

func run(ctx context.Context, f flags) error {
	log := ctrl.Log.WithName("setup")
	if f.egressNamespace == "" || f.egressName == "" {
		return errors.New("--egress-namespace and --egress-name (or EGRESS_NAMESPACE and EGRESS_NAME) are required")
	}
	eg := types.NamespacedName{Namespace: f.egressNamespace, Name: f.egressName}
	useFoU, err := fouWanted(f.fou)
	if err != nil {
		return err
	}
	scheme, err := kubescheme.New()
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	podIPs, err := ownAddresses(ctx, cfg, scheme, f)
	if err != nil {
		return err
	}

	router := egress.NewRouter(egress.RouterConfig{Egress: eg, PodIPs: podIPs, NetnsPath: f.netns, FoU: useFoU}, ctrl.Log.WithName("router"))
	if err := router.Setup(ctx); err != nil {
		return fmt.Errorf("set up the router of egress %s: %w", eg, err)
	}
	// The kernel state stays for the next container of the pod, which
	// rebuilds it.
	defer router.Close()

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress: f.healthAddr,
		Cache:                  cache.Options{ByObject: routerwatch.CacheOptions(eg)},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	m, err := routerwatch.NewMetrics(metrics.Registry, router)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	w, err := routerwatch.Setup(mgr, routerwatch.Options{Egress: eg, Router: router, Metrics: m, Log: ctrl.Log.WithName("routerwatch")})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	// Ready once the router is set up (above) and the Egress and every
	// client pod went through it: the Service sends tunnels only to ready
	// routers.
	if err := mgr.AddReadyzCheck("peers", w.Ready); err != nil {
		return err
	}
	log.Info("starting vcoil-egress", "egress", eg, "podIPs", podIPs, "fou", useFoU)
	return mgr.Start(ctx)
}

// fouWanted resolves --fou against the kernel.
func fouWanted(mode string) (bool, error) {
	switch mode {
	case "off":
		return false, nil
	case "auto":
		return egress.FoUAvailable() == nil, nil
	case "on":
		if err := egress.FoUAvailable(); err != nil {
			return false, fmt.Errorf("--fou=on: %w", err)
		}
		return true, nil
	}
	return false, fmt.Errorf("--fou=%q: want auto, on or off", mode)
}

// ownAddresses are the router pod's addresses: read from its Pod (the
// downward API gives only the first family's, POD_IP), else --pod-ip.
func ownAddresses(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, f flags) ([]netip.Addr, error) {
	if f.podNamespace != "" && f.podName != "" {
		c, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return nil, fmt.Errorf("create client: %w", err)
		}
		pod := &corev1.Pod{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: f.podNamespace, Name: f.podName}, pod); err != nil {
			ctrl.Log.Error(err, "cannot read this router pod; using --pod-ip", "pod", f.podNamespace+"/"+f.podName)
		} else if ips := routerwatch.PodIPs(pod); len(ips) > 0 {
			return ips, nil
		}
	}
	var ips []netip.Addr
	for _, s := range f.podIPs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("--pod-ip %q: %w", s, err)
		}
		ips = append(ips, a.Unmap())
	}
	if len(ips) == 0 {
		return nil, errors.New("this router pod's address is unknown: set --pod-ip (POD_IP), or --pod-namespace and --pod-name")
	}
	return ips, nil
}
