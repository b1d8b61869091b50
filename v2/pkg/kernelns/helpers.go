package kernelns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FindLink returns the link called name, or nil and no error when the
// namespace has none: wiring and teardown treat a missing link as a state,
// not a failure.
func (n *Namespace) FindLink(name string) (netlink.Link, error) {
	l, err := n.NL.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up link %s in %s: %w", name, n.Path, err)
	}
	return l, nil
}

// Sysctl is a setting under /proc/sys. Key is a path
// ("net/ipv4/conf/vcoil0123456789/forwarding"), never dotted, because
// interface names may contain dots.
type Sysctl struct{ Key, Value string }

// SetSysctls writes the settings inside the namespace, in order. /proc/sys
// resolves against the calling thread's namespace, so this enters it
// (pkg/ns locks the thread and restores it).
func (n *Namespace) SetSysctls(sysctls ...Sysctl) error {
	return n.NS.Do(func(ns.NetNS) error {
		for _, s := range sysctls {
			if err := os.WriteFile(filepath.Join("/proc/sys", s.Key), []byte(s.Value), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", s.Key, s.Value, n.Path, err)
			}
		}
		return nil
	})
}

// ReadSysctl reads one setting inside the namespace, without the newline.
func (n *Namespace) ReadSysctl(key string) (string, error) {
	var value string
	err := n.NS.Do(func(ns.NetNS) error {
		b, err := os.ReadFile(filepath.Join("/proc/sys", key))
		value = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read sysctl %s in %s: %w", key, n.Path, err)
	}
	return value, nil
}

// IPNet converts a prefix to netlink's form.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// HostAddrs are a pod's addresses as its interface carries them: the /32
// and the /128 for the families it has. The /128 skips duplicate address
// detection (vcoild hands each address out once) and has no prefix route,
// so the pod's only on-link routes are the ones its dataplane adds.
func HostAddrs(ipv4, ipv6 netip.Addr) []*netlink.Addr {
	var a []*netlink.Addr
	if ipv4.IsValid() {
		a = append(a, &netlink.Addr{IPNet: IPNet(netip.PrefixFrom(ipv4, 32))})
	}
	if ipv6.IsValid() {
		a = append(a, &netlink.Addr{IPNet: IPNet(netip.PrefixFrom(ipv6, 128)), Flags: unix.IFA_F_NODAD | unix.IFA_F_NOPREFIXROUTE})
	}
	return a
}
