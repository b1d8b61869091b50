package suite

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

// Ports the agent serves on.
const (
	portTCP  = 8080
	portUDP  = 8081
	portHTTP = 8082
	// hostNetwork agents ("the VM") serve on ports unlikely to be taken.
	portNodeTCP = 18080
	// hostPort exposed by the hostPort pod.
	portHost = 30080
)

// world is the suite's deployment: agents on two nodes, hostNetwork agents
// on both, a pod with a hostPort, and services.
type world struct {
	ns       string
	nodeA    *corev1.Node
	nodeB    *corev1.Node
	a1, a2   *corev1.Pod // on node A
	b1       *corev1.Pod // on node B
	hostA    *corev1.Pod // hostNetwork on node A
	hostB    *corev1.Pod // hostNetwork on node B
	hostPort *corev1.Pod // on node A, hostPort portHost -> portTCP
}

// The world is deployed once and shared by every test: its hostNetwork
// agents and hostPort pod hold node ports, which a second deployment could
// not take while the first one's namespace terminates.
var (
	worldOnce sync.Once
	shared    *world
	worldErr  error
)

// deployWorld returns the suite's namespace and pods, deploying them on
// first use; removeWorld (from TestMain) deletes them.
func deployWorld(t *testing.T, k *cluster) *world {
	t.Helper()
	worldOnce.Do(func() {
		// A failure is kept for every later test.
		defer func() {
			if shared == nil && worldErr == nil {
				worldErr = fmt.Errorf("deploying the suite's pods failed; see the first test's log")
			}
		}()
		shared = newWorld(t, k)
	})
	if worldErr != nil {
		t.Fatal(worldErr)
	}
	return shared
}

// removeWorld deletes the suite's namespace and waits until it is gone.
func removeWorld(k *cluster) error {
	if shared == nil {
		return nil
	}
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: shared.ns}}
	if err := k.c.Delete(c, ns); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return poll.Until(c, 3*time.Minute, pollInterval, func(context.Context) error {
		err := k.c.Get(c, client.ObjectKeyFromObject(ns), ns)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("namespace %s still terminating (%v)", shared.ns, err)
	})
}

func newWorld(t *testing.T, k *cluster) *world {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes, err := schedulableNodes(c, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) < 2 {
		t.Fatalf("the suite needs two schedulable nodes, the cluster has %d", len(nodes))
	}
	w := &world{nodeA: &nodes[0], nodeB: &nodes[1]}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vcoil-e2e-"}}
	if err := k.c.Create(c, ns); err != nil {
		t.Fatal(err)
	}
	w.ns = ns.Name
	w.a1 = k.agentPod(t, w.ns, "a1", w.nodeA.Name, false, nil)
	w.a2 = k.agentPod(t, w.ns, "a2", w.nodeA.Name, false, nil)
	w.b1 = k.agentPod(t, w.ns, "b1", w.nodeB.Name, false, nil)
	w.hostA = k.agentPod(t, w.ns, "host-a", w.nodeA.Name, true, nil)
	w.hostB = k.agentPod(t, w.ns, "host-b", w.nodeB.Name, true, nil)
	w.hostPort = k.agentPod(t, w.ns, "hostport", w.nodeA.Name, false, []corev1.ContainerPort{
		{ContainerPort: portTCP, HostPort: portHost, Protocol: corev1.ProtocolTCP},
	})
	pods := []*corev1.Pod{w.a1, w.a2, w.b1, w.hostA, w.hostB, w.hostPort}
	for _, p := range pods {
		k.waitRunning(t, p)
	}
	return w
}

func schedulableNodes(c context.Context, k *cluster) ([]corev1.Node, error) {
	var l corev1.NodeList
	if err := k.c.List(c, &l); err != nil {
		return nil, err
	}
	var out []corev1.Node
	for _, n := range l.Items {
		if n.Spec.Unschedulable {
			continue
		}
		skip := false
		for _, taint := range n.Spec.Taints {
			if taint.Effect == corev1.TaintEffectNoSchedule {
				skip = true
			}
		}
		if !skip && ready(&n) {
			out = append(out, n)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// agentPod creates a pod running the agent's servers, pinned to node.
func (k *cluster) agentPod(t *testing.T, ns, name, node string, hostNetwork bool, ports []corev1.ContainerPort) *corev1.Pod {
	t.Helper()
	args := []string{"serve", "--tcp", fmt.Sprint(portTCP), "--udp", fmt.Sprint(portUDP), "--http", fmt.Sprint(portHTTP)}
	if hostNetwork {
		args = []string{"serve", "--tcp", fmt.Sprint(portNodeTCP)}
	}
	return k.createAgentPod(t, ns, name, node, hostNetwork, ports, args)
}

// createAgentPod creates a pod running the agent with args, pinned to node.
func (k *cluster) createAgentPod(t *testing.T, ns, name, node string, hostNetwork bool, ports []corev1.ContainerPort, args []string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "vcoil-e2e", "name": name}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			HostNetwork:                   hostNetwork,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{
				Name:            "agent",
				Image:           k.settings.agentImage,
				ImagePullPolicy: corev1.PullPolicy(k.settings.pullPolicy),
				Command:         []string{"/agent"},
				Args:            args,
				Ports:           ports,
			}},
		},
	}
	if err := k.c.Create(ctx(t, 30*time.Second), p); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return p
}

func (k *cluster) waitRunning(t *testing.T, p *corev1.Pod) {
	t.Helper()
	poll.Eventually(t, 3*time.Minute, func() error {
		if err := k.c.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			return fmt.Errorf("pod %s/%s is %s on %s: %s", p.Namespace, p.Name, p.Status.Phase, p.Spec.NodeName, podReason(p))
		}
		for _, cs := range p.Status.ContainerStatuses {
			if !cs.Ready {
				return fmt.Errorf("pod %s/%s: container %s not ready", p.Namespace, p.Name, cs.Name)
			}
		}
		return nil
	})
}

func podReason(p *corev1.Pod) string {
	var parts []string
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Message != "" {
			parts = append(parts, string(c.Type)+": "+c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil {
			parts = append(parts, cs.State.Waiting.Reason+": "+cs.State.Waiting.Message)
		}
	}
	return strings.Join(parts, "; ")
}

// exec runs a command in the pod's first container and returns its output.
func (k *cluster) exec(c context.Context, p *corev1.Pod, cmd ...string) (string, error) {
	req := k.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: p.Spec.Containers[0].Name, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(k.cfg, "POST", req.URL())
	if err != nil {
		return "", err
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(c, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	out := strings.TrimSpace(stdout.String() + " " + stderr.String())
	if err != nil {
		return out, fmt.Errorf("%s in %s/%s: %w: %s", strings.Join(cmd, " "), p.Namespace, p.Name, err, out)
	}
	return out, nil
}

// connect runs the agent's client in from, against addr, for a few
// attempts: the first packets of a new pod can race its routes' installation
// on other nodes.
func (k *cluster) connect(t *testing.T, from *corev1.Pod, proto, addr string) error {
	t.Helper()
	// Room for three attempts that time out after 3 s, a second apart.
	return poll.Until(t.Context(), 15*time.Second, time.Second, func(c context.Context) error {
		_, err := k.exec(c, from, "/agent", "connect", proto, addr, "--timeout", "3s")
		return err
	})
}

// podIP is the pod's primary address (status.podIP).
func podIP(p *corev1.Pod) netip.Addr {
	a, _ := netip.ParseAddr(p.Status.PodIP)
	return a
}

func hostPortAddr(a netip.Addr, port int) string {
	return netip.AddrPortFrom(a, uint16(port)).String()
}

// service creates a ClusterIP, NodePort or LoadBalancer service from port
// to targetPort, of the cluster's default family.
func (k *cluster) service(t *testing.T, ns, svcName string, selector map[string]string, port, target int, typ corev1.ServiceType, local bool) *corev1.Service {
	t.Helper()
	return k.serviceOf(t, nil, ns, svcName, selector, port, target, typ, local)
}

// serviceOf is service of family f alone (SingleStack), or of the
// cluster's default family when f is nil.
func (k *cluster) serviceOf(t *testing.T, f *family, ns, svcName string, selector map[string]string, port, target int, typ corev1.ServiceType, local bool) *corev1.Service {
	t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svcName},
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: selector,
			Ports:    []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: int32(port), TargetPort: intstr.FromInt(target)}},
		},
	}
	if local {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	if f != nil {
		s.Spec.IPFamilies = []corev1.IPFamily{f.k8s()}
		s.Spec.IPFamilyPolicy = ptr.To(corev1.IPFamilyPolicySingleStack)
	}
	if err := k.c.Create(ctx(t, 30*time.Second), s); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create service %s: %v", svcName, err)
	}
	return s
}

func mustAddr(s string) netip.Addr {
	a, _ := netip.ParseAddr(s)
	return a
}
