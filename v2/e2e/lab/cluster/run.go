package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// pathEnv is the PATH of every lab process: containerd finds runc and its
// shim there, the kubelet and kube-proxy find iptables, nft and mount.
const pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// run runs a command to completion (bounded by a minute) and returns its
// combined output; the error names the command and carries the output.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// runAll runs commands in order and stops at the first failure.
func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// inNetns prefixes a command so that it runs in a lab network namespace
// (only: the mount namespace stays the caller's, where `ip netns exec` would
// make a private one; see
// docs/background.md#kubernetes-inside-network-namespaces).
func inNetns(ns string, args ...string) []string {
	return append([]string{"nsenter", "--net=" + netnsPath(ns), "--"}, args...)
}

// ip runs `ip -n NS ...`.
func ip(ns string, args ...string) []string {
	return append([]string{"ip", "-n", ns}, args...)
}
