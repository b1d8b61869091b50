package scale

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProbeResult is what one CNI probe measured: the time of each ADD and
// DEL, in milliseconds, in order.
type ProbeResult struct {
	AddMS []float64 `json:"add_ms"`
	DelMS []float64 `json:"del_ms"`
}

// ProbeNamespace holds the probe's Pod objects. vcoild reads a pod before
// its ADD returns (its policies are in the dataplane first), so each
// sandbox the probe wires has its Pod, bound to the measured node. Their
// RuntimeClass names a handler that the node's containerd does not have:
// the kubelet fails each sandbox before CNI, so the probe is the only
// runtime that wires them, while vcoild sees an ordinary local pod.
const (
	ProbeNamespace    = "vcoil-scale-cni"
	ProbeRuntimeClass = "vcoil-scale-probe"
)

// ProbePodName is the i-th probe pod of a run.
func ProbePodName(run string, i int) string { return fmt.Sprintf("probe-%s-%d", run, i) }

// RunCNIProbe plays a container runtime on the node it runs on (the lab
// runs it in the node's network and mount namespaces): count times, a
// fresh network namespace, CNI ADD through libcni with the node's conflist
// and plugin directory, CNI DEL, the namespace removed. Each is timed as
// the runtime would see it. uids are the probe pods' UIDs, passed as
// containerd and CRI-O pass them (K8S_POD_UID); a missing one is left out.
func RunCNIProbe(ctx context.Context, run string, count int, uids []string, confDir, binDir string) (ProbeResult, error) {
	var res ProbeResult
	files, err := filepath.Glob(filepath.Join(confDir, "*.conflist"))
	if err != nil || len(files) == 0 {
		return res, fmt.Errorf("no conflist in %s (%v)", confDir, err)
	}
	conf, err := libcni.ConfListFromFile(files[0])
	if err != nil {
		return res, fmt.Errorf("conflist %s: %w", files[0], err)
	}
	cacheDir, err := os.MkdirTemp("/run", "vcoil-scale-cni-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(cacheDir)
	cni := libcni.NewCNIConfigWithCacheDir([]string{binDir}, cacheDir, nil)
	for i := range count {
		pod := ProbePodName(run, i)
		nsPath, err := newNetns("vcoil-scale-" + pod)
		if err != nil {
			return res, err
		}
		id := make([]byte, 32)
		_, _ = rand.Read(id)
		rt := &libcni.RuntimeConf{
			ContainerID: hex.EncodeToString(id),
			NetNS:       nsPath,
			IfName:      "eth0",
			Args: [][2]string{
				{"IgnoreUnknown", "1"},
				{"K8S_POD_NAMESPACE", ProbeNamespace},
				{"K8S_POD_NAME", pod},
				{"K8S_POD_INFRA_CONTAINER_ID", hex.EncodeToString(id)},
			},
		}
		if i < len(uids) && uids[i] != "" {
			rt.Args = append(rt.Args, [2]string{"K8S_POD_UID", uids[i]})
		}
		start := time.Now()
		_, addErr := cni.AddNetworkList(ctx, conf, rt)
		add := time.Since(start)
		start = time.Now()
		delErr := cni.DelNetworkList(ctx, conf, rt)
		del := time.Since(start)
		nsErr := removeNetns(nsPath)
		switch {
		case addErr != nil:
			return res, fmt.Errorf("ADD %d: %w", i, addErr)
		case delErr != nil:
			return res, fmt.Errorf("DEL %d: %w", i, delErr)
		case nsErr != nil:
			return res, nsErr
		}
		res.AddMS = append(res.AddMS, float64(add.Microseconds())/1000)
		res.DelMS = append(res.DelMS, float64(del.Microseconds())/1000)
	}
	return res, nil
}

// cniProbe runs the probe on a node of the lab: the lab program itself,
// in the node's network and mount namespaces.
func (s *Sim) cniProbe(ctx context.Context, run string, count int) (ProbeResult, error) {
	var res ProbeResult
	var uids []string
	n := s.o.Node
	for i := range count {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ProbeNamespace, Name: ProbePodName(run, i), Labels: benchLabels(nil)},
			Spec: corev1.PodSpec{
				NodeName:         n.Name,
				RuntimeClassName: ptr.To(ProbeRuntimeClass),
				Containers:       []corev1.Container{{Name: "pause", Image: "vcoil-pause:lab", ImagePullPolicy: corev1.PullNever}},
			},
		}
		if err := createRetry(ctx, s.o.Client, p); err != nil {
			return res, err
		}
		if p.UID == "" {
			// A retried create that had landed: the pod is there, its
			// UID unread.
			if err := s.o.Client.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return res, fmt.Errorf("read probe pod %s: %w", p.Name, err)
			}
		}
		uids = append(uids, string(p.UID))
	}
	defer func() {
		_ = s.o.Client.DeleteAllOf(context.WithoutCancel(ctx), &corev1.Pod{}, client.InNamespace(ProbeNamespace), client.GracePeriodSeconds(0))
	}()
	out, err := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+n.Netns, "--mount="+s.o.Lab.NodeMountNS(n), "--",
		s.o.Self, "cni-probe", "--run", run, "--count", fmt.Sprint(count), "--uids", strings.Join(uids, ",")).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return res, fmt.Errorf("CNI probe on %s: %w: %s", n.Name, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return res, fmt.Errorf("CNI probe on %s: %w", n.Name, err)
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return res, fmt.Errorf("CNI probe on %s: %w: %s", n.Name, err, out)
	}
	return res, nil
}

// netnsDir is where the node's runtime keeps its pods' network namespaces,
// by the path containerd gives them: vcoild's container sees the node's
// directory there (its hostPath), not under /run.
const netnsDir = "/var/run/netns"

// newNetns makes a network namespace pinned at netnsDir/name as containerd
// does: a bind mount of a thread's namespace on a file of the existing
// directory. ip netns add would first turn the directory into a mount
// point of its own, which the bind mounts under it would then not reach
// vcoild's container through (its hostPath sees the directory beneath):
// neither the probe's namespaces nor later pods' would open there.
func newNetns(name string) (string, error) {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(netnsDir, name)
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return "", fmt.Errorf("network namespace file %s: %w", path, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		// The thread enters a new namespace and is thrown away after (it
		// is never unlocked), so no other goroutine runs in it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare a network namespace: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("bind %s on %s: %w", src, path, err)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// removeNetns unmounts and removes a namespace newNetns made.
func removeNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	return os.Remove(path)
}
