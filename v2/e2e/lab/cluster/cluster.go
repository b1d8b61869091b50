// Package cluster brings the local cluster up and down: network namespaces
// joined by a fabric, a control plane, worker nodes each with their own
// containerd, kubelet and mount namespace (and kube-proxy, when the lab runs
// it instead of vcoil's service renderer), an external host, vcoil from its
// manifests and cluster DNS; and it removes all of that again,
// checking that nothing is left. Nothing it does touches the machine's root
// network namespace: links, addresses, routes, sysctls and firewall rules are
// made inside the lab's namespaces only.
package cluster

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// Config says where the lab keeps its state and finds its programs.
type Config struct {
	// StateDir holds everything of the running lab; lab-down removes it.
	StateDir string
	// LogDir receives the components' logs; it is kept after lab-down.
	LogDir   string
	Topology topology.Topology
	// KubernetesDir holds kube-apiserver, kubelet, ... and kubectl.
	KubernetesDir string
	Etcd          string
	// Agent is the network test agent, run on the external host.
	Agent string
	// Self is the lab program (it runs the fabric's router).
	Self string
	// ImagesDir holds the image tarballs to import into every node.
	ImagesDir string
	// ExtraImages are more docker-archive tarballs to import into every
	// node (images an e2e or conformance suite needs).
	ExtraImages []string
	// Overlay is vcoil's kustomize overlay to install.
	Overlay string
	// CoreDNSReplicas of the cluster DNS.
	CoreDNSReplicas int
	// KubeProxy runs kube-proxy on every node and turns vcoil's service
	// renderer off (vcoild --service-proxy=false); otherwise vcoil renders
	// services and no kube-proxy runs. Never both on one node.
	KubeProxy bool
	// VPPBin is the VPP binary that the VPP nodes run (Topology.Dataplanes).
	VPPBin string
	// VPPServices is the VPP nodes' service renderer (vcoild
	// --vpp-service-renderer): nat44 (empty: vcoild's default) or cnat,
	// which also gets the IPv6 service CIDR of a dual-stack lab.
	VPPServices string
	Out         io.Writer
}

// Layout of the state directory.
func (c Config) path(elem ...string) string {
	return filepath.Join(append([]string{c.StateDir}, elem...)...)
}

func (c Config) pki(name string) string         { return c.path("pki", name) }
func (c Config) nodeDir(n topology.Node) string { return c.path("nodes", n.Name) }

// mountNSDir is a private bind mount holding the pinned namespaces: the
// nodes' mount namespaces, and the UTS namespaces that give the nodes and the
// external host their host names.
func (c Config) mountNSDir() string             { return c.path("mntns") }
func (c Config) mountNS(n topology.Node) string { return c.path("mntns", n.Name) }
func (c Config) utsNS(host string) string       { return c.path("mntns", host+".uts") }
func (c Config) pidDir() string                 { return c.path("pids") }
func (c Config) createdDirsFile() string        { return c.path("created-dirs") }
func (c Config) upMarker() string               { return c.path("up") }
func (c Config) proxyFile() string              { return c.path("service-proxy") }
func (c Config) dataplanesFile() string         { return c.path("dataplanes") }
func (c Config) ipFamilyFile() string           { return c.path("ip-family") }
func (c Config) AdminKubeconfig() string        { return c.path("admin.kubeconfig") }
func (c Config) EnvFile() string                { return c.path("lab.env") }
func (c Config) kubectl() string                { return filepath.Join(c.KubernetesDir, "kubectl") }
func (c Config) bin(name string) string         { return filepath.Join(c.KubernetesDir, name) }
func netnsPath(name string) string              { return "/run/netns/" + name }
func cgroupRoot(n topology.Node) string         { return "/" + topology.Prefix + "-" + n.Name }
func (c Config) logFile(name string) string     { return filepath.Join(c.LogDir, name+".log") }

// say prints one progress line.
func (c Config) say(format string, args ...any) {
	fmt.Fprintf(c.Out, "==> "+format+"\n", args...)
}

// step prints a progress line and, when done is called, its duration.
func (c Config) step(format string, args ...any) (done func()) {
	start := time.Now()
	c.say(format, args...)
	return func() {
		fmt.Fprintf(c.Out, "    (%.1fs)\n", time.Since(start).Seconds())
	}
}

// IsUp tells whether a completed lab-up left its marker.
func (c Config) IsUp() bool {
	_, err := os.Stat(c.upMarker())
	return err == nil
}

// ControlPlaneNetnsPath is where kubectl and tests reach the apiserver from.
func ControlPlaneNetnsPath() string { return netnsPath(topology.ControlPlaneNetns) }
