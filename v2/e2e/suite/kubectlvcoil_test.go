package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil"
	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil/trace"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

const groupKubectlVcoil = "kubectl vcoil"

// plugin runs kubectl-vcoil against the cluster: the binary
// VCOIL_E2E_KUBECTL_VCOIL names (make lab-e2e passes bin/kubectl-vcoil), or
// one built from the work tree.
type plugin struct {
	bin        string
	kubeconfig string
}

func newPlugin(t *testing.T, k *cluster) plugin {
	t.Helper()
	bin := os.Getenv("VCOIL_E2E_KUBECTL_VCOIL")
	if bin == "" {
		bin = gobuild.Program(t, "github.com/vcoil/vcoil/v2/cmd/kubectl-vcoil")
	}
	return plugin{bin: bin, kubeconfig: k.settings.kubeconfig}
}

// run returns the plugin's standard output and exit code; an exit code
// other than 0 and 1 is an error carrying its standard error.
func (p plugin) run(c context.Context, args ...string) (string, int, error) {
	cmd := exec.CommandContext(c, p.bin, args...)
	// As kubectl runs a plugin: the kubeconfig comes from the environment.
	cmd.Env = append(os.Environ(), "KUBECONFIG="+p.kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0, nil
	case errors.As(err, &exit) && exit.ExitCode() == kubectlvcoil.ExitNotAllowed:
		return out.String(), exit.ExitCode(), nil
	default:
		return out.String(), -1, fmt.Errorf("kubectl vcoil %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
}

// json runs the plugin with -o json and decodes its output into v.
func (p plugin) json(c context.Context, v any, args ...string) (int, error) {
	out, code, err := p.run(c, append(args, "-o", "json")...)
	if err != nil {
		return code, err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return code, fmt.Errorf("kubectl vcoil %s -o json: %w: %s", strings.Join(args, " "), err, out)
	}
	return code, nil
}

// TestKubectlVcoil checks the plugin's verbs against what the cluster
// holds, and trace's verdicts against real connections.
func TestKubectlVcoil(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	pl := newPlugin(t, k)

	if k.settings.kubectl == "" {
		listed(groupKubectlVcoil, "kubectl finds the plugin on the PATH", statusNotApplicable, "no kubectl given (VCOIL_E2E_KUBECTL)")
	} else {
		record(t, groupKubectlVcoil, "kubectl finds the plugin on the PATH", byVcoil, func(t *testing.T) error {
			// The lab's kubectl puts --kubeconfig first, before which
			// kubectl looks up no plugin; `plugin list` it runs.
			dir := t.TempDir()
			if err := os.Symlink(pl.bin, filepath.Join(dir, "kubectl-vcoil")); err != nil {
				return err
			}
			cmd := exec.CommandContext(ctx(t, time.Minute), k.settings.kubectl, "--kubeconfig", k.settings.kubeconfig, "plugin", "list")
			cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil && !strings.Contains(string(out), "kubectl-vcoil") {
				return fmt.Errorf("kubectl plugin list: %v: %s", err, out)
			}
			if !strings.Contains(string(out), filepath.Join(dir, "kubectl-vcoil")) {
				return fmt.Errorf("kubectl plugin list does not list %s: %s", filepath.Join(dir, "kubectl-vcoil"), out)
			}
			return nil
		})
	}

	record(t, groupKubectlVcoil, "pools: every AddressPool with the AddressBlocks carved from it", byVcoil, func(t *testing.T) error {
		c := ctx(t, 2*time.Minute)
		return poll.Until(c, time.Minute, pollInterval, func(c context.Context) error {
			var pools []kubectlvcoil.Pool
			if _, err := pl.json(c, &pools, "pools"); err != nil {
				return err
			}
			var want vcoilv2.AddressPoolList
			if err := k.c.List(c, &want); err != nil {
				return err
			}
			if len(pools) != len(want.Items) {
				return fmt.Errorf("pools lists %d pools, the cluster has %d", len(pools), len(want.Items))
			}
			for _, p := range pools {
				if p.LoadBalancer {
					continue
				}
				blocks, err := blocksOf(c, k, "", p.Name)
				if err != nil {
					return err
				}
				if p.BlocksAllocated != int64(len(blocks)) || p.BlocksMax < p.BlocksAllocated {
					return fmt.Errorf("pool %s: %d of %d blocks allocated, the cluster has %d AddressBlocks of it", p.Name, p.BlocksAllocated, p.BlocksMax, len(blocks))
				}
			}
			return nil
		})
	})

	record(t, groupKubectlVcoil, "blocks: each node's blocks, with the suite's pods counted in theirs", byVcoil, func(t *testing.T) error {
		c := ctx(t, 2*time.Minute)
		// Blocks of pools that earlier tests removed may still be going.
		return poll.Until(c, time.Minute, pollInterval, func(c context.Context) error {
			var got kubectlvcoil.Blocks
			if _, err := pl.json(c, &got, "blocks"); err != nil {
				return err
			}
			if len(got.Errors) > 0 {
				return fmt.Errorf("blocks could not read nodes: %+v", got.Errors)
			}
			all, err := blocksOf(c, k, "", "")
			if err != nil {
				return err
			}
			if len(got.Blocks) != len(all) {
				return fmt.Errorf("blocks lists %d blocks, the cluster has %d", len(got.Blocks), len(all))
			}
			for _, p := range []*corev1.Pod{w.a1, w.a2, w.b1} {
				ip := podIP(p)
				i := slices.IndexFunc(got.Blocks, func(b kubectlvcoil.Block) bool {
					return slices.ContainsFunc(b.Prefixes, func(s string) bool { return netip.MustParsePrefix(s).Contains(ip) })
				})
				if i < 0 {
					return fmt.Errorf("pod %s (%s): no block listed holds its address", p.Name, ip)
				}
				b := got.Blocks[i]
				if b.Node != p.Spec.NodeName || b.InUse == nil || *b.InUse < 1 {
					inUse := "no address"
					if b.InUse != nil {
						inUse = fmt.Sprint(*b.InUse)
					}
					return fmt.Errorf("pod %s (%s on %s): its block %s is listed on %s with %s in use", p.Name, ip, p.Spec.NodeName, b.Name, b.Node, inUse)
				}
			}
			return nil
		})
	})

	record(t, groupKubectlVcoil, "pod: addresses, node, block, NAT loopback and dataplane interface as the cluster has them", byVcoil, func(t *testing.T) error {
		c := ctx(t, time.Minute)
		var r kubectlvcoil.PodReport
		if _, err := pl.json(c, &r, "pod", w.ns+"/"+w.a1.Name); err != nil {
			return err
		}
		if r.Node != w.a1.Spec.NodeName || !slices.Contains(r.IPs, podIP(w.a1)) {
			return fmt.Errorf("pod %s: node %s, addresses %v; the cluster says %s, %s", w.a1.Name, r.Node, r.IPs, w.a1.Spec.NodeName, podIP(w.a1))
		}
		var b vcoilv2.AddressBlock
		if err := k.c.Get(c, client.ObjectKey{Name: r.Block}, &b); err != nil {
			return fmt.Errorf("pod %s: its block %q: %w", w.a1.Name, r.Block, err)
		}
		if b.Labels[vcoilv2.LabelNode] != r.Node || b.IPv4 == nil || !netip.MustParsePrefix(*b.IPv4).Contains(podIP(w.a1)) {
			return fmt.Errorf("pod %s (%s): block %s is %v on node %s", w.a1.Name, podIP(w.a1), b.Name, b.IPv4, b.Labels[vcoilv2.LabelNode])
		}
		var n corev1.Node
		if err := k.c.Get(c, client.ObjectKey{Name: r.Node}, &n); err != nil {
			return err
		}
		var loopbacks []string
		for _, a := range r.NATLoopback {
			loopbacks = append(loopbacks, a.String())
		}
		annotated := strings.Split(n.Annotations[vcoilv2.AnnotationNATLoopback], ",")
		slices.Sort(loopbacks)
		slices.Sort(annotated)
		if !slices.Equal(loopbacks, annotated) {
			return fmt.Errorf("pod %s: NAT loopback %v, node %s's annotation says %v", w.a1.Name, loopbacks, r.Node, annotated)
		}
		if r.Interface == nil || r.Interface.Name == "" || r.Interface.Index == 0 {
			return fmt.Errorf("pod %s: no dataplane interface: %+v (warnings %v)", w.a1.Name, r.Interface, r.Warnings)
		}
		return nil
	})

	record(t, groupKubectlVcoil, "node: the node's pods and blocks as the cluster has them", byVcoil, func(t *testing.T) error {
		c := ctx(t, 2*time.Minute)
		// Blocks of pools that earlier tests removed may still be going.
		return poll.Until(c, time.Minute, pollInterval, func(c context.Context) error {
			var st nodestate.State
			if _, err := pl.json(c, &st, "node", w.nodeA.Name); err != nil {
				return err
			}
			if st.Node != w.nodeA.Name || st.APIVersion != nodestate.APIVersion {
				return fmt.Errorf("node %s: the state of %q (%s)", w.nodeA.Name, st.Node, st.APIVersion)
			}
			for _, p := range []*corev1.Pod{w.a1, w.a2} {
				if !slices.ContainsFunc(st.Pods, func(sp nodestate.Pod) bool {
					return sp.Namespace == p.Namespace && sp.Name == p.Name && slices.Contains(sp.IPs, podIP(p))
				}) {
					return fmt.Errorf("node %s: pod %s (%s) is not among its pods", w.nodeA.Name, p.Name, podIP(p))
				}
			}
			blocks, err := blocksOf(c, k, w.nodeA.Name, "")
			if err != nil {
				return err
			}
			var want, got []string
			for _, b := range blocks {
				want = append(want, b.Name)
			}
			for _, b := range st.Blocks {
				got = append(got, b.Name)
			}
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("node %s: blocks %v in its state, %v in the cluster", w.nodeA.Name, got, want)
			}
			return nil
		})
	})

	traceRows(t, k, w, pl)
}

// traceRows checks trace's verdicts against real connections: a server
// whose policy admits one client and not another, directly and through
// its Service.
func traceRows(t *testing.T, k *cluster, w *world, pl plugin) {
	c := ctx(t, 8*time.Minute)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vcoil-e2e-trace-"}}
	if err := k.c.Create(c, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.c.Delete(context.Background(), ns) })
	server := k.agentPod(t, ns.Name, "server", w.nodeA.Name, false, nil)
	good := k.agentPod(t, ns.Name, "client-ok", w.nodeB.Name, false, nil)
	bad := k.agentPod(t, ns.Name, "client-bad", w.nodeB.Name, false, nil)
	for _, p := range []*corev1.Pod{server, good, bad} {
		k.waitRunning(t, p)
	}
	svc := k.service(t, ns.Name, "server", map[string]string{"name": "server"}, 80, portTCP, corev1.ServiceTypeClusterIP, false)
	if err := poll.Until(c, time.Minute, pollInterval, func(c context.Context) error { return k.readyEndpoints(c, svc) }); err != nil {
		t.Fatal(err)
	}
	port := intstr.FromInt32(portTCP)
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "server"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"name": "server"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "client-ok"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
			}},
		}}
	if err := k.c.Create(c, np); err != nil {
		t.Fatal(err)
	}
	direct := hostPortAddr(podIP(server), portTCP)
	vip := hostPortAddr(mustAddr(svc.Spec.ClusterIP), 80)

	// probe says whether a real connection passes: a pass, or three
	// timeouts in a row (the policy may take a moment to reach a node).
	probe := func(c context.Context, from *corev1.Pod, addr string, want bool) error {
		n := 0
		return poll.Until(c, 30*time.Second, pollInterval, func(c context.Context) error {
			_, err := k.exec(c, from, "/agent", "connect", "tcp", addr, "--timeout", "2s")
			if want {
				return err
			}
			if err == nil {
				n = 0
				return fmt.Errorf("%s -> %s passed, the policy should deny it", from.Name, addr)
			}
			if n++; n < 3 {
				return fmt.Errorf("denied %d times", n)
			}
			return nil
		})
	}
	// verdict runs trace until its verdict is want (the node's state
	// follows the policy's rendering) and returns the result.
	verdict := func(c context.Context, src, dst string, want string) (trace.Result, error) {
		var r trace.Result
		err := poll.Until(c, 30*time.Second, pollInterval, func(c context.Context) error {
			code, err := pl.json(c, &r, "trace", src, dst)
			if err != nil {
				return err
			}
			if r.Verdict != want {
				return fmt.Errorf("trace %s %s: %s (%s), want %s", src, dst, r.Verdict, r.Reason, want)
			}
			if wantCode := map[bool]int{true: 0, false: kubectlvcoil.ExitNotAllowed}[want == trace.Allowed]; code != wantCode {
				return poll.Stop(fmt.Errorf("trace %s %s: %s, exit code %d, want %d", src, dst, r.Verdict, code, wantCode))
			}
			return nil
		})
		return r, err
	}
	target := func(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

	for _, tc := range []struct {
		name  string
		from  *corev1.Pod
		dst   string
		addr  string
		allow bool
	}{
		{"trace: the admitted client to the server's pod is allowed, and connects", good, target(server) + fmt.Sprintf(":%d", portTCP), direct, true},
		{"trace: the other client to the server's pod is denied by the server's ingress rule, and does not connect", bad, target(server) + fmt.Sprintf(":%d", portTCP), direct, false},
		{"trace: the admitted client through the Service is allowed, and connects", good, "svc/" + ns.Name + "/server", vip, true},
		{"trace: the other client through the Service is denied, and does not connect", bad, "svc/" + ns.Name + "/server:80/tcp", vip, false},
	} {
		record(t, groupKubectlVcoil, tc.name, byVcoil, func(t *testing.T) error {
			c := ctx(t, 2*time.Minute)
			want := trace.Denied
			if tc.allow {
				want = trace.Allowed
			}
			if err := probe(c, tc.from, tc.addr, tc.allow); err != nil {
				return fmt.Errorf("the real connection: %w", err)
			}
			r, err := verdict(c, target(tc.from), tc.dst, want)
			if err != nil {
				return err
			}
			if len(r.Paths) != 1 {
				return fmt.Errorf("trace %s %s: %d paths, want the server's only", target(tc.from), tc.dst, len(r.Paths))
			}
			p := r.Paths[0]
			if p.Dst.Pod != target(server) || p.Dst.Node != server.Spec.NodeName || p.Port != portTCP || p.Source != podIP(tc.from) {
				return fmt.Errorf("trace %s %s: path to %+v port %d from %s", target(tc.from), tc.dst, p.Dst, p.Port, p.Source)
			}
			if !tc.allow {
				i := slices.IndexFunc(p.Steps, func(s trace.Step) bool { return s.Result == trace.StepDeny })
				if i < 0 || p.Steps[i].Check != trace.CheckIngress || p.Steps[i].Pod != target(server) || p.Steps[i].Node != server.Spec.NodeName || p.Steps[i].Rule == "" {
					return fmt.Errorf("trace %s %s: denied, but not by a rule of the server's ingress on its node: %+v", target(tc.from), tc.dst, p.Steps)
				}
			}
			return nil
		})
	}
}
