package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/controllertest"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
)

// The harness runs what a node runs, for real: vcoild (the binary, with the
// RBAC of the manifests), the vcoil CNI binary called through libcni with a
// real conflist (vcoil, then portmap) from inside the node's network
// namespace, as a container runtime on the node does, and pods that are
// network namespaces. Nodes hang off a bridge in a "fabric" namespace, which
// also plays the network's router at 198.18.0.254. vcoild itself runs in the
// test's namespace, to reach envtest's apiserver on loopback, and works on
// the node's namespace through --netns. Nothing touches the machine's own
// namespace, and no namespace has a link to it.

var env *testenv.Env

// What the harness runs, built once per test binary: vcoild, and the CNI
// binaries of the conflist (with loopback, which the runtime calls too).
const vcoildPackage = "github.com/vcoil/vcoil/v2/cmd/vcoild"

var cniPackages = []string{
	"github.com/vcoil/vcoil/v2/cmd/vcoil",
	"github.com/containernetworking/plugins/plugins/meta/portmap",
	"github.com/containernetworking/plugins/plugins/main/loopback",
}

func TestMain(m *testing.M) {
	// vcoil-controller's reconcilers run in the test process; its program
	// is tested in v2/cmd/vcoil-controller.
	// The CNI benchmark with Services needs room for thousands of them;
	// the other tests keep envtest's range, which their vcoild is given.
	opts := testenv.Options{}
	if os.Getenv("VCOIL_BENCH_CNI_SERVICES") != "" {
		opts.ServiceCIDR = benchServiceCIDR
	}
	testenv.Main(m, opts, &env, controllertest.Start, applyRBAC)
}

// applyRBAC installs the ClusterRoles and bindings of the default overlay,
// so that vcoild runs with exactly the permissions its manifests give it.
func applyRBAC(ctx context.Context, e *testenv.Env) (func(), error) {
	return func() {}, testenv.ApplyRBAC(ctx, e.Client, "default")
}

// fabric is the network the nodes share.
type fabric struct {
	t  *testing.T
	ns *netnstest.NS
}

func newFabric(t *testing.T) *fabric {
	t.Helper()
	f := &fabric{t: t, ns: netnstest.New(t, "fabric")}
	f.ns.IP("link", "add", "br0", "type", "bridge")
	f.ns.IP("addr", "add", "198.18.0.254/24", "dev", "br0")
	f.ns.IP("link", "set", "br0", "up")
	return f
}

// node is one vcoild with its network namespace.
type node struct {
	t       *testing.T
	name    string
	addr    netip.Addr
	ns      *netnstest.NS
	dir     string
	socket  string
	health  string
	metrics string
	state   string // the node state's base URL (--state-addr)
	args    []string
	proc    *exec.Cmd
	exited  chan struct{}
	log     *testenv.LogBuffer
	cni     *libcni.CNIConfig
	conf    *libcni.NetworkConfigList
}

// newNode creates the node's namespace, plugged into the fabric as
// 198.18.0.<index>, its Node object, and starts vcoild.
func newNode(t *testing.T, f *fabric, index int, extraArgs ...string) *node {
	t.Helper()
	return newNodeWith(t, f, index, nodeOptions{args: extraArgs})
}

// nodeOptions adjust a node before vcoild starts.
type nodeOptions struct {
	// args are added to vcoild's command line.
	args []string
	// beforeStart runs once the node's namespace is plugged in and before
	// vcoild starts (for example, to start VPP in the namespace).
	beforeStart func(n *node)
}

func newNodeWith(t *testing.T, f *fabric, index int, opts nodeOptions) *node {
	t.Helper()
	extraArgs := opts.args
	cniBinDir := gobuild.Dir(t, cniPackages...)
	name := fmt.Sprintf("node-%d", index)
	n := &node{
		t: t, name: name, addr: netip.AddrFrom4([4]byte{198, 18, 0, byte(index)}),
		ns: netnstest.New(t, name), dir: t.TempDir(), log: &testenv.LogBuffer{},
		args: extraArgs,
	}
	n.socket = filepath.Join(n.dir, "vcoild.sock")
	peer := fmt.Sprintf("n%d", index)
	n.ns.IP("link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", f.ns.Path())
	f.ns.IP("link", "set", peer, "master", "br0", "up")
	n.ns.IP("addr", "add", n.addr.String()+"/24", "dev", "eth0")
	n.ns.IP("link", "set", "eth0", "up")
	n.ns.IP("route", "add", "default", "via", "198.18.0.254")

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.addr.String()}}
	if err := env.Client.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})

	conflist := fmt.Sprintf(`{
  "cniVersion": "1.1.0",
  "name": "vcoil",
  "plugins": [
    {"type": "vcoil", "socket": %q},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}`, n.socket)
	conf, err := libcni.ConfListFromBytes([]byte(conflist))
	if err != nil {
		t.Fatal(err)
	}
	n.conf = conf
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{cniBinDir}, filepath.Join(n.dir, "cni-cache"), nil)
	if opts.beforeStart != nil {
		opts.beforeStart(n)
	}
	n.start()
	return n
}

// start runs vcoild and waits until it is ready.
func (n *node) start() {
	n.t.Helper()
	n.launch()
	n.waitReady()
}

// launch runs vcoild.
func (n *node) launch() {
	t := n.t
	t.Helper()
	kc, err := env.UserKubeConfig("system:serviceaccount:kube-system:vcoil-daemon", "system:serviceaccounts")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(n.dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	hp, mp, sp := testenv.FreePort(t), testenv.FreePort(t), testenv.FreePort(t)
	n.health = fmt.Sprintf("http://127.0.0.1:%d", hp)
	n.state = fmt.Sprintf("http://127.0.0.1:%d", sp)
	n.metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", mp)
	args := append([]string{
		"--node-name", n.name,
		"--netns", n.ns.Path(),
		"--socket", n.socket,
		"--state-dir", filepath.Join(n.dir, "state"),
		"--kubeconfig", kubeconfig,
		"--health-addr", fmt.Sprintf("127.0.0.1:%d", hp),
		"--metrics-addr", fmt.Sprintf("127.0.0.1:%d", mp),
		"--state-addr", fmt.Sprintf("127.0.0.1:%d", sp),
		"--block-request-timeout", "20s",
	}, n.args...)
	n.proc = exec.Command(gobuild.Program(t, vcoildPackage), args...)
	n.proc.Stdout, n.proc.Stderr = n.log, n.log
	if err := n.proc.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	n.exited = exited
	proc := n.proc
	go func() { _ = proc.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = proc.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("log of vcoild on %s:\n%s", n.name, n.log.String())
		}
	})
}

// waitReady waits until vcoild is ready.
func (n *node) waitReady() {
	t := n.t
	t.Helper()
	exited := n.exited
	poll.Eventually(t, 30*time.Second, func() error {
		select {
		case <-exited:
			t.Fatalf("vcoild on %s exited:\n%s", n.name, n.log.String())
		default:
		}
		code, body := testenv.HTTPGet(n.health + "/readyz")
		if code != http.StatusOK {
			return fmt.Errorf("vcoild on %s not ready: %d %s", n.name, code, body)
		}
		return nil
	})
}

// kill stops vcoild with SIGKILL, as an OOM kill or a node crash would.
func (n *node) kill() {
	_ = n.proc.Process.Signal(syscall.SIGKILL)
	<-n.exited
}

// pod is a pod sandbox: a network namespace and a container ID.
type pod struct {
	ns        *netnstest.NS
	id        string
	namespace string
	name      string
	result    *current.Result
	// labels and ports go to the pod's Pod object (ensurePodObject).
	labels map[string]string
	ports  []corev1.ContainerPort
	// onNode is the node its Pod object is scheduled to ("" before one
	// exists), uid that object's UID, which ADD passes as K8S_POD_UID as
	// containerd and CRI-O do.
	onNode string
	uid    string
}

func newPod(t *testing.T, name string) *pod {
	t.Helper()
	return &pod{ns: netnstest.New(t, name), id: fmt.Sprintf("%032x", time.Now().UnixNano()) + name, namespace: "default", name: name}
}

func (n *node) runtimeConf(p *pod, portMappings []map[string]any) *libcni.RuntimeConf {
	rc := &libcni.RuntimeConf{
		ContainerID: p.id,
		NetNS:       p.ns.Path(),
		IfName:      "eth0",
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", p.namespace},
			{"K8S_POD_NAME", p.name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.id},
		},
	}
	if p.uid != "" {
		rc.Args = append(rc.Args, [2]string{"K8S_POD_UID", p.uid})
	}
	if portMappings != nil {
		rc.CapabilityArgs = map[string]any{"portMappings": portMappings}
	}
	return rc
}

// inNode runs f on a thread in the node's namespace: the CNI plugins run
// there, as the runtime of the node runs them (portmap's rules land there).
func (n *node) inNode(f func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return n.ns.Do(func() error { return f(ctx) })
}

// ensurePodObject makes the Pod object of p exist, scheduled to n, as a
// pod exists in the apiserver before its node's runtime calls CNI ADD
// (vcoild reads it for its network policies). It carries p's labels and
// ports; it has no status: no kubelet reports the pod's addresses.
func (n *node) ensurePodObject(p *pod) error {
	if p.onNode == n.name {
		return nil
	}
	ctx := context.Background()
	obj := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.namespace, Name: p.name, Labels: p.labels},
		Spec: corev1.PodSpec{NodeName: n.name, Containers: []corev1.Container{{
			Name: "c", Image: "none", Ports: p.ports,
		}}},
	}
	have := &corev1.Pod{}
	err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), have)
	if err == nil && have.Spec.NodeName == n.name {
		p.onNode, p.uid = n.name, string(have.UID)
		return nil
	}
	if err == nil {
		if err := env.Client.Delete(ctx, have, client.GracePeriodSeconds(0)); err != nil {
			return err
		}
	}
	if err := env.Client.Create(ctx, obj); err != nil {
		return fmt.Errorf("create the Pod object of %s: %w", p.name, err)
	}
	p.onNode, p.uid = n.name, string(obj.UID)
	n.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj, client.GracePeriodSeconds(0)) })
	return nil
}

// add runs CNI ADD for the pod and keeps its result.
func (n *node) add(p *pod, portMappings ...map[string]any) error {
	if err := n.ensurePodObject(p); err != nil {
		return err
	}
	return n.inNode(func(ctx context.Context) error {
		r, err := n.cni.AddNetworkList(ctx, n.conf, n.runtimeConf(p, portMappings))
		if err != nil {
			return err
		}
		res, err := current.NewResultFromResult(r)
		if err != nil {
			return err
		}
		p.result = res
		return nil
	})
}

func (n *node) mustAdd(p *pod, portMappings ...map[string]any) {
	n.t.Helper()
	if err := n.add(p, portMappings...); err != nil {
		n.t.Fatalf("ADD %s on %s: %v", p.name, n.name, err)
	}
}

func (n *node) del(p *pod) error {
	return n.inNode(func(ctx context.Context) error {
		return n.cni.DelNetworkList(ctx, n.conf, n.runtimeConf(p, nil))
	})
}

func (n *node) check(p *pod) error {
	return n.inNode(func(ctx context.Context) error {
		return n.cni.CheckNetworkList(ctx, n.conf, n.runtimeConf(p, nil))
	})
}

func (n *node) status() error {
	return n.inNode(func(ctx context.Context) error { return n.cni.GetStatusNetworkList(ctx, n.conf) })
}

func (n *node) gc(valid []*pod) error {
	var atts []types.GCAttachment
	for _, p := range valid {
		atts = append(atts, types.GCAttachment{ContainerID: p.id, IfName: "eth0"})
	}
	return n.inNode(func(ctx context.Context) error {
		return n.cni.GCNetworkList(ctx, n.conf, &libcni.GCArgs{ValidAttachments: atts})
	})
}

// ipv4 is the pod's IPv4 address from its ADD result.
func (p *pod) ipv4() netip.Addr {
	for _, ip := range p.result.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok && a.Unmap().Is4() {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

func (p *pod) ipv6() netip.Addr {
	for _, ip := range p.result.IPs {
		if a, ok := netip.AddrFromSlice(ip.Address.IP); ok && a.Is6() && !a.Is4In6() {
			return a
		}
	}
	return netip.Addr{}
}

// serve starts a TCP echo server inside ns on port; it stops with the test.
func serve(t *testing.T, ns *netnstest.NS, addr string) {
	t.Helper()
	var ln net.Listener
	ns.Run(func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256)
				n, _ := c.Read(buf)
				_, _ = c.Write(append([]byte("echo:"), buf[:n]...))
			}()
		}
	}()
}

// talk connects from ns to addr and exchanges a message.
func talk(ns *netnstest.NS, addr string) error {
	var conn net.Conn
	err := ns.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, 3*time.Second)
		return err
	})
	if err != nil {
		return fmt.Errorf("connect from %s to %s: %w", ns, addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := conn.Write([]byte("hello")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	k, err := conn.Read(buf)
	if err != nil {
		return fmt.Errorf("read from %s at %s: %w", addr, ns, err)
	}
	if got := string(buf[:k]); got != "echo:hello" {
		return fmt.Errorf("%s answered %q", addr, got)
	}
	return nil
}

func hostPort(a netip.Addr, port int) string { return net.JoinHostPort(a.String(), fmt.Sprint(port)) }

// metric reads one sample of vcoild's /metrics ("" when absent).
func (n *node) metric(line string) string {
	_, body := testenv.HTTPGet(n.metrics)
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, line+" ") {
			return strings.TrimPrefix(l, line+" ")
		}
	}
	return ""
}

// blocksOf lists the node's AddressBlocks.
func blocksOf(t *testing.T, node string) []vcoilv2.AddressBlock {
	t.Helper()
	var l vcoilv2.AddressBlockList
	if err := env.Client.List(context.Background(), &l, client.MatchingLabels{vcoilv2.LabelNode: node}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func createPool(t *testing.T, name string, bits int32, v4, v6 string) {
	t.Helper()
	p := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: bits, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To(v4), IPv6: ptr.To(v6)}}},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// jsonString is for messages.
func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func confFromBytes(s string) (*libcni.NetworkConfigList, error) {
	return libcni.ConfListFromBytes([]byte(s))
}

// podVeths lists the node-side veths of pods.
func (n *node) podVeths() []string {
	n.t.Helper()
	links, err := n.ns.Netlink().LinkList()
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, linux.HostIfPrefix) {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}
