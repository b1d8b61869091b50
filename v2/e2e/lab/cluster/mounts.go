package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// nodePaths are the paths that differ per node: in a node's mount namespace
// each is a bind mount of a directory of the node in the state directory.
// They are the hostPaths of vcoil's DaemonSet (the CNI binary and
// configuration directories, vcoild's state; /run, with vcoild's socket and
// the pods' network namespaces, is a tmpfs of its own) and the runtime's
// and kubelet's state.
var nodePaths = []struct{ target, dir string }{
	{"/var/lib/kubelet", "kubelet"},
	{"/var/lib/containerd", "containerd"},
	{"/var/lib/vcoil", "vcoil"},
	{"/var/log/pods", "log/pods"},
	{"/var/log/containers", "log/containers"},
	{"/opt/cni/bin", "cni/bin"},
	{"/etc/cni/net.d", "cni/net.d"},
	{"/lib/modules", "modules"},
}

// ensureMountpoints creates the bind mount targets that the machine lacks
// and records each directory it made, so that lab-down removes exactly those.
func (c Config) ensureMountpoints() error {
	f, err := os.OpenFile(c.createdDirsFile(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, p := range nodePaths {
		var missing []string
		for d := p.target; d != "/"; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err == nil {
				break
			}
			missing = append([]string{d}, missing...)
		}
		for _, d := range missing {
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
			if _, err := fmt.Fprintln(f, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// createdDirs returns the directories lab-up made on the machine, newest
// first.
func (c Config) createdDirs() []string {
	b, err := os.ReadFile(c.createdDirsFile())
	if err != nil {
		return nil
	}
	lines := strings.Fields(string(b))
	for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
		lines[i], lines[j] = lines[j], lines[i]
	}
	return lines
}

// createNodeMountNS makes the node's mount namespace, pinned to a file in
// the state directory so that containerd, the kubelet and kube-proxy all
// join the same one (a private mount namespace per process would hide the
// kubelet's volume mounts from runc). In it: a tmpfs on /run, the node's
// directories bound over nodePaths, all shared, so that the mounts the
// runtime makes later (pod network namespaces under /run/netns) propagate
// into containers that mount them with HostToContainer. Mounts made in it
// never reach the machine's namespace, and vanish with it.
func (c Config) createNodeMountNS(n topology.Node) error {
	dir := c.nodeDir(n)
	for _, p := range nodePaths {
		if err := os.MkdirAll(filepath.Join(dir, p.dir), 0o755); err != nil {
			return err
		}
	}
	pin := c.mountNS(n)
	if err := os.WriteFile(pin, nil, 0o600); err != nil {
		return err
	}
	if _, err := run("unshare", "--mount="+pin, "--propagation", "private", "true"); err != nil {
		return err
	}
	var script strings.Builder
	// Copies of other namespaces' mounts would keep those namespaces alive
	// as long as the node's: drop them (in this namespace only).
	fmt.Fprintf(&script, "for m in $(awk '$5 ~ \"^/run/netns/.\" {print $5}' /proc/self/mountinfo); do umount -l \"$m\" || true; done\n")
	fmt.Fprintf(&script, "umount -l %s || true\n", c.mountNSDir())
	fmt.Fprintf(&script, "mount -t tmpfs -o mode=0755,size=512m vcoil-lab-run /run\nmkdir -p /run/netns /run/lock\n")
	for _, p := range nodePaths {
		fmt.Fprintf(&script, "mount --bind %s %s\n", filepath.Join(dir, p.dir), p.target)
	}
	// Shared from / down, as on a host booted by systemd: containerd
	// checks the propagation of a hostPath's mount without resolving the
	// /var/run symlink, so it looks at /.
	fmt.Fprintf(&script, "mount --make-rshared /\n")
	_, err := run("nsenter", "--mount="+pin, "--", "/bin/sh", "-ec", script.String())
	return err
}

// pinUTS makes a UTS namespace with the given host name, pinned to a file,
// so that a node's processes (and its hostNetwork pods) see the node's name
// as their host name, as on a real node.
func (c Config) pinUTS(host string) error {
	pin := c.utsNS(host)
	if err := os.WriteFile(pin, nil, 0o600); err != nil {
		return err
	}
	_, err := run("unshare", "--uts="+pin, "hostname", host)
	return err
}

// prepareMountNSDir makes the directory of the pins a private mount (a
// mount namespace can only be pinned on one).
func (c Config) prepareMountNSDir() error {
	if err := os.MkdirAll(c.mountNSDir(), 0o755); err != nil {
		return err
	}
	return runAll(
		[]string{"mount", "--bind", c.mountNSDir(), c.mountNSDir()},
		[]string{"mount", "--make-private", c.mountNSDir()},
	)
}

// mountPoint is one line of /proc/self/mountinfo.
type mountPoint struct{ target, fstype, source string }

func mounts() ([]mountPoint, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo reads the format of proc(5)'s mountinfo: the mount point
// is the fifth field, the file system type and source follow the "-".
func parseMountinfo(r io.Reader) ([]mountPoint, error) {
	var out []mountPoint
	s := bufio.NewScanner(r)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		out = append(out, mountPoint{target: unescape(fields[4]), fstype: fields[sep+1], source: fields[sep+2]})
	}
	return out, s.Err()
}

func unescape(s string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// labMounts returns the mounts of the machine's namespace that belong to
// the lab: anything under the state directory or a lab network namespace.
func (c Config) labMounts() ([]string, error) {
	ms, err := mounts()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if isUnder(m.target, c.StateDir) || strings.HasPrefix(m.target, "/run/netns/"+topology.Prefix+"-") {
			out = append(out, m.target)
		}
		for _, p := range nodePaths {
			if m.target == p.target {
				out = append(out, m.target)
			}
		}
	}
	return out, nil
}

func isUnder(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// errLeftovers is returned when lab-down could not remove everything.
var errLeftovers = errors.New("the lab left things behind")
