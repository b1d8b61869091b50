// Package kubectlvcoil is the kubectl plugin kubectl-vcoil: what an
// operator asks about vcoil in a cluster. Its verbs read vcoil's objects
// from the apiserver (pools, blocks) and each node's rendered state from
// that node's vcoild (package nodestate), which they reach through a
// port-forward to the vcoild pod via the apiserver, so that the apiserver
// authenticates and authorizes every read.
//
// It only reads: it changes nothing in the cluster or on a node. Trace's
// logic, a pure function, is in package trace.
package kubectlvcoil

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
)

// Defaults of the flags that find vcoild.
const (
	// DefaultDaemonNamespace and DefaultDaemonSelector find the vcoild
	// pods of vcoil's manifests (v2/config/default).
	DefaultDaemonNamespace = constants.ControllerNamespace
	DefaultDaemonSelector  = "app.kubernetes.io/name=vcoild"
	// DefaultStatePort is the port of vcoild's --state-addr default.
	DefaultStatePort = constants.DaemonStatePort
)

type globalFlags struct {
	output          string
	vcoilNamespace  string
	daemonSelector  string
	statePort       int
	stateTimeout    time.Duration
	loadingRules    *clientcmd.ClientConfigLoadingRules
	configOverrides *clientcmd.ConfigOverrides
}

// NewCommand is `kubectl vcoil` with its verbs. Kubeconfig flags are
// kubectl's (--kubeconfig, --context, -n and the others); kubectl passes
// none of its own to a plugin.
func NewCommand(out, errOut io.Writer) *cobra.Command {
	g := &globalFlags{loadingRules: clientcmd.NewDefaultClientConfigLoadingRules(), configOverrides: &clientcmd.ConfigOverrides{}}
	root := &cobra.Command{
		Use:   "kubectl-vcoil",
		Short: "What vcoil holds in a cluster: pools, blocks, a pod's or a node's rendered state, and a flow's verdict",
		Long: `kubectl vcoil shows what vcoil holds and has rendered in the cluster.

Pools and blocks come from the apiserver; what a node's vcoild holds comes
from the node's vcoild pod through a port-forward via the apiserver (RBAC:
create on pods/portforward in vcoil's namespace). Tables by default; -o json
or -o yaml print stable structures (docs/kubectl-vcoil.md).

Exit codes: 0 success (trace: allowed), 1 trace: not allowed, 2 error.`,
		// kubectl runs the plugin as "kubectl vcoil"; help says so.
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl vcoil"},
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
		PersistentPreRunE: func(*cobra.Command, []string) error { return CheckOutput(g.output) },
	}
	root.SetOut(out)
	root.SetErr(errOut)
	pf := root.PersistentFlags()
	pf.StringVarP(&g.output, "output", "o", "", "output format: json or yaml (default: tables)")
	pf.StringVar(&g.vcoilNamespace, "vcoil-namespace", DefaultDaemonNamespace, "namespace of the vcoild pods")
	pf.StringVar(&g.daemonSelector, "daemon-selector", DefaultDaemonSelector, "label selector of the vcoild pods")
	pf.IntVar(&g.statePort, "state-port", DefaultStatePort, "port of vcoild's state on the node's loopback (vcoild --state-addr)")
	pf.DurationVar(&g.stateTimeout, "state-timeout", 30*time.Second, "how long reading one node's state may take, port-forward included")
	pf.StringVar(&g.loadingRules.ExplicitPath, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	clientcmd.BindOverrideFlags(g.configOverrides, pf, clientcmd.RecommendedConfigOverrideFlags(""))

	run := func(f func(ctx context.Context, a *App, namespace string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			a, ns, err := g.app(out, errOut)
			if err != nil {
				return err
			}
			return f(cmd.Context(), a, ns)
		}
	}

	root.AddCommand(&cobra.Command{
		Use:   "pools",
		Short: "AddressPools: size, blocks allocated and free, which serve LoadBalancers",
		Args:  cobra.NoArgs,
		RunE:  run(func(ctx context.Context, a *App, _ string) error { return a.Pools(ctx) }),
	})

	var node string
	blocks := &cobra.Command{
		Use:   "blocks [--node NODE]",
		Short: "AddressBlocks by node, with the addresses used in each (from the nodes' vcoild)",
		Args:  cobra.NoArgs,
		RunE:  run(func(ctx context.Context, a *App, _ string) error { return a.Blocks(ctx, node) }),
	}
	blocks.Flags().StringVar(&node, "node", "", "only the blocks of this node")
	root.AddCommand(blocks)

	root.AddCommand(&cobra.Command{
		Use:   "pod [NAMESPACE/]NAME",
		Short: "A pod's addresses, block, node, NAT loopback, dataplane interface, the Services it backs and its policy rules",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(func(ctx context.Context, a *App, ns string) error {
				pns, name := ns, args[0]
				if before, after, ok := strings.Cut(args[0], "/"); ok {
					pns, name = before, after
				}
				return a.Pod(ctx, pns, name)
			})(cmd, args)
		},
	})

	root.AddCommand(&cobra.Command{
		Use:   "node NODE",
		Short: "What vcoild on a node holds: pods, blocks, Service frontends and backends, policy tables, VPP or nftables objects, syncs and errors",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(func(ctx context.Context, a *App, _ string) error { return a.Node(ctx, args[0]) })(cmd, args)
		},
	})

	var ta TraceArgs
	tr := &cobra.Command{
		Use:   "trace SRC DST[:PORT[/PROTO]]",
		Short: "The verdict of vcoil's model on one flow: service translation, then egress and ingress policy rules",
		Long: `trace decides one flow from the rendered state of the nodes involved.

SRC is a pod (NAMESPACE/NAME, or NAME in -n's namespace) or an IP address.
DST is a pod, a Service (svc/NAMESPACE/NAME; PORT is a service port, by
number or name, default its first) or an IP address ([ADDR]:PORT for IPv6).
PROTO is tcp (default), udp or sctp.

1. A Service's address is translated at the source's node: its frontend's
   backends (Local traffic policies honoured; none: rejected or dropped)
   are traced each, or only --backend.
2. The source pod's egress rules on its node, against the backend, then
   the destination pod's ingress rules on its node, first match wins; a
   pod's own node (its addresses, its NAT loopback) always passes, and so
   does a pod reaching itself, directly or through a Service.
3. Exit code 0 when allowed, 1 when denied, rejected, dropped or allowed
   to some backends only, 2 when a node's state was missing.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ta.Src, ta.Dst = args[0], args[1]
			return run(func(ctx context.Context, a *App, ns string) error {
				ta.Namespace = ns
				return a.Trace(ctx, ta)
			})(cmd, args)
		},
	}
	tr.Flags().StringVar(&ta.Backend, "backend", "", "trace only this backend address of the Service")
	tr.Flags().StringVar(&ta.EntryNode, "entry-node", "", "for a source outside the cluster: the node whose Service frontends it reaches (default: the first node)")
	root.AddCommand(tr)
	return root
}

// app connects to the cluster.
func (g *globalFlags) app(out, errOut io.Writer) (*App, string, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(g.loadingRules, g.configOverrides)
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("namespace from the kubeconfig: %w", err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("load the kubeconfig: %w", err)
	}
	scheme, err := kubescheme.New()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, "", fmt.Errorf("client for %s: %w", cfg.Host, err)
	}
	sel, err := labels.Parse(g.daemonSelector)
	if err != nil {
		return nil, "", fmt.Errorf("--daemon-selector %q: %w", g.daemonSelector, err)
	}
	states := PortForward{Config: cfg, Pods: DaemonPods{Client: c, Namespace: g.vcoilNamespace, Selector: sel}, Port: g.statePort, Timeout: g.stateTimeout}
	return &App{Client: c, States: states, Out: out, ErrOut: errOut, Output: g.output}, ns, nil
}
