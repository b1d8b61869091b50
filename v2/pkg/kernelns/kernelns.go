// Package kernelns opens a network namespace together with a netlink handle
// bound to it, for the packages that program the kernel of a node or a pod
// (the Linux and VPP dataplanes, the route tables). Netlink work goes
// through the handle and needs no thread switching; what only the calling
// thread's namespace can reach (sysctls under /proc/sys) uses NS.Do.
package kernelns

import (
	"fmt"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Own is the path of the calling process's network namespace.
const Own = "/proc/self/ns/net"

// Namespace is an open network namespace and a netlink handle in it.
type Namespace struct {
	Path string
	NS   ns.NetNS
	NL   *netlink.Handle
}

// Open opens the namespace at path ("" means the process's own). A missing
// path is pkg/ns's NSPathNotExistErr, wrapped.
func Open(path string) (*Namespace, error) {
	if path == "" {
		path = Own
	}
	n, err := ns.GetNS(path)
	if err != nil {
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	h, err := netlink.NewHandleAt(netns.NsHandle(n.Fd()), unix.NETLINK_ROUTE)
	if err != nil {
		_ = n.Close()
		return nil, fmt.Errorf("netlink socket in %s: %w", path, err)
	}
	return &Namespace{Path: path, NS: n, NL: h}, nil
}

// Close releases the handle and the namespace.
func (n *Namespace) Close() {
	n.NL.Close()
	_ = n.NS.Close()
}
