package linux

import (
	"errors"
	"fmt"

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

// deleteLink deletes the link called name, if there is one. Deleting a veth
// deletes its peer, the addresses on both and every route through them.
func (n *namespace) deleteLink(name string) error {
	link, err := n.FindLink(name)
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
