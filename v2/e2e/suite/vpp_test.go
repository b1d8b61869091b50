package suite

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

// vppNodes are the nodes whose dataplane is VPP and the file pattern of
// their VPP's PID ("{node}" standing for the node's name), as the lab
// tells them in lab.env; none on another cluster.
func vppNodes() (nodes []string, pidfile string) {
	for _, n := range strings.Split(os.Getenv("VCOIL_LAB_VPP_NODES"), ",") {
		if n != "" {
			nodes = append(nodes, n)
		}
	}
	return nodes, os.Getenv("VCOIL_LAB_VPP_PIDFILE")
}

// TestVPPRestart kills VPP under running pods on a VPP node, as a crash
// would: the node's supervisor starts it again, vcoild (which keeps
// running) finds the new VPP and makes the pods' interfaces, the node's
// set-up and the services again. The pods keep their addresses, and
// connections through services, from and to the node, work again.
func TestVPPRestart(t *testing.T) {
	k := need(t)
	const name = "VPP killed under running pods: pods keep their addresses, connections through services resume"
	nodes, pidfile := vppNodes()
	w := deployWorld(t, k)
	// The VPP node (node A, else node B in a mixed cluster), its pods and
	// the other node's.
	node, local, remote := w.nodeA, []*corev1.Pod{w.a1, w.a2}, []*corev1.Pod{w.b1}
	if !slices.Contains(nodes, node.Name) {
		node, local, remote = w.nodeB, []*corev1.Pod{w.b1}, []*corev1.Pod{w.a1, w.a2}
	}
	if !slices.Contains(nodes, node.Name) || pidfile == "" {
		listed(groupResilience, name, statusNotApplicable, fmt.Sprintf("neither %s nor %s runs VPP (make e2e LAB_DATAPLANE=vpp)", w.nodeA.Name, w.nodeB.Name))
		return
	}
	c := ctx(t, 6*time.Minute)
	record(t, groupResilience, name, byVcoil, func(t *testing.T) error {
		toB := k.service(t, w.ns, "vpp-restart-b", map[string]string{"name": remote[0].Name}, 80, portTCP, corev1.ServiceTypeClusterIP, false)
		toA := k.service(t, w.ns, "vpp-restart-a", map[string]string{"name": local[len(local)-1].Name}, 80, portTCP, corev1.ServiceTypeClusterIP, false)
		for _, s := range []*corev1.Service{toB, toA} {
			if err := poll.Until(c, time.Minute, pollInterval, func(c context.Context) error { return k.readyEndpoints(c, s) }); err != nil {
				return err
			}
		}
		flows := []struct {
			what string
			from *corev1.Pod
			addr string
		}{
			{"a pod of the node to a service of the other node's pod", local[0], toB.Spec.ClusterIP + ":80"},
			{"a pod of the node to a service of its own node's pod", local[0], toA.Spec.ClusterIP + ":80"},
			{"the other node's pod to a service of the node's pod", remote[0], toA.Spec.ClusterIP + ":80"},
			{"the other node's pod to the node's pod", remote[0], hostPortAddr(podIP(local[0]), portTCP)},
		}
		for _, f := range flows {
			if err := k.connect(t, f.from, "tcp", f.addr); err != nil {
				return fmt.Errorf("before VPP was killed: %s (%s): %w", f.what, f.addr, err)
			}
		}
		daemon, err := vcoildOn(c, k, node.Name)
		if err != nil {
			return err
		}
		before := map[string]string{}
		for _, p := range local {
			before[p.Name] = p.Status.PodIP
		}

		path := strings.ReplaceAll(pidfile, "{node}", node.Name)
		old, err := readPid(path)
		if err != nil {
			return err
		}
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill VPP (pid %d) on %s: %w", old, node.Name, err)
		}
		killed := time.Now()
		if err := poll.Until(c, time.Minute, pollInterval, func(context.Context) error {
			pid, err := readPid(path)
			if err == nil && pid == old {
				err = fmt.Errorf("VPP on %s has not been started again (pid %d in %s)", node.Name, pid, path)
			}
			return err
		}); err != nil {
			return err
		}
		for _, f := range flows {
			if err := poll.Until(c, 2*time.Minute, time.Second, func(c context.Context) error {
				_, err := k.exec(c, f.from, "/agent", "connect", "tcp", f.addr, "--timeout", "2s")
				return err
			}); err != nil {
				return fmt.Errorf("after VPP was killed: %s (%s): %w", f.what, f.addr, err)
			}
		}
		t.Logf("every flow worked again %.1f s after VPP was killed", time.Since(killed).Seconds())
		for _, p := range local {
			now := &corev1.Pod{}
			if err := k.c.Get(c, client.ObjectKeyFromObject(p), now); err != nil {
				return err
			}
			if now.Status.PodIP != before[p.Name] {
				return fmt.Errorf("pod %s changed its address from %s to %s", p.Name, before[p.Name], now.Status.PodIP)
			}
		}
		// vcoild kept running through it: it reconnected to the new VPP.
		after, err := vcoildOn(c, k, node.Name)
		if err != nil {
			return err
		}
		if after.UID != daemon.UID || restarts(after) != restarts(daemon) {
			return fmt.Errorf("vcoild on %s was restarted (it should have reconnected to the new VPP)", node.Name)
		}
		// A pod made after the restart works too.
		p := k.agentPod(t, w.ns, "after-vpp-restart", node.Name, false, nil)
		k.waitRunning(t, p)
		return k.connect(t, p, "tcp", toB.Spec.ClusterIP+":80")
	})
}

func readPid(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("VPP's PID: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("VPP's PID in %s: %w", path, err)
	}
	return pid, nil
}

// vcoildOn returns the vcoild pod of node.
func vcoildOn(c context.Context, k *cluster, node string) (*corev1.Pod, error) {
	var ds corev1.PodList
	if err := k.c.List(c, &ds, client.MatchingLabels{"app.kubernetes.io/name": "vcoild"}); err != nil {
		return nil, err
	}
	for i := range ds.Items {
		if ds.Items[i].Spec.NodeName == node && ds.Items[i].DeletionTimestamp.IsZero() {
			return &ds.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no vcoild pod on %s", node)
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}
