// Package conntrack applies the connection tracking settings kube-proxy
// sets on a node, for nodes where vcoil replaces kube-proxy: the table size
// (nf_conntrack_max, with the hash table grown to match), the TCP
// established and CLOSE_WAIT timeouts, and optionally the UDP timeouts and
// TCP be-liberal. It writes a setting only when its value differs. It does
// not clean up conntrack entries: that is the service renderer's business.
package conntrack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// The settings, as paths under the file system root: the per-namespace
// sysctls under /proc/sys, and the conntrack module's hash size under /sys,
// which is global to the kernel.
const (
	keyMax              = "proc/sys/net/netfilter/nf_conntrack_max"
	keyHashSize         = "sys/module/nf_conntrack/parameters/hashsize"
	keyTCPEstablished   = "proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established"
	keyTCPCloseWait     = "proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait"
	keyTCPBeLiberal     = "proc/sys/net/netfilter/nf_conntrack_tcp_be_liberal"
	keyUDPTimeout       = "proc/sys/net/netfilter/nf_conntrack_udp_timeout"
	keyUDPStreamTimeout = "proc/sys/net/netfilter/nf_conntrack_udp_timeout_stream"
)

// Config holds the settings. Zero values leave a setting alone;
// DefaultConfig has kube-proxy's defaults.
type Config struct {
	// Netns is the path of the node's network namespace; empty means the
	// process's own. The timeouts are per namespace; the table size is
	// writable only in the kernel's initial namespace.
	Netns string
	// MaxPerCore and Min size the table: nf_conntrack_max = max(MaxPerCore
	// × CPUs, Min). MaxPerCore 0 leaves the table alone.
	MaxPerCore, Min int
	// CPUs is the number of CPUs the table is sized for; 0 means
	// runtime.NumCPU.
	CPUs int
	// TCPEstablishedTimeout, TCPCloseWaitTimeout, UDPTimeout and
	// UDPStreamTimeout are written in whole seconds.
	TCPEstablishedTimeout, TCPCloseWaitTimeout time.Duration
	UDPTimeout, UDPStreamTimeout               time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal to 1 (false leaves it).
	TCPBeLiberal bool
}

// DefaultConfig returns kube-proxy's defaults (constants.Conntrack*).
func DefaultConfig() Config {
	return Config{
		MaxPerCore:            constants.ConntrackMaxPerCore,
		Min:                   constants.ConntrackMin,
		TCPEstablishedTimeout: constants.ConntrackTCPEstablishedTimeout,
		TCPCloseWaitTimeout:   constants.ConntrackTCPCloseWaitTimeout,
		UDPTimeout:            constants.ConntrackUDPTimeout,
		UDPStreamTimeout:      constants.ConntrackUDPStreamTimeout,
		TCPBeLiberal:          constants.ConntrackTCPBeLiberal,
	}
}

// Max is the nf_conntrack_max cfg asks for; 0 means leave it alone.
func (cfg Config) Max() int {
	if cfg.MaxPerCore <= 0 {
		return 0
	}
	cpus := cfg.CPUs
	if cpus <= 0 {
		cpus = runtime.NumCPU()
	}
	return max(cfg.MaxPerCore*cpus, cfg.Min)
}

// Sysctl reads and writes kernel settings by path under a root.
type Sysctl interface {
	Read(key string) (string, error)
	Write(key, value string) error
}

// Files is a Sysctl over the files under root: "/" for the kernel's, a
// directory laid out the same way for tests.
func Files(root string) Sysctl { return files(root) }

type files string

func (f files) Read(key string) (string, error) {
	b, err := os.ReadFile(filepath.Join(string(f), key))
	return strings.TrimSpace(string(b)), err
}

func (f files) Write(key, value string) error {
	return os.WriteFile(filepath.Join(string(f), key), []byte(value), 0o644)
}

// Apply writes cfg's settings through sys, inside cfg.Netns (/proc/sys
// resolves against the calling thread's namespace). A per-namespace timeout
// that cannot be set is an error naming the sysctl. The table size is only
// writable in the kernel's initial namespace: elsewhere (vcoild in a node
// namespace, as in the lab) it is logged and left alone, as kube-proxy in a
// namespace must run with a MaxPerCore of 0.
func Apply(_ context.Context, cfg Config, sys Sysctl, log logr.Logger) error {
	if cfg.Netns == "" {
		return apply(cfg, sys, log)
	}
	if err := ns.WithNetNSPath(cfg.Netns, func(ns.NetNS) error { return apply(cfg, sys, log) }); err != nil {
		return fmt.Errorf("conntrack settings in network namespace %s: %w", cfg.Netns, err)
	}
	return nil
}

func apply(cfg Config, sys Sysctl, log logr.Logger) error {
	if m := cfg.Max(); m > 0 {
		if err := setMax(sys, m, log); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		key   string
		value int
	}{
		{keyTCPEstablished, seconds(cfg.TCPEstablishedTimeout)},
		{keyTCPCloseWait, seconds(cfg.TCPCloseWaitTimeout)},
		{keyUDPTimeout, seconds(cfg.UDPTimeout)},
		{keyUDPStreamTimeout, seconds(cfg.UDPStreamTimeout)},
		{keyTCPBeLiberal, boolInt(cfg.TCPBeLiberal)},
	} {
		if s.value == 0 {
			continue
		}
		if _, err := set(sys, s.key, s.value, log); err != nil {
			return err
		}
	}
	return nil
}

// setMax sets the table size and then, as kube-proxy does, grows the hash
// table to a quarter of it when it is smaller (the kernel's own ratio is
// then kept; it never shrinks it).
func setMax(sys Sysctl, value int, log logr.Logger) error {
	_, err := set(sys, keyMax, value, log)
	if notWritable(err) {
		log.Info("Leaving the conntrack table size alone: it is writable only in the initial network namespace",
			"sysctl", sysctlName(keyMax), "wanted", value, "error", err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	hashSize, err := readInt(sys, keyHashSize)
	if err != nil {
		return err
	}
	if hashSize >= value/4 {
		return nil
	}
	err = sys.Write(keyHashSize, strconv.Itoa(value/4))
	switch {
	case notWritable(err):
		log.Info("Leaving the conntrack hash size alone: it is not writable here",
			"setting", "/"+keyHashSize, "wanted", value/4, "error", err.Error())
		return nil
	case err != nil:
		return fmt.Errorf("set /%s to %d: %w", keyHashSize, value/4, err)
	}
	log.Info("Set the conntrack hash size", "setting", "/"+keyHashSize, "value", value/4, "was", hashSize)
	return nil
}

// set writes value to key when it holds another value and says whether it
// wrote.
func set(sys Sysctl, key string, value int, log logr.Logger) (bool, error) {
	current, err := readInt(sys, key)
	if err != nil {
		return false, err
	}
	if current == value {
		return false, nil
	}
	if err := sys.Write(key, strconv.Itoa(value)); err != nil {
		return false, fmt.Errorf("set sysctl %s to %d (was %d): %w", sysctlName(key), value, current, err)
	}
	log.Info("Set sysctl", "sysctl", sysctlName(key), "value", value, "was", current)
	return true, nil
}

func readInt(sys Sysctl, key string) (int, error) {
	s, err := sys.Read(key)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", sysctlName(key), err)
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("read %s: %q is not a number", sysctlName(key), s)
	}
	return v, nil
}

// notWritable recognises the kernel's refusals of nf_conntrack_max outside
// the initial namespace (a read-only file there) and of the hash size
// (EOPNOTSUPP), and a read-only /sys.
func notWritable(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EOPNOTSUPP)
}

// sysctlName turns a path under /proc/sys into the sysctl's dotted name,
// as operators know it; other paths stay paths.
func sysctlName(key string) string {
	if rest, ok := strings.CutPrefix(key, "proc/sys/"); ok {
		return strings.ReplaceAll(rest, "/", ".")
	}
	return "/" + key
}

func seconds(d time.Duration) int { return int(d / time.Second) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
