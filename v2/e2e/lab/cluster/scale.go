package cluster

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// The scale benchmark's hooks into the running lab: kwok, which keeps the
// simulated nodes Ready and their pods Running, runs in the control plane's
// namespace beside the apiserver, as a lab daemon (lab-down kills it with
// the rest).
const kwokName = "kwok"

// StartKwok runs the kwok controller with the stage configuration at
// config, managing the nodes annotated kwok.x-k8s.io/node=fake only: the
// lab's real nodes keep their kubelets.
func (c Config) StartKwok(bin, config string) error {
	if c.alive(kwokName) {
		return nil
	}
	return c.start(daemon{name: kwokName, netns: topology.ControlPlaneNetns, args: []string{bin,
		"--kubeconfig=" + c.AdminKubeconfig(),
		"--config=" + config,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		// Leases are the simulated nodes' heartbeat, as a kubelet's.
		"--node-lease-duration-seconds=40",
	}})
}

// StopKwok kills the kwok controller, if it runs.
func (c Config) StopKwok() error {
	pid, _, ok := readPidFile(c.path("pids", kwokName))
	if !ok || !c.alive(kwokName) {
		_ = os.Remove(c.path("pids", kwokName))
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop kwok %d: %w", pid, err)
	}
	if err := poll.Until(context.Background(), 10*time.Second, 50*time.Millisecond, func(context.Context) error {
		if c.alive(kwokName) {
			return fmt.Errorf("kwok %d still runs", pid)
		}
		return nil
	}); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return os.Remove(c.path("pids", kwokName))
}

// APIServerPID returns the PID of the lab's kube-apiserver.
func (c Config) APIServerPID() (int, error) {
	return c.daemonPID("kube-apiserver")
}

// EtcdPID returns the PID of the lab's etcd.
func (c Config) EtcdPID() (int, error) {
	return c.daemonPID("etcd")
}

func (c Config) daemonPID(name string) (int, error) {
	pid, _, ok := readPidFile(c.path("pids", name))
	if !ok || !c.alive(name) {
		return 0, fmt.Errorf("%s does not run (is the lab up?)", name)
	}
	return pid, nil
}

// NodeMountNS is the pinned mount namespace of a node (its /run, CNI
// directories and vcoild's socket).
func (c Config) NodeMountNS(n topology.Node) string { return c.mountNS(n) }
