// Command devenv runs vcoil-controller against a local kube-apiserver and etcd
// (the envtest binaries) and shows it at work: nodes ask for address blocks,
// pools report their use, the webhook refuses a bad pool. It is the README's
// "run it" command until the local cluster of network namespaces exists; it
// needs no root and touches no network configuration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/testenv"
)

func main() {
	controller := flag.String("controller", "bin/vcoil-controller", "path of the vcoil-controller binary")
	runFor := flag.Duration("for", 0, "stop after this long (0: run until interrupted)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *runFor > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *runFor)
		defer cancel()
	}
	if err := run(ctx, *controller); err != nil {
		fmt.Fprintln(os.Stderr, "devenv:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, controllerBin string) error {
	say("starting kube-apiserver and etcd with vcoil's CRDs and webhooks")
	env, err := testenv.Start(testenv.Options{Webhooks: true})
	if err != nil {
		return err
	}
	defer func() { _ = env.Stop() }()

	dir, err := os.MkdirTemp("", "vcoil-devenv-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return err
	}

	say("starting %s (log: %s)", controllerBin, filepath.Join(dir, "vcoil-controller.log"))
	logFile, err := os.Create(filepath.Join(dir, "vcoil-controller.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, controllerBin,
		"--kubeconfig", kubeconfig,
		"--namespace", "default",
		"--self-signed-cert=false",
		"--cert-dir", env.Webhook.LocalServingCertDir,
		"--webhook-port", fmt.Sprint(env.Webhook.LocalServingPort),
		"--metrics-addr", "127.0.0.1:9386",
		"--health-addr", "127.0.0.1:9387",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start vcoil-controller: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	if err := demo(ctx, env.Client); err != nil {
		return err
	}
	say("vcoil-controller runs; metrics at http://127.0.0.1:9386/metrics, readiness at http://127.0.0.1:9387/readyz")
	say("look around with: KUBECONFIG=%s kubectl get addresspools,addressblocks,blockrequests", kubeconfig)
	say("stop with Ctrl-C")
	select {
	case <-ctx.Done():
		<-exited
		say("stopped")
		return nil
	case err := <-exited:
		return fmt.Errorf("vcoil-controller exited: %v", err)
	}
}

// demo creates two nodes and a dual-stack default pool, asks for blocks like
// vcoild would, and prints what the controller answered.
func demo(ctx context.Context, c client.Client) error {
	for _, n := range []string{"node-1", "node-2"} {
		if err := c.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			return err
		}
	}
	say("creating AddressPool default: 10.64.0.0/16 + fd00:10:64::/112, blocks of 2^5")
	pool := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 5, Subnets: []vcoilv2.SubnetSet{
			{IPv4: ptr.To("10.64.0.0/16"), IPv6: ptr.To("fd00:10:64::/112")},
		}},
	}
	if err := retry(ctx, func() error { return c.Create(ctx, pool) }); err != nil {
		return fmt.Errorf("create pool: %w", err)
	}

	say("the webhook refuses a pool that overlaps it:")
	bad := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "overlapping"},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: 5, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.64.128.0/20"), IPv6: ptr.To("fd00:20::/116")}}},
	}
	fmt.Printf("    %v\n", c.Create(ctx, bad))

	say("nodes ask for blocks (BlockRequests, as vcoild does)")
	for _, n := range []string{"node-1", "node-1", "node-2"} {
		br := &vcoilv2.BlockRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: n + "-"},
			Spec:       vcoilv2.BlockRequestSpec{NodeName: n, PoolName: "default"},
		}
		if err := c.Create(ctx, br); err != nil {
			return err
		}
		if err := retry(ctx, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(br), br); err != nil {
				return err
			}
			if !br.Done() {
				return errors.New("not answered yet")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	var blocks vcoilv2.AddressBlockList
	if err := c.List(ctx, &blocks); err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 4, 4, 2, ' ', 0)
	fmt.Fprintln(w, "    BLOCK\tNODE\tIPV4\tIPV6\tNODE SUBNET")
	for _, b := range blocks.Items {
		fmt.Fprintf(w, "    %s\t%s\t%s\t%s\t%v\n", b.Name, b.Labels[vcoilv2.LabelNode], ptr.Deref(b.IPv4, ""), ptr.Deref(b.IPv6, ""), b.NodeSubnet)
	}
	_ = w.Flush()
	return retry(ctx, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return err
		}
		if pool.Status.BlocksAllocated != 3 {
			return errors.New("pool status not updated yet")
		}
		say("AddressPool default: %d of %d blocks allocated", pool.Status.BlocksAllocated, pool.Status.BlocksMax)
		return nil
	})
}

func retry(ctx context.Context, f func() error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func say(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}
