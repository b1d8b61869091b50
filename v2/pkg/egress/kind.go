package egress

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"strings"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// Kind is the encapsulation of one client's tunnel to an Egress.
type Kind string

// The encapsulations a client can use.
const (
	KindFoU   Kind = "fou"
	KindVXLAN Kind = "vxlan"
)

// FoUAvailable says whether FoU tunnels can be made in the current kernel:
// nil, or an error naming the missing kernel modules (fou, ipip, and
// ip6_tunnel when the kernel has IPv6). It asks the kernel to load what it
// can, as ip(8) would by using them, so that a module installed but not yet
// loaded counts as available.
func FoUAvailable() error {
	var missing []string
	if _, err := netlink.GenlFamilyGet(netlink.FOU_GENL_NAME); err != nil {
		// The generic netlink controller loads the module of a family it
		// does not know (net-pf-16-proto-16-family-fou).
		missing = append(missing, "fou")
	}
	if !tunnelModule("ipip", "tunl0") {
		missing = append(missing, "ipip")
	}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil && !tunnelModule("ip6_tunnel", "ip6tnl0") {
		missing = append(missing, "ip6_tunnel")
	}
	if len(missing) > 0 {
		return fmt.Errorf("FoU tunnels need the kernel modules fou, ipip and ip6_tunnel; missing: %s", strings.Join(missing, ", "))
	}
	return nil
}

// tunnelModule says whether module is loaded (or built in), after asking
// the kernel for its fallback device fbDev: an interface ioctl on an
// unknown name makes a kernel with module autoloading load the module that
// provides it (netdev-tunl0 is ipip's alias).
func tunnelModule(module, fbDev string) bool {
	if _, err := os.Stat("/sys/module/" + module); err == nil {
		return true
	}
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		var ifr [unix.IFNAMSIZ + 24]byte
		copy(ifr[:unix.IFNAMSIZ-1], fbDev)
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCGIFINDEX, uintptr(unsafe.Pointer(&ifr[0])))
		_ = unix.Close(fd)
	}
	_, err := os.Stat("/sys/module/" + module)
	return err == nil
}

// Choose resolves an Egress's encapsulation against the kernel: auto (or
// unset) is fou when fouErr is nil, else vxlan; fou with a non-nil fouErr
// is an error wrapping fouErr.
func Choose(want vcoilv2.Encapsulation, fouErr error) (Kind, error) {
	switch want {
	case vcoilv2.EncapsulationAuto, "":
		if fouErr == nil {
			return KindFoU, nil
		}
		return KindVXLAN, nil
	case vcoilv2.EncapsulationFoU:
		if fouErr != nil {
			return "", fmt.Errorf("encapsulation fou is not available on this node: %w", fouErr)
		}
		return KindFoU, nil
	case vcoilv2.EncapsulationVXLAN:
		return KindVXLAN, nil
	}
	return "", fmt.Errorf("unknown encapsulation %q (want auto, fou or vxlan)", want)
}

// VNI of an Egress's VXLAN tunnels: the FNV-1a hash of "namespace/name"
// folded to 24 bits, never 0. Clients and routers compute it alike, so it
// needs no coordination; two Egresses with the same VNI would still work,
// since every client tunnel has a single remote, the Egress's ClusterIP.
func VNI(egress types.NamespacedName) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(egress.Namespace + "/" + egress.Name))
	s := h.Sum32()
	v := (s >> 24) ^ (s & 0xffffff)
	if v == 0 {
		v = 1
	}
	return v
}

// ClientMAC is the MAC address of a client pod's VXLAN devices, derived
// from the pod's first address (IPv4 first when it has both), so that a
// router computes it from the pod's addresses alone: 0a:58 and the IPv4
// address (as Kubernetes' bridge plugins do), or 0a:5a and four bytes of a
// hash of the IPv6 address. Locally administered and unicast.
func ClientMAC(podIPs []netip.Addr) net.HardwareAddr {
	if len(podIPs) == 0 {
		return nil
	}
	a := podIPs[0].Unmap()
	if a.Is4() {
		b := a.As4()
		return net.HardwareAddr{0x0a, 0x58, b[0], b[1], b[2], b[3]}
	}
	h := fnv.New32a()
	b := a.As16()
	_, _ = h.Write(b[:])
	s := h.Sum32()
	return net.HardwareAddr{0x0a, 0x5a, byte(s >> 24), byte(s >> 16), byte(s >> 8), byte(s)}
}

// RouterMAC is the MAC address of every router's VXLAN devices for the
// Egress whose VNI is vni: all routers of an Egress share it, so a client's
// static neighbour for the gateway fits whichever router the Service picks.
// Locally administered, unicast, and never a ClientMAC (0a:57).
func RouterMAC(vni uint32) net.HardwareAddr {
	return net.HardwareAddr{0x0a, 0x57, 0x00, byte(vni >> 16), byte(vni >> 8), byte(vni)}
}

// ErrInvalidConfig marks configuration errors of ApplyClient and
// NewRouter's configuration, which retrying cannot fix.
var ErrInvalidConfig = errors.New("invalid egress configuration")
