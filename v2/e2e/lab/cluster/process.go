package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vcoil/vcoil/v2/e2e/lab/procstat"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// daemon is a long-running process of the lab.
type daemon struct {
	// name names its pid file and log ("etcd", "node1-kubelet").
	name string
	// netns is the lab network namespace it runs in; mountNS, when set, the
	// pinned mount namespace of its node.
	netns, mountNS string
	// uts, when set, is a pinned UTS namespace (the node's host name).
	uts  string
	args []string
	env  []string
}

// start runs d in the background, in a session of its own (so that it
// outlives lab-up), and records its PID with its start time, so that a PID
// reused later is never mistaken for it.
func (c Config) start(d daemon) error {
	args := []string{"--net=" + netnsPath(d.netns)}
	if d.mountNS != "" {
		args = append(args, "--mount="+d.mountNS)
	}
	if d.uts != "" {
		args = append(args, "--uts="+d.uts)
	}
	args = append(append(args, "--"), d.args...)
	logf, err := os.OpenFile(c.logFile(d.name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", args...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append([]string{pathEnv, "HOME=/root", "LC_ALL=C"}, d.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", d.name, err)
	}
	pid := cmd.Process.Pid
	st, err := startTime(pid)
	if err != nil {
		return fmt.Errorf("%s exited at once (see %s)", d.name, c.logFile(d.name))
	}
	if err := os.WriteFile(filepath.Join(c.pidDir(), d.name), []byte(fmt.Sprintf("%d %d\n", pid, st)), 0o644); err != nil {
		return err
	}
	// Reap it if it dies while lab-up still runs; after that, init does.
	go func() { _ = cmd.Wait() }()
	return nil
}

// alive tells whether the daemon recorded under name still runs.
func (c Config) alive(name string) bool {
	pid, st, ok := readPidFile(filepath.Join(c.pidDir(), name))
	if !ok {
		return false
	}
	now, err := startTime(pid)
	return err == nil && now == st && !isZombie(pid)
}

func readPidFile(path string) (pid int, start uint64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil {
		return 0, 0, false
	}
	return pid, start, true
}

func startTime(pid int) (uint64, error) {
	f, err := procstat.Fields(pid)
	if err != nil || len(f) < 20 {
		return 0, fmt.Errorf("no process %d", pid)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

func isZombie(pid int) bool {
	f, err := procstat.Fields(pid)
	return err != nil || len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

func parentOf(pid int) int {
	f, err := procstat.Fields(pid)
	if err != nil || len(f) < 2 {
		return 0
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

// nsInode returns the inode of a namespace file (/run/netns/X, a pin, or
// /proc/PID/ns/net).
func nsInode(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return st.Ino, true
}

// recordNamespaces writes the inodes of the lab's network and mount
// namespaces to the state directory, so that their processes are found even
// when a namespace's name is already gone.
func (c Config) recordNamespaces() error {
	var lines []string
	for _, p := range c.namespaceFiles() {
		if ino, ok := nsInode(p); ok {
			lines = append(lines, strconv.FormatUint(ino, 10))
		}
	}
	old, _ := os.ReadFile(c.path("ns-inodes"))
	return os.WriteFile(c.path("ns-inodes"), append(old, []byte(strings.Join(lines, "\n")+"\n")...), 0o644)
}

func (c Config) namespaceFiles() []string {
	nets, _ := filepath.Glob("/run/netns/" + topology.Prefix + "-*")
	pins, _ := filepath.Glob(filepath.Join(c.mountNSDir(), "*"))
	return append(nets, pins...)
}

// labInodes are the namespaces whose processes belong to the lab.
func (c Config) labInodes() map[uint64]bool {
	set := map[uint64]bool{}
	for _, p := range c.namespaceFiles() {
		if ino, ok := nsInode(p); ok {
			set[ino] = true
		}
	}
	b, _ := os.ReadFile(c.path("ns-inodes"))
	for _, f := range strings.Fields(string(b)) {
		if ino, err := strconv.ParseUint(f, 10, 64); err == nil {
			set[ino] = true
		}
	}
	return set
}

// labProcess is a process of the lab and why it counts as one.
type labProcess struct {
	pid  int
	comm string
	why  string
}

func (p labProcess) String() string { return fmt.Sprintf("%d (%s, %s)", p.pid, p.comm, p.why) }

// labProcesses finds every live process of the lab: the recorded daemons,
// everything in a lab network or mount namespace (containerd's shims,
// hostNetwork pods), and everything in a node's cgroup tree (the pods). The
// caller and its ancestors are never included.
func (c Config) labProcesses() []labProcess {
	inodes := c.labInodes()
	skip := map[int]bool{}
	for p := os.Getpid(); p > 1; p = parentOf(p) {
		skip[p] = true
	}
	found := map[int]string{}
	pidfiles, _ := filepath.Glob(filepath.Join(c.pidDir(), "*"))
	for _, f := range pidfiles {
		if pid, st, ok := readPidFile(f); ok {
			if now, err := startTime(pid); err == nil && now == st {
				found[pid] = "recorded as " + filepath.Base(f)
			}
		}
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		if _, ok := found[pid]; ok {
			continue
		}
		for _, ns := range []string{"net", "mnt"} {
			if ino, ok := nsInode(fmt.Sprintf("/proc/%d/ns/%s", pid, ns)); ok && inodes[ino] {
				found[pid] = "in a lab " + ns + " namespace"
			}
		}
		if _, ok := found[pid]; ok {
			continue
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && strings.Contains(string(b), ":/"+topology.Prefix+"-") {
			found[pid] = "in a lab cgroup"
		}
	}
	var out []labProcess
	for pid, why := range found {
		if skip[pid] || isZombie(pid) {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out = append(out, labProcess{pid: pid, comm: strings.TrimSpace(string(comm)), why: why})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// killAll kills the lab's processes until none is left, for at most 15 s,
// and returns those still there.
func (c Config) killAll() []labProcess {
	_ = poll.Until(context.Background(), 15*time.Second, 200*time.Millisecond, func(context.Context) error {
		procs := c.labProcesses()
		if len(procs) == 0 {
			return nil
		}
		for _, p := range procs {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		return fmt.Errorf("%d processes left", len(procs))
	})
	return c.labProcesses()
}

// cgroupDirs returns the lab's cgroups: the nodes' roots in every hierarchy.
func cgroupDirs() []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + topology.Prefix + "-*")
	return dirs
}

// createNodeCgroups makes the node's cgroupRoot in every hierarchy (the
// kubelet requires it to exist); cpuset needs its CPUs and memory nodes
// copied from the parent before anything can join it.
func createNodeCgroups(n topology.Node) error {
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		if fi, err := os.Stat(h); err != nil || !fi.IsDir() {
			continue
		}
		dir := filepath.Join(h, cgroupRoot(n))
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %w", dir, err)
				}
			}
		}
	}
	return nil
}

// removeCgroupTree removes a cgroup and its children, deepest first.
func removeCgroupTree(dir string) error {
	var dirs []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	var last error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !os.IsNotExist(err) {
			last = fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return last
}
