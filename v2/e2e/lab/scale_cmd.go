package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/e2e/lab/cluster"
	"github.com/vcoil/vcoil/v2/e2e/lab/scale"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
)

// scaleCommands simulate a large cluster around the running lab (kwok
// nodes, their blocks, pods, Services, policies, churn) and measure vcoil
// in it; cni-probe is the probe they run inside a node.
func scaleCommands(cfg *cluster.Config) []*cobra.Command {
	o := scale.Options{
		Nodes: 1000, Pods: 30000, Services: 10000, Policies: 2000, Namespaces: 100,
		Rate: 300, Concurrency: 16, ChurnRate: 20, Changes: 50, Probes: 30,
		Watchers: []int{1, 10, 100}, WatchWindow: 30 * time.Second,
	}
	var out string
	prepare := func() error {
		if !cfg.IsUp() {
			return errors.New("the lab is not up: make lab-up")
		}
		if o.Kwok == "" {
			return errors.New("--kwok: the kwok binary (make bench-scale builds it)")
		}
		nodes := cfg.Topology.NodeList()
		if len(nodes) < 1 {
			return errors.New("the benchmark needs a real node")
		}
		o.Node, o.Others = nodes[0], nodes[1:]
		_, restCfg, err := cfg.Client()
		if err != nil {
			return err
		}
		// The simulated cluster is written thousands of objects at a time.
		restCfg.QPS, restCfg.Burst = 2000, 4000
		scheme, err := kubescheme.New()
		if err != nil {
			return err
		}
		if o.Client, err = client.NewWithWatch(restCfg, client.Options{Scheme: scheme}); err != nil {
			return err
		}
		o.Rest, o.Lab, o.Self, o.Log = restCfg, cfg, cfg.Self, cfg.Out
		// kwok reads its stages from a file: the benchmark's, written into
		// the lab's state.
		o.KwokConfig = filepath.Join(cfg.StateDir, "kwok-stages.yaml")
		return os.WriteFile(o.KwokConfig, scale.KwokStages, 0o644)
	}
	flags := func(c *cobra.Command) {
		f := c.Flags()
		f.StringVar(&o.Kwok, "kwok", "", "the kwok binary")
		f.IntVar(&o.Nodes, "sim-nodes", o.Nodes, "simulated nodes (--nodes is the lab's real ones)")
		f.IntVar(&o.Pods, "pods", o.Pods, "simulated pods (a third are clients, never endpoints)")
		f.IntVar(&o.Services, "services", o.Services, "Services without selector, 10 endpoints each")
		f.IntVar(&o.Policies, "policies", o.Policies, "NetworkPolicies")
		f.IntVar(&o.Namespaces, "namespaces", o.Namespaces, "namespaces of the simulated workloads")
		f.Float64Var(&o.Rate, "rate", o.Rate, "objects created per second, at most")
		f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "apiserver writes at a time")
	}
	benchCmd := &cobra.Command{
		Use:   "bench-scale",
		Short: "simulate a large cluster around the running lab and measure vcoil-controller, the first node's vcoild and the apiserver in it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := prepare(); err != nil {
				return err
			}
			o.ProfileDir = out
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			start := time.Now()
			recs, runErr := scale.Run(ctx, o)
			if err := writeScale(out, o, recs); err != nil {
				return errors.Join(runErr, err)
			}
			fmt.Fprintf(cfg.Out, "\n%s\nin %s; records: %s, table: %s\n", scale.Markdown(o, recs), time.Since(start).Round(time.Second),
				filepath.Join(out, "scale.json"), filepath.Join(out, "scale.md"))
			return runErr
		},
	}
	flags(benchCmd)
	bf := benchCmd.Flags()
	bf.Float64Var(&o.ChurnRate, "churn", o.ChurnRate, "churn events per second while measuring")
	bf.IntVar(&o.Changes, "changes", o.Changes, "service changes and policy changes timed under churn (each)")
	bf.IntVar(&o.Probes, "cni-probes", o.Probes, "CNI ADDs timed on the node, in the empty lab and under churn (0: none)")
	bf.IntSliceVar(&o.Watchers, "watchers", o.Watchers, "numbers of simulated vcoild watch sets for the apiserver's cost")
	bf.DurationVar(&o.WatchWindow, "watch-window", o.WatchWindow, "how long each apiserver cost is measured")
	bf.StringVar(&out, "out", "_out/bench", "directory of scale.json (JSON lines), scale.md and vcoild's profiles (vcoild-profile.pb.gz, vcoild-heap.pb.gz)")

	up := &cobra.Command{
		Use:   "scale-up",
		Short: "add the simulated nodes and workloads to the running lab and leave them (scale-down removes them)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := prepare(); err != nil {
				return err
			}
			o.Keep, o.ChurnRate, o.Probes, o.Watchers = true, 0, 0, nil
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err := scale.Run(ctx, o)
			return err
		},
	}
	flags(up)
	down := &cobra.Command{
		Use:   "scale-down",
		Short: "remove the simulated nodes and workloads from the running lab",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Kwok = "unused"
			if err := prepare(); err != nil {
				return err
			}
			return scale.Cleanup(cmd.Context(), o)
		},
	}
	var run string
	var count int
	var uids []string
	probe := &cobra.Command{
		Use:    "cni-probe --run ID --count N [--uids UID,...]",
		Short:  "time CNI ADD and DEL as a container runtime would, on the node it runs in (run by bench-scale in a node's namespaces)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := scale.RunCNIProbe(cmd.Context(), run, count, uids, "/etc/cni/net.d", "/opt/cni/bin")
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(res)
		},
	}
	probe.Flags().StringVar(&run, "run", "x", "names the probe pods (probe-RUN-I)")
	probe.Flags().IntVar(&count, "count", 10, "ADD/DEL pairs")
	probe.Flags().StringSliceVar(&uids, "uids", nil, "the probe pods' UIDs, in order, passed as K8S_POD_UID as containerd and CRI-O do")
	return []*cobra.Command{benchCmd, up, down, probe}
}

func writeScale(dir string, o scale.Options, recs []scale.Record) error {
	return writeReport(dir, "scale", func(w io.Writer) error { return scale.WriteJSONLines(w, recs) }, scale.Markdown(o, recs))
}
