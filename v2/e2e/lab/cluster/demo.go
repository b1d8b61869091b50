package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/e2e/lab/render"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// The demo's namespace and ports. The pods serve on the agent's usual ports;
// the node agents (host network) on ports no node component uses.
const (
	demoNamespace = "vcoil-demo"
	nodeHTTPPort  = 18082
)

// demoManifests is the sample application: four agents spread over the
// nodes behind a Service, and an agent in every node's network namespace
// (a hostNetwork DaemonSet) to connect from and to the nodes.
func demoManifests() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: echo
  namespace: %[1]s
spec:
  replicas: 4
  selector:
    matchLabels: {app: echo}
  template:
    metadata:
      labels: {app: echo}
    spec:
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        labelSelector:
          matchLabels: {app: echo}
      terminationGracePeriodSeconds: 2
      containers:
      - name: agent
        image: %[2]s
        imagePullPolicy: Never
        args: [serve, --tcp, "%[3]d", --udp, "%[4]d", --http, "%[5]d"]
        readinessProbe:
          httpGet: {path: /hostname, port: %[5]d}
          periodSeconds: 2
---
apiVersion: v1
kind: Service
metadata:
  name: echo
  namespace: %[1]s
spec:
  selector: {app: echo}
  ports:
  - {name: tcp, port: %[3]d, protocol: TCP}
  - {name: udp, port: %[4]d, protocol: UDP}
  - {name: http, port: 80, targetPort: %[5]d, protocol: TCP}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-agent
  namespace: %[1]s
spec:
  selector:
    matchLabels: {app: node-agent}
  template:
    metadata:
      labels: {app: node-agent}
    spec:
      hostNetwork: true
      terminationGracePeriodSeconds: 2
      containers:
      - name: agent
        image: %[2]s
        imagePullPolicy: Never
        args: [serve, --http, "%[6]d"]
`, demoNamespace, render.AgentImage, topology.AgentTCPPort, topology.AgentUDPPort, topology.AgentHTTPPort, nodeHTTPPort)
}

// Demo deploys the sample application, waits for it, prints the
// connectivity matrix and how to look around. The lab stays up.
func (c Config) Demo(ctx context.Context) error {
	if !c.IsUp() {
		return fmt.Errorf("the lab is not up: make lab-up (or make demo)")
	}
	cl, _, err := c.Client()
	if err != nil {
		return err
	}
	done := c.step("sample application in namespace %s: 4 agents spread over the nodes, Service echo, an agent on every node", demoNamespace)
	objs, err := decodeYAML(demoManifests())
	if err != nil {
		return err
	}
	if err := apply(ctx, cl, objs); err != nil {
		return err
	}
	if err := waitDeployment(ctx, cl, demoNamespace, "echo", 3*time.Minute); err != nil {
		return c.failed(err, "node1-kubelet")
	}
	if err := waitDaemonSet(ctx, cl, demoNamespace, "node-agent", int32(c.Topology.Nodes), 2*time.Minute); err != nil {
		return c.failed(err, "node1-kubelet")
	}
	done()
	if err := c.Matrix(ctx); err != nil {
		return err
	}
	c.lookAround()
	return nil
}

// check is one cell of the matrix.
type check struct {
	from, to, proto string
	// execPod runs the agent; empty means the external host.
	execPod string
	target  string
}

// Matrix prints the connectivity matrix of the deployed sample application.
// It returns an error when a connection failed.
func (c Config) Matrix(ctx context.Context) error {
	cl, _, err := c.Client()
	if err != nil {
		return err
	}
	pods, err := readyPods(ctx, cl, "echo")
	if err != nil {
		return err
	}
	nodeAgents, err := readyPods(ctx, cl, "node-agent")
	if err != nil {
		return err
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range pods {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	nodeAgent := map[string]corev1.Pod{}
	for _, p := range nodeAgents {
		nodeAgent[p.Spec.NodeName] = p
	}
	var svc corev1.Service
	if err := cl.Get(ctx, client.ObjectKey{Namespace: demoNamespace, Name: "echo"}, &svc); err != nil {
		return err
	}
	src := pods[0]
	var sameNode, otherNode *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.Name == src.Name {
			continue
		}
		if p.Spec.NodeName == src.Spec.NodeName && sameNode == nil {
			sameNode = p
		}
		if p.Spec.NodeName != src.Spec.NodeName && otherNode == nil {
			otherNode = p
		}
	}
	if otherNode == nil || sameNode == nil {
		return fmt.Errorf("the sample pods are not spread over two nodes with two pods on one: %v", byNode)
	}
	hostPort := func(ip string, port int) string { return fmt.Sprintf("%s:%d", ip, port) }
	podLabel := func(p *corev1.Pod) string {
		return fmt.Sprintf("pod %s (%s, %s)", p.Name[len(p.Name)-5:], p.Spec.NodeName, p.Status.PodIP)
	}
	srcLabel := podLabel(&src)
	var checks []check
	for _, proto := range []struct {
		name string
		port int
	}{{"tcp", topology.AgentTCPPort}, {"udp", topology.AgentUDPPort}, {"http", topology.AgentHTTPPort}} {
		checks = append(checks,
			check{srcLabel, "same node: " + podLabel(sameNode), proto.name, src.Name, hostPort(sameNode.Status.PodIP, proto.port)},
			check{srcLabel, "other node: " + podLabel(otherNode), proto.name, src.Name, hostPort(otherNode.Status.PodIP, proto.port)},
		)
	}
	checks = append(checks,
		check{srcLabel, "Service echo " + svc.Spec.ClusterIP, "tcp", src.Name, hostPort(svc.Spec.ClusterIP, topology.AgentTCPPort)},
		check{srcLabel, "Service echo " + svc.Spec.ClusterIP, "udp", src.Name, hostPort(svc.Spec.ClusterIP, topology.AgentUDPPort)},
		check{srcLabel, "Service echo " + svc.Spec.ClusterIP, "http", src.Name, hostPort(svc.Spec.ClusterIP, 80)},
		check{srcLabel, "echo.vcoil-demo.svc (DNS)", "http", src.Name, "echo." + demoNamespace + ".svc." + topology.ClusterDomain + ":80"},
	)
	for _, n := range c.Topology.NodeList() {
		where := "other node"
		if n.Name == src.Spec.NodeName {
			where = "own node"
		}
		checks = append(checks, check{srcLabel, fmt.Sprintf("%s %s (%s)", where, n.Name, n.IP), "http", src.Name, hostPort(n.IP.String(), nodeHTTPPort)})
	}
	for _, n := range c.Topology.NodeList() {
		agent, ok := nodeAgent[n.Name]
		if !ok {
			continue
		}
		for _, target := range []*corev1.Pod{&src, otherNode} {
			checks = append(checks, check{"node " + n.Name + " (host network)", podLabel(target), "http", agent.Name, hostPort(target.Status.PodIP, topology.AgentHTTPPort)})
		}
	}
	ext := topology.ExternalIP.String()
	checks = append(checks,
		check{srcLabel, "external host " + ext, "http", src.Name, hostPort(ext, topology.AgentHTTPPort)},
		check{srcLabel, "external host " + ext, "udp", src.Name, hostPort(ext, topology.AgentUDPPort)},
		check{"external host " + ext, podLabel(otherNode), "http", "", hostPort(otherNode.Status.PodIP, topology.AgentHTTPPort)},
	)

	fmt.Fprintf(c.Out, "\nConnectivity matrix (each cell: agent connect PROTO HOST:PORT --timeout 2s, run with kubectl exec):\n\n")
	tw := tabwriter.NewWriter(c.Out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tTO\tPROTO\tRESULT\tANSWER")
	failed := 0
	for _, ch := range checks {
		answer, err := c.connect(ctx, ch)
		result := "ok"
		if err != nil {
			result, failed = "FAIL", failed+1
			answer = err.Error()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ch.from, ch.to, ch.proto, result, answer)
	}
	tw.Flush()
	fmt.Fprintf(c.Out, "\n%d passed, %d failed\n", len(checks)-failed, failed)
	if failed > 0 {
		return fmt.Errorf("%d connections failed", failed)
	}
	return nil
}

// connect runs the agent's client for one cell and summarises its answer.
func (c Config) connect(ctx context.Context, ch check) (string, error) {
	agentArgs := []string{"connect", ch.proto, ch.target, "--timeout", "2s"}
	var cmd *exec.Cmd
	if ch.execPod == "" {
		cmd = exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + netnsPath(topology.ExternalNetns), "--", c.Agent}, agentArgs...)...)
	} else {
		cmd = exec.CommandContext(ctx, c.path("kubectl"), append([]string{"-n", demoNamespace, "exec", ch.execPod, "--", "/agent"}, agentArgs...)...)
	}
	out, err := cmd.CombinedOutput()
	text := strings.TrimSpace(string(out))
	if err != nil {
		if i := strings.LastIndex(text, "\n"); i >= 0 {
			text = text[i+1:]
		}
		return "", fmt.Errorf("%s", text)
	}
	if ch.proto == "http" {
		var w struct{ Hostname, Client string }
		if json.Unmarshal([]byte(text), &w) == nil && w.Hostname != "" {
			return fmt.Sprintf("served by %s, saw client %s", w.Hostname, w.Client), nil
		}
	}
	return "echo: " + text, nil
}

func readyPods(ctx context.Context, cl client.Client, app string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := cl.List(ctx, &list, client.InNamespace(demoNamespace), client.MatchingLabels{"app": app}); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no running %s pods in %s: make demo deploys them", app, demoNamespace)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Spec.NodeName != out[j].Spec.NodeName {
			return out[i].Spec.NodeName < out[j].Spec.NodeName
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func (c Config) lookAround() {
	fmt.Fprintf(c.Out, `
Look around (the lab stays up until make demo-down):
  make lab-kubectl ARGS="get nodes -o wide"
  make lab-kubectl ARGS="get addresspools,addressblocks"
  make lab-kubectl ARGS="-n %[1]s get pods,svc -o wide"
  make lab-kubectl ARGS="-n %[1]s exec deploy/echo -- /agent connect http %[2]s:%[3]d"
  make lab-kubectl ARGS="-n kube-system logs ds/vcoil-daemon"
  make lab-vcoil ARGS="pools"                         (kubectl vcoil: docs/kubectl-vcoil.md)
  make lab-vcoil ARGS="node node1"
  make lab-vcoil ARGS="trace %[1]s/POD svc/%[1]s/echo:8080"
  %[4]s get pods -A -o wide
  ip netns exec %[5]s %[6]s --kubeconfig %[7]s get pods -A
  ip -n %[8]s route       (the fabric's routes to the pod blocks)
  make demo-down          (removes the lab)
`, demoNamespace, topology.ExternalIP, topology.AgentHTTPPort, c.path("kubectl"), topology.ControlPlaneNetns, c.kubectl(), c.AdminKubeconfig(), topology.FabricNetns)
}
