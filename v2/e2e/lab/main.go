// Command lab runs vcoil's local cluster ("the lab"): a real Kubernetes
// cluster whose nodes are network namespaces on this machine, with vcoil
// installed from its manifests. `make lab-up`, `make lab-down`, `make demo`
// drive it; docs/lab.md describes it.
//
//	lab up | reload | down | check | status
//	lab exec [--netns cp|ext|fabric|NODE] -- COMMAND...   (KUBECONFIG and lab.env set)
//	lab kubectl ARGS...
//	lab demo | demo-matrix
//	lab bench-services [--sizes 1000,5000,10000] [--out _out/bench]   (vcoil's renderer beside kube-proxy)
//	lab bench-scale --kwok BIN [--sim-nodes 1000 --pods 30000 ...] [--out _out/bench]   (a simulated cluster around the lab)
//	lab scale-up --kwok BIN [sizes] | scale-down   (the simulated cluster, left in place)
//	lab router --kubeconfig FILE [--peer NETNS=IP[,IP]]...   (run by lab up in the fabric namespace)
//	lab vppctl NODE [CLI...]   (VPP nodes: VPP's CLI)
//	lab vpp-supervise -- VPP ARGS...   (run by lab up in each VPP node: restarts VPP when it dies)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vcoil/vcoil/v2/e2e/lab/bench"
	"github.com/vcoil/vcoil/v2/e2e/lab/cluster"
	"github.com/vcoil/vcoil/v2/e2e/lab/router"
	"github.com/vcoil/vcoil/v2/e2e/lab/supervise"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
)

func main() {
	// Every subcommand's controller-runtime clients (and the router) log
	// through its global logger, which must be set before they are made:
	// without it controller-runtime complains with a stack trace 30 s in.
	ctrl.SetLogger(zap.New())
	self, _ := os.Executable()
	cfg := &cluster.Config{Out: os.Stdout, Self: self}
	root := rootCommand(cfg)
	root.AddCommand(lifecycleCommands(cfg)...)
	root.AddCommand(inspectCommands(cfg)...)
	root.AddCommand(accessCommands(cfg, root)...)
	root.AddCommand(routerCommand())
	root.AddCommand(vppCommands(cfg)...)
	root.AddCommand(demoCommands(cfg)...)
	root.AddCommand(benchCommand(cfg))
	root.AddCommand(scaleCommands(cfg)...)
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "lab:", err)
		os.Exit(1)
	}
}

// rootCommand holds the flags every subcommand shares; the topology is
// built from --nodes once they are parsed. The subcommands read cfg when
// they run, after the flags have filled it.
func rootCommand(cfg *cluster.Config) *cobra.Command {
	var nodes int
	var dataplane, family string
	root := &cobra.Command{
		Use:           "lab",
		Short:         "vcoil's local cluster of network namespaces",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			// Without --dataplane, a running lab's recorded dataplanes
			// (and VPP binary) hold; without a lab, every node is Linux.
			recorded, recordedBin := cfg.RecordedDataplanes()
			dps := recorded
			if dataplane != "" {
				dps = strings.Split(dataplane, ",")
			}
			if cfg.VPPBin == "" {
				cfg.VPPBin = recordedBin
			}
			t, err := topology.New(nodes, dps...)
			if err != nil {
				return err
			}
			// Likewise the IP family: --ip-family, else the running lab's.
			if family == "" {
				family = cfg.RecordedIPFamily()
			}
			cfg.Topology, err = t.WithIPFamily(family)
			return err
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&cfg.StateDir, "state-dir", "/var/lib/vcoil-lab", "directory of the running lab's state (removed by down)")
	pf.StringVar(&cfg.LogDir, "log-dir", "_out/lab/logs", "directory of the components' logs (kept by down)")
	pf.IntVar(&nodes, "nodes", 2, "number of worker nodes")
	pf.StringVar(&dataplane, "dataplane", "", "the nodes' dataplanes, given in turn: linux, vpp, or linux,vpp (default: the running lab's, else linux)")
	pf.StringVar(&family, "ip-family", "", "the lab's IP family: ipv4 or dual (default: the running lab's, else ipv4)")
	pf.StringVar(&cfg.VPPServices, "vpp-services", "", "the VPP nodes' service renderer at lab-up: nat44 (default) or cnat")
	pf.StringVar(&cfg.VPPBin, "vpp-bin", "", "the VPP 25.10 binary of the VPP nodes (default: the running lab's)")
	pf.StringVar(&cfg.KubernetesDir, "kubernetes-dir", "", "directory of kube-apiserver, kubelet, kubectl, ... (make kubernetes)")
	pf.StringVar(&cfg.Etcd, "etcd", "", "etcd binary")
	pf.StringVar(&cfg.Agent, "agent", filepath.Join(filepath.Dir(cfg.Self), "agent"), "the network test agent binary (run on the external host)")
	return root
}

// lifecycleCommands bring the lab up, reload its images and take it down.
func lifecycleCommands(cfg *cluster.Config) []*cobra.Command {
	up := &cobra.Command{
		Use:   "up",
		Short: "bring the lab up (a lab already up is left alone)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return cfg.Up(ctx)
		},
	}
	reload := &cobra.Command{
		Use:   "reload",
		Short: "import the image tarballs into every node again and restart vcoil's pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cfg.Reload(cmd.Context())
		},
	}
	for _, c := range []*cobra.Command{up, reload} {
		c.Flags().StringVar(&cfg.ImagesDir, "images-dir", "", "directory of the image tarballs")
		c.Flags().StringSliceVar(&cfg.ExtraImages, "extra-images", nil, "more docker-archive tarballs to import into every node (comma-separated, repeatable)")
	}
	up.Flags().StringVar(&cfg.Overlay, "overlay", "v2/config/overlays/lab", "vcoil's kustomize overlay")
	up.Flags().IntVar(&cfg.CoreDNSReplicas, "coredns-replicas", 1, "replicas of CoreDNS")
	up.Flags().BoolVar(&cfg.KubeProxy, "kube-proxy", false, "run kube-proxy on every node and turn vcoil's service renderer off (default: vcoil serves services, no kube-proxy)")
	down := &cobra.Command{
		Use:   "down",
		Short: "remove the lab and everything it made; fails loudly if anything is left",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return cfg.Down() },
	}
	return []*cobra.Command{up, reload, down}
}

// inspectCommands tell what a lab left on the machine and how a running
// one is.
func inspectCommands(cfg *cluster.Config) []*cobra.Command {
	check := &cobra.Command{
		Use:   "check",
		Short: "list what a lab left on the machine (nothing after a clean down)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			left := cfg.Check()
			for _, l := range left {
				fmt.Println(l)
			}
			if len(left) > 0 {
				return fmt.Errorf("%d things of a lab are on the machine", len(left))
			}
			fmt.Println("no lab on the machine")
			return nil
		},
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "tell whether the lab is up and healthy",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if !cfg.IsUp() {
				return errors.New("the lab is not up")
			}
			if other := cfg.OtherIPFamily(); other != "" {
				return fmt.Errorf("the lab is up, but its IP family is %s, not %s (--ip-family)", other, cfg.Topology.IPFamily)
			}
			if p := cfg.Health(); len(p) > 0 {
				return fmt.Errorf("the lab is unhealthy:\n  %s", strings.Join(p, "\n  "))
			}
			fmt.Println("the lab is up")
			cfg.PrintAccess()
			return nil
		},
	}
	return []*cobra.Command{check, status}
}

// accessCommands run programs in the lab: any command in one of its
// network namespaces, or kubectl.
func accessCommands(cfg *cluster.Config, root *cobra.Command) []*cobra.Command {
	var netns string
	execCmd := &cobra.Command{
		Use:   "exec [--netns cp|ext|fabric|NODE] -- COMMAND [ARG...]",
		Short: "run a command in a lab network namespace (mount namespace unchanged) with KUBECONFIG and lab.env set",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return execIn(*cfg, netns, args)
		},
	}
	execCmd.Flags().StringVar(&netns, "netns", "cp", "namespace: cp (control plane), ext (external host), fabric, or a node's name")
	kubectl := &cobra.Command{
		Use:                "kubectl [ARG...]",
		Short:              "run kubectl against the lab",
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			// Flag parsing is off for kubectl's sake: take the lab's own
			// flags from the front.
			pf := root.PersistentFlags()
			for len(args) > 0 && strings.HasPrefix(args[0], "--") {
				name, value, hasValue := strings.Cut(strings.TrimPrefix(args[0], "--"), "=")
				if pf.Lookup(name) == nil {
					break
				}
				args = args[1:]
				if !hasValue && len(args) > 0 {
					value, args = args[0], args[1:]
				}
				if err := pf.Set(name, value); err != nil {
					return err
				}
			}
			wrapper := filepath.Join(cfg.StateDir, "kubectl")
			if _, err := os.Stat(wrapper); err != nil {
				return errors.New("the lab is not up (no " + wrapper + ")")
			}
			return syscall.Exec(wrapper, append([]string{wrapper}, args...), os.Environ())
		},
	}
	return []*cobra.Command{execCmd, kubectl}
}

// routerCommand is the fabric's router, which lab up starts in the fabric
// namespace; it is hidden from users.
func routerCommand() *cobra.Command {
	var kubeconfig string
	var peerFlags []string
	cmd := &cobra.Command{
		Use:    "router --kubeconfig FILE [--peer NETNS=IP[,IP]]...",
		Short:  "keep the fabric's routes to pod blocks and LoadBalancer addresses (run by up inside the fabric namespace)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			peers, err := parsePeers(peerFlags)
			if err != nil {
				return err
			}
			rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
			if err != nil {
				return err
			}
			return router.Run(ctrl.SetupSignalHandler(), rc, peers, ctrl.Log.WithName("router"))
		},
	}
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the router")
	cmd.Flags().StringArrayVar(&peerFlags, "peer", nil, "a node whose export table (119, protocol 32) the router reads: its network namespace's path = its InternalIPs, comma-separated (repeatable)")
	return cmd
}

// parsePeers reads --peer NETNS=IP[,IP] values.
func parsePeers(values []string) ([]router.Peer, error) {
	peers := make([]router.Peer, 0, len(values))
	for _, v := range values {
		path, ips, ok := strings.Cut(v, "=")
		if !ok || path == "" {
			return nil, fmt.Errorf("--peer %q: want NETNS=IP[,IP]", v)
		}
		p := router.Peer{Netns: path}
		for _, s := range strings.Split(ips, ",") {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("--peer %q: %w", v, err)
			}
			p.NextHops = append(p.NextHops, a)
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// demoCommands deploy the sample application and show its connectivity.
func demoCommands(cfg *cluster.Config) []*cobra.Command {
	demo := &cobra.Command{
		Use:   "demo",
		Short: "deploy the sample application and print the connectivity matrix (the lab must be up)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cfg.Demo(cmd.Context())
		},
	}
	matrix := &cobra.Command{
		Use:   "demo-matrix",
		Short: "print the connectivity matrix of the deployed sample application",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cfg.Matrix(cmd.Context())
		},
	}
	return []*cobra.Command{demo, matrix}
}

// execIn replaces this process by nsenter into the namespace, so that the
// command's exit status, standard input and signals are the caller's.
func execIn(cfg cluster.Config, netns string, args []string) error {
	ns := netns
	switch netns {
	case "cp":
		ns = topology.ControlPlaneNetns
	case "ext":
		ns = topology.ExternalNetns
	case "fabric":
		ns = topology.FabricNetns
	default:
		ns = topology.Prefix + "-" + netns
	}
	path := "/run/netns/" + ns
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no lab namespace %s (is the lab up?)", path)
	}
	env := os.Environ()
	k8sDir := cfg.KubernetesDir
	if b, err := os.ReadFile(cfg.EnvFile()); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "=") {
				env = append(env, l)
			}
			if v, ok := strings.CutPrefix(l, "VCOIL_LAB_KUBERNETES_DIR="); ok && k8sDir == "" {
				k8sDir = v
			}
		}
	}
	// The lab's kubectl comes first on PATH.
	if k8sDir != "" {
		env = append(env, "PATH="+k8sDir+":"+os.Getenv("PATH"))
	}
	env = append(env, "VCOIL_LAB_STATE_DIR="+cfg.StateDir)
	nsenter, err := lookPath("nsenter")
	if err != nil {
		return err
	}
	return syscall.Exec(nsenter, append([]string{"nsenter", "--net=" + path, "--"}, args...), env)
}

func lookPath(name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// benchCommand runs the services benchmark against the running lab: vcoil's
// renderer on the first node, kube-proxy on the second.
func benchCommand(cfg *cluster.Config) *cobra.Command {
	o := bench.Options{
		Changes: 50, ChangeSpacing: 1100 * time.Millisecond, Concurrency: 16,
		CreateTimeout: 5 * time.Minute, VcoilSyncTimeout: time.Minute, KubeProxySyncTimeout: 4 * time.Minute,
		ChangeTimeout: 20 * time.Second, CleanupTimeout: 10 * time.Minute,
	}
	var out string
	cmd := &cobra.Command{
		Use:   "bench-services",
		Short: "measure vcoil's service renderer beside kube-proxy (nftables mode) in the running lab",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cfg.IsUp() {
				return errors.New("the lab is not up: make lab-up")
			}
			nodes := cfg.Topology.NodeList()
			if len(nodes) < 2 {
				return errors.New("the benchmark needs two nodes")
			}
			_, restCfg, err := cfg.Client()
			if err != nil {
				return err
			}
			// The Services are written thousands at a time.
			restCfg.QPS, restCfg.Burst = 2000, 4000
			scheme, err := kubescheme.New()
			if err != nil {
				return err
			}
			if o.Client, err = client.New(restCfg, client.Options{Scheme: scheme}); err != nil {
				return err
			}
			o.Lab, o.VcoilNode, o.KubeProxyNode, o.Log = cfg, nodes[0], nodes[1], cfg.Out
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			recs, runErr := bench.Run(ctx, o)
			if err := writeBench(out, recs); err != nil {
				return errors.Join(runErr, err)
			}
			fmt.Fprintf(cfg.Out, "\n%s\nrecords: %s, table: %s\n", bench.Markdown(recs), filepath.Join(out, "services.json"), filepath.Join(out, "services.md"))
			return runErr
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.Sizes, "sizes", []int{1000, 5000, 10000}, "numbers of Services (10 endpoints each), ascending")
	f.IntVar(&o.Changes, "changes", o.Changes, "endpoint changes measured per size")
	f.DurationVar(&o.VcoilSyncTimeout, "vcoil-sync-timeout", o.VcoilSyncTimeout, "longest wait for vcoil's full sync")
	f.DurationVar(&o.KubeProxySyncTimeout, "kube-proxy-sync-timeout", o.KubeProxySyncTimeout, "longest wait for kube-proxy's full sync")
	f.StringVar(&out, "out", "_out/bench", "directory of services.json (JSON lines) and services.md")
	return cmd
}

func writeBench(dir string, recs []bench.Record) error {
	return writeReport(dir, "services", func(w io.Writer) error { return bench.WriteJSONLines(w, recs) }, bench.Markdown(recs))
}

// writeReport writes a benchmark's records into dir as NAME.json (by
// writeJSON, one JSON object per line) and its table as NAME.md.
func writeReport(dir, name string, writeJSON func(io.Writer) error, markdown string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, name+".json"))
	if err != nil {
		return err
	}
	if err := writeJSON(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(markdown), 0o644)
}

// vppCommands reach a VPP node's VPP and keep it running.
func vppCommands(cfg *cluster.Config) []*cobra.Command {
	vppctl := &cobra.Command{
		Use:   "vppctl NODE [CLI...]",
		Short: "run a VPP CLI command on a VPP node (e.g. lab vppctl node1 show interface)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			out, err := cfg.VPPCLI(args[0], args[1:]...)
			fmt.Print(out)
			return err
		},
	}
	var pidFile, probe string
	vppSupervise := &cobra.Command{
		Use:    "vpp-supervise [--pid-file FILE] -- VPP ARGS...",
		Short:  "run VPP and start it again whenever it dies, as a node's service manager would (run by lab up)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			opts := supervise.DefaultOptions
			opts.PidFile = pidFile
			if probe != "" {
				// The node's kernel must reach its gateway through VPP
				// (the host interconnect, then the uplink): VPP 25.10's
				// af_packet transmit rings, towards the kernel and
				// towards the fabric alike, can stall under load, which
				// cuts the node off until VPP starts again.
				opts.Check = func(ctx context.Context) error {
					out, err := exec.CommandContext(ctx, "ping", "-c", "1", "-W", "1", probe).CombinedOutput()
					if err != nil {
						return fmt.Errorf("ping %s: %w: %s", probe, err, strings.TrimSpace(string(out)))
					}
					return nil
				}
				opts.CheckInterval, opts.CheckGrace, opts.CheckFailures = 2*time.Second, 30*time.Second, 5
			}
			return supervise.Run(ctx, args, opts, os.Stderr)
		},
	}
	vppSupervise.Flags().StringVar(&pidFile, "pid-file", "", "file that receives VPP's PID at each start")
	vppSupervise.Flags().StringVar(&probe, "probe", "", "liveness check: VPP is killed (and started again) when this address does not answer ping 5 times in a row, 2 s apart")
	return []*cobra.Command{vppctl, vppSupervise}
}
