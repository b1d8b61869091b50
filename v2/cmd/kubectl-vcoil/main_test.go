package main

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

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

// viewer returns the path of a kubeconfig of a user who has exactly
// v2/config/viewer's roles.
func viewer(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	if err := testenv.ApplyRBAC(ctx, env.Client, "viewer"); err != nil {
		t.Fatal(err)
	}
	user := "viewer-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	for _, o := range []client.Object{
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "vcoil-viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "vcoil-viewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
	} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	kc, err := env.UserKubeConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// plugin runs the kubectl-vcoil binary and returns its output and exit
// code.
func plugin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := gobuild.Program(t, "github.com/vcoil/vcoil/v2/cmd/kubectl-vcoil")
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
}

func addressBlock(name, pool, node, v4 string, index int64) *vcoilv2.AddressBlock {
	return &vcoilv2.AddressBlock{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{vcoilv2.LabelPool: pool, vcoilv2.LabelNode: node}},
		Index: index, IPv4: ptr.To(v4)}
}

func TestHelpListsTheVerbs(t *testing.T) {
	out, _, code := plugin(t, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	for _, want := range []string{"kubectl vcoil [command]", "pools", "blocks", "pod", "node", "trace", "--kubeconfig", "--context", "--namespace", "--vcoil-namespace", "--daemon-selector", "--output"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not mention %q:\n%s", want, out)
		}
	}
}

// pools, as a user with the viewer's roles, against real AddressPools,
// AddressBlocks and a LoadBalancer Service.
func TestPoolsAsAViewer(t *testing.T) {
	kubeconfig := viewer(t)
	ctx := t.Context()
	create(t,
		&vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pv-pods"}, Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 5,
			Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.70.0.0/24"), IPv6: ptr.To("fd00:70::/120")}}}},
		&vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "pv-lb"}, Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsageLoadBalancer,
			Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("203.0.113.16/28")}}}},
		addressBlock("pv-pods-0", "pv-pods", "pv-node1", "10.70.0.0/27", 0),
		addressBlock("pv-pods-3", "pv-pods", "pv-node2", "10.70.0.96/27", 3),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pv"}},
	)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "pv", Name: "web"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
		Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	create(t, svc)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.17"}}
	if err := env.Client.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := plugin(t, "--kubeconfig", kubeconfig, "pools", "-o", "json")
	if code != 0 {
		t.Fatalf("pools exited %d: %s", code, stderr)
	}
	var pools []kubectlvcoil.Pool
	if err := json.Unmarshal([]byte(out), &pools); err != nil {
		t.Fatalf("pools -o json: %v\n%s", err, out)
	}
	byName := map[string]kubectlvcoil.Pool{}
	for _, p := range pools {
		byName[p.Name] = p
	}
	pods, lb := byName["pv-pods"], byName["pv-lb"]
	if pods.Usage != "Pods" || pods.LoadBalancer || pods.IPv4Addresses != 256 || pods.IPv6Addresses != 256 ||
		pods.BlocksMax != 8 || pods.BlocksAllocated != 2 || pods.BlocksFree != 6 {
		t.Errorf("pool pv-pods = %+v, want Pods, 256+256 addresses, 2 of 8 blocks", pods)
	}
	if !lb.LoadBalancer || lb.AddressesMax != 14 || lb.AddressesAllocated != 1 || !slices.Equal(lb.Services, []string{"pv/web"}) {
		t.Errorf("pool pv-lb = %+v, want a LoadBalancer pool of 14 addresses, 1 held by pv/web", lb)
	}

	out, _, code = plugin(t, "--kubeconfig", kubeconfig, "pools")
	if code != 0 || !strings.Contains(out, "2/8 blocks") || !strings.Contains(out, "LoadBalancers (1 Services)") {
		t.Errorf("pools table (exit %d):\n%s", code, out)
	}
	out, _, code = plugin(t, "--kubeconfig", kubeconfig, "pools", "-o", "yaml")
	if code != 0 || !strings.Contains(out, "name: pv-lb") {
		t.Errorf("pools -o yaml (exit %d):\n%s", code, out)
	}
	if _, stderr, code := plugin(t, "--kubeconfig", kubeconfig, "pools", "-o", "wide"); code != 2 || !strings.Contains(stderr, `output format "wide"`) {
		t.Errorf("pools -o wide exited %d: %s", code, stderr)
	}
}

// blocks, as a viewer, on a node without a vcoild pod: the blocks are
// listed with "-" for their use, the error names the node, and the exit
// code says that no state could be read.
func TestBlocksOfANodeWithoutVcoild(t *testing.T) {
	kubeconfig := viewer(t)
	create(t,
		&vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "bv"}, Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 5,
			Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.71.0.0/24")}}}},
		addressBlock("bv-0", "bv", "bv-node1", "10.71.0.0/27", 0),
		addressBlock("bv-1", "bv", "bv-node2", "10.71.0.32/27", 1),
	)
	out, stderr, code := plugin(t, "--kubeconfig", kubeconfig, "blocks", "--node", "bv-node1", "-o", "json")
	if code != 2 {
		t.Errorf("blocks exited %d, want 2 (no state read): %s", code, stderr)
	}
	if !strings.Contains(stderr, "node bv-node1: no running vcoild pod (namespace kube-system, selector app.kubernetes.io/name=vcoild") {
		t.Errorf("stderr does not name the node and how its vcoild was looked for:\n%s", stderr)
	}
	var b kubectlvcoil.Blocks
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("blocks -o json: %v\n%s", err, out)
	}
	if len(b.Blocks) != 1 || b.Blocks[0].Name != "bv-0" || b.Blocks[0].InUse != nil || len(b.Errors) != 1 || b.Errors[0].Node != "bv-node1" {
		t.Errorf("blocks --node bv-node1 = %+v", b)
	}
}

// states is a StateReader over fixed states: the port-forward itself needs
// a kubelet, which only the e2e suite has.
type states map[string]*nodestate.State

func (s states) NodeState(_ context.Context, node string) (*nodestate.State, error) {
	if st := s[node]; st != nil {
		return st, nil
	}
	return nil, fmt.Errorf("node %s: %w", node, kubectlvcoil.ErrNoDaemon)
}

func runningPod(t *testing.T, ns, name, node string, ips ...string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node,
		Containers: []corev1.Container{{Name: "c", Image: "agent"}}}}
	create(t, p)
	p.Status.Phase = corev1.PodRunning
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	p.Status.PodIP = ips[0]
	if err := env.Client.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// blocks, pod and trace read the apiserver's objects and the nodes' states
// together.
func TestVerbsJoinTheClusterAndTheNodesStates(t *testing.T) {
	ctx := t.Context()
	env.CreateNode(t, "jv-node1", "198.18.0.1")
	env.CreateNode(t, "jv-node2", "198.18.0.2")
	create(t,
		&vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "jv"}, Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 5,
			Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.72.0.0/24")}}}},
		addressBlock("jv-0", "jv", "jv-node1", "10.72.0.0/27", 0),
		addressBlock("jv-1", "jv", "jv-node2", "10.72.0.32/27", 1),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "jv"}},
	)
	runningPod(t, "jv", "client", "jv-node1", "10.72.0.5")
	runningPod(t, "jv", "blocked", "jv-node1", "10.72.0.6")
	runningPod(t, "jv", "server", "jv-node1", "10.72.0.7")
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "jv", Name: "server"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	create(t, svc)
	vip := netip.MustParseAddr(svc.Spec.ClusterIP)

	a := netip.MustParseAddr
	node1 := &nodestate.State{APIVersion: nodestate.APIVersion, Node: "jv-node1", Dataplane: "linux",
		NATLoopback: []netip.Addr{a("10.72.0.30")},
		Blocks:      []nodestate.Block{{Name: "jv-0", Pool: "jv", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.72.0.0/27")}, NodeSubnet: true, InUse: 4, Free: 26}},
		Pods: []nodestate.Pod{{Namespace: "jv", Name: "server", ContainerID: "abc", IfName: "eth0", IPs: []netip.Addr{a("10.72.0.7")}, Pool: "jv", Block: "jv-0",
			Interface: &nodestate.Interface{Kind: "veth", Name: "vcabc", Index: 9}}},
		Services: &nodestate.Services{Renderer: "nftables", Frontends: []nodestate.Frontend{{Service: "jv/server", PortName: "http", Kind: nodestate.FrontendClusterIP,
			Address: vip, Port: 80, Protocol: "TCP", Backends: []nodestate.Backend{{Address: a("10.72.0.7"), Port: 8080, Node: "jv-node1", Local: true}}}}},
		Policies: &nodestate.Policies{Renderer: "nftables", AlwaysAllowed: []netip.Addr{a("198.18.0.1"), a("10.72.0.30")}, Pods: []nodestate.PodRules{
			{Namespace: "jv", Name: "blocked", IPs: []netip.Addr{a("10.72.0.6")}},
			{Namespace: "jv", Name: "client", IPs: []netip.Addr{a("10.72.0.5")}},
			{Namespace: "jv", Name: "server", IPs: []netip.Addr{a("10.72.0.7")}, Ingress: []nodestate.Rule{
				{Action: "permit", Protocol: "tcp", Src: netip.MustParsePrefix("10.72.0.5/32"), DstPorts: &nodestate.PortRange{First: 8080, Last: 8080}},
				{Action: "deny", Protocol: "any"},
			}},
		}},
	}
	var out, errOut bytes.Buffer
	app := &kubectlvcoil.App{Client: env.Client, States: states{"jv-node1": node1}, Out: &out, ErrOut: &errOut}

	app.Output = kubectlvcoil.OutputJSON
	if err := app.Blocks(ctx, ""); err != nil {
		t.Fatal(err)
	}
	var blocks kubectlvcoil.Blocks
	if err := json.Unmarshal(out.Bytes(), &blocks); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, b := range blocks.Blocks {
		switch b.Name {
		case "jv-0":
			seen++
			if b.Node != "jv-node1" || b.InUse == nil || *b.InUse != 4 || b.Free == nil || *b.Free != 26 {
				t.Errorf("block jv-0 = %+v, want 4 in use and 26 free on jv-node1", b)
			}
		case "jv-1":
			seen++
			if b.Node != "jv-node2" || b.InUse != nil || b.Free != nil {
				t.Errorf("block jv-1 = %+v, want no use known (jv-node2 has no state)", b)
			}
		}
	}
	if seen != 2 || !slices.ContainsFunc(blocks.Errors, func(e kubectlvcoil.NodeError) bool { return e.Node == "jv-node2" }) {
		t.Errorf("blocks = %+v, want jv-0 and jv-1 and an error of jv-node2", blocks)
	}
	if !strings.Contains(errOut.String(), "warning: node jv-node2: no running vcoild pod") {
		t.Errorf("blocks' stderr does not name jv-node2:\n%s", errOut.String())
	}

	out.Reset()
	if err := app.Pod(ctx, "jv", "server"); err != nil {
		t.Fatal(err)
	}
	var pr kubectlvcoil.PodReport
	if err := json.Unmarshal(out.Bytes(), &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Node != "jv-node1" || pr.Block != "jv-0" || pr.Interface == nil || pr.Interface.Name != "vcabc" || len(pr.Backs) != 1 ||
		pr.Backs[0].Address != vip || pr.Policies == nil || len(pr.Policies.Ingress) != 2 || !slices.Equal(pr.NATLoopback, []netip.Addr{a("10.72.0.30")}) {
		t.Errorf("pod jv/server = %+v", pr)
	}
	if err := app.Pod(ctx, "jv", "nobody"); err == nil || !strings.Contains(err.Error(), "jv/nobody") {
		t.Errorf("pod jv/nobody: %v", err)
	}

	trace := func(src, dst string) (string, error) {
		out.Reset()
		err := app.Trace(ctx, kubectlvcoil.TraceArgs{Src: src, Dst: dst, Namespace: "default"})
		return out.String(), err
	}
	app.Output = kubectlvcoil.OutputTable
	got, err := trace("jv/client", "svc/jv/server")
	if err != nil {
		t.Fatalf("client -> svc/jv/server: %v\n%s", err, got)
	}
	if !strings.Contains(got, "ALLOWED: every check passed") || !strings.Contains(got, fmt.Sprintf("ClusterIP jv/server %s:80/TCP: 1 backend(s)", vip)) {
		t.Errorf("client -> svc/jv/server:\n%s", got)
	}
	got, err = trace("jv/blocked", "svc/jv/server:http")
	var exit *kubectlvcoil.ExitError
	if !errors.As(err, &exit) || exit.Code != kubectlvcoil.ExitNotAllowed || !strings.Contains(got, "DENIED: ingress rule 1 of pod jv/server on node jv-node1 denies it") {
		t.Errorf("blocked -> svc/jv/server:http: %v\n%s", err, got)
	}
	if got, err := trace("jv/client", "svc/jv/server:81"); err == nil || !strings.Contains(err.Error(), "service jv/server has no port 81") {
		t.Errorf("client -> svc/jv/server:81: %v\n%s", err, got)
	}
	// An address of no pod or node is outside the cluster: no ingress
	// rules.
	if got, err := trace("jv/client", "10.72.0.40:8080"); err != nil || !strings.Contains(got, "ALLOWED") {
		t.Errorf("client -> an address of no pod: %v\n%s", err, got)
	}
}

// The vcoild pod of a node is the running one on that node with the
// daemon's labels, in vcoil's namespace.
func TestDaemonPodsFindsTheNodesRunningVcoild(t *testing.T) {
	ctx := t.Context()
	sel, err := labels.Parse(kubectlvcoil.DefaultDaemonSelector)
	if err != nil {
		t.Fatal(err)
	}
	d := kubectlvcoil.DaemonPods{Client: env.Client, Namespace: "kube-system", Selector: sel}
	daemon := func(name, node string, running bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, Labels: map[string]string{"app.kubernetes.io/name": "vcoild"}},
			Spec: corev1.PodSpec{NodeName: node, HostNetwork: true, Containers: []corev1.Container{{Name: "vcoild", Image: "vcoil"}}}}
		create(t, p)
		if running {
			p.Status.Phase = corev1.PodRunning
			if err := env.Client.Status().Update(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	daemon("vcoild-pending", "dp-node1", false)
	daemon("vcoild-other-node", "dp-node2", true)
	if _, err := d.On(ctx, "dp-node1"); !errors.Is(err, kubectlvcoil.ErrNoDaemon) || !strings.Contains(err.Error(), "node dp-node1") {
		t.Errorf("a node whose vcoild is pending: %v", err)
	}
	daemon("vcoild-running", "dp-node1", true)
	p, err := d.On(ctx, "dp-node1")
	if err != nil || p.Name != "vcoild-running" {
		t.Errorf("On(dp-node1) = %v, %v; want vcoild-running", p, err)
	}
}
