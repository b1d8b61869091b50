package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// namespace is an open network namespace with a netlink handle in it, and
// the helpers the wiring needs. Netlink work goes through the handle; only
// sysctls, which /proc/sys resolves against the calling thread's namespace,
// enter the namespace (pkg/ns locks and restores the thread). TeardownPod
// never opens the pod's namespace, so that it works without one.
type namespace struct{ *kernelns.Namespace }

func openNamespace(path string) (*namespace, error) {
	n, err := kernelns.Open(path)
	if err != nil {
		return nil, err
	}
	return &namespace{n}, nil
}

// sysctl is a setting under /proc/sys. key is a path
// ("net/ipv4/conf/vcoil0123456789/forwarding"), never dotted, because
// interface names may contain dots.
type sysctl struct{ key, value string }

// setSysctls writes sysctls inside the namespace, in order.
func (n *namespace) setSysctls(sysctls ...sysctl) error {
	return n.NS.Do(func(ns.NetNS) error {
		for _, s := range sysctls {
			if err := os.WriteFile(filepath.Join("/proc/sys", s.key), []byte(s.value), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", s.key, s.value, n.Path, err)
			}
		}
		return nil
	})
}

func (n *namespace) readSysctl(key string) (string, error) {
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

// linkByName returns nil and no error when the link does not exist.
func (n *namespace) linkByName(name string) (netlink.Link, error) {
	link, err := n.NL.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("look up link %s in %s: %w", name, n.Path, err)
	}
	return link, nil
}

// deleteLink deletes the link called name, if there is one. Deleting a veth
// deletes its peer, the addresses on both and every route through them.
func (n *namespace) deleteLink(name string) error {
	link, err := n.linkByName(name)
	if err != nil || link == nil {
		return err
	}
	if err := ignoreGone(n.NL.LinkDel(link)); err != nil {
		return fmt.Errorf("delete link %s in %s: %w", name, n.Path, err)
	}
	return nil
}

// maxDumpAttempts bounds the retries of a netlink dump that the kernel
// marked as interrupted by a concurrent change.
const maxDumpAttempts = 5

// dump retries f while the kernel reports that the dump was interrupted by
// a concurrent change, whose results may be incomplete.
func dump[T any](f func() ([]T, error)) ([]T, error) {
	for attempt := 1; ; attempt++ {
		res, err := f()
		if !errors.Is(err, netlink.ErrDumpInterrupted) || attempt == maxDumpAttempts {
			return res, err
		}
	}
}

// routes lists the routes that match filter (see
// netlink.RouteListFiltered). A table that does not exist holds no routes.
//
// The dump runs with strict checking, so that the kernel filters by table,
// output link and protocol instead of sending the whole FIB (which may hold
// a routing daemon's full table) for the library to filter. Strict checking
// is off otherwise: the library's rule dumps fail with it.
func (n *namespace) routes(family int, filter *netlink.Route, mask uint64) ([]netlink.Route, error) {
	if err := n.NL.SetStrictCheck(true); err != nil {
		return nil, fmt.Errorf("netlink strict checking in %s: %w", n.Path, err)
	}
	defer func() { _ = n.NL.SetStrictCheck(false) }()
	rs, err := dump(func() ([]netlink.Route, error) { return n.NL.RouteListFiltered(family, filter, mask) })
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list routes in %s: %w", n.Path, err)
	}
	return rs, nil
}

// ignoreGone turns the errors of deleting something already gone into nil.
func ignoreGone(err error) error {
	var notFound netlink.LinkNotFoundError
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.As(err, &notFound) {
		return nil
	}
	return err
}
