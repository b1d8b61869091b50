package suite

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// The attacks are sent as a pod sends them: from a raw socket opened in the
// attacker pod's own network namespace, which every pod may open (NET_RAW
// is in the runtime's default capabilities). The suite enters that
// namespace from the machine the cluster's nodes run on (the lab), through
// one of the pod's processes; listeners are opened the same way in the
// victims' namespaces, the node's and the external host's.

// errNoNetns says the suite cannot enter a pod's network namespace: it does
// not run on the machine of the pod's node.
var errNoNetns = errors.New("no process of the pod on this machine")

// podNetns is the path of the pod's network namespace as a process of the
// pod holds it: the process whose cgroup names the pod's UID (the kubelet's
// cgroupfs driver spells it pod<UID>, the systemd driver pod<UID with
// underscores>).
func podNetns(p *corev1.Pod) (string, error) {
	uid := string(p.UID)
	names := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return "", err
	}
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, n := range names {
			if bytes.Contains(b, []byte(n+"/")) || bytes.Contains(b, []byte(n+".slice/")) {
				return filepath.Join(filepath.Dir(f), "ns", "net"), nil
			}
		}
	}
	return "", fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, errNoNetns)
}

// inNetns runs f on an OS thread of its own that has entered the network
// namespace at path: sockets f opens stay in that namespace. The thread is
// never handed back to Go's scheduler (its goroutine ends locked), so no
// other goroutine ever runs in the namespace.
func inNetns(path string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromPath(path)
		if err != nil {
			errc <- fmt.Errorf("open network namespace %s: %w", path, err)
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- fmt.Errorf("enter network namespace %s: %w", path, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// capture is an AF_PACKET listener on every interface of a network
// namespace: it keeps the frames that carry its token, whatever the
// namespace's own rules do with them afterwards (the tap sees a frame as it
// arrives). With icmp6 it is instead a raw ICMPv6 socket, which sees only
// what the namespace's stack accepted for itself.
type capture struct {
	fd     int
	tokens [][]byte
	mu     sync.Mutex
	got    map[string]int
	done   chan struct{}
	wg     sync.WaitGroup
}

// listen counts, from now on, the frames carrying each of tokens that
// arrive in the network namespace at path.
func listen(path string, icmp6 bool, tokens ...[]byte) (*capture, error) {
	c := &capture{tokens: tokens, got: map[string]int{}, done: make(chan struct{})}
	err := inNetns(path, func() error {
		var err error
		if icmp6 {
			c.fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		} else {
			c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen in %s: %w", path, err)
	}
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(c.fd)
		return nil, err
	}
	c.wg.Add(1)
	go c.read()
	return c, nil
}

func (c *capture) read() {
	defer c.wg.Done()
	buf := make([]byte, 65536)
	for {
		select {
		case <-c.done:
			return
		default:
		}
		n, from, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil || n <= 0 {
			continue
		}
		// The tap sees what the namespace sends too (an ICMP error
		// quoting a forged datagram): only what arrives counts.
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		for _, tok := range c.tokens {
			if bytes.Contains(buf[:n], tok) {
				c.mu.Lock()
				c.got[string(tok)]++
				c.mu.Unlock()
			}
		}
	}
}

// seen is the number of frames with token so far.
func (c *capture) seen(token []byte) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got[string(token)]
}

func (c *capture) close() {
	close(c.done)
	c.wg.Wait()
	unix.Close(c.fd)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// sendRaw sends each packet (a whole IP datagram, header included) from the
// network namespace at path, as its routes send it: an IPv4 or IPv6 raw
// socket whose header the caller wrote, so the kernel neither checks nor
// replaces the source. ifname, when set, is the interface a packet to a
// link-local or multicast address leaves by.
func sendRaw(path, ifname string, packets ...[]byte) error {
	return inNetns(path, func() error {
		for _, p := range packets {
			if err := sendOne(p, ifname); err != nil {
				return err
			}
		}
		return nil
	})
}

func sendOne(p []byte, ifname string) error {
	if len(p) < 20 {
		return fmt.Errorf("packet of %d bytes", len(p))
	}
	if p[0]>>4 == 4 {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return fmt.Errorf("raw IPv4 socket: %w", err)
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrInet4{}
		copy(sa.Addr[:], p[16:20])
		if err := unix.Sendto(fd, p, 0, sa); err != nil {
			return fmt.Errorf("send to %s: %w", netip.AddrFrom4(sa.Addr), err)
		}
		return nil
	}
	// IPPROTO_RAW implies IPV6_HDRINCL on Linux.
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return fmt.Errorf("raw IPv6 socket: %w", err)
	}
	defer unix.Close(fd)
	sa := &unix.SockaddrInet6{}
	copy(sa.Addr[:], p[24:40])
	dst := netip.AddrFrom16(sa.Addr)
	if ifname != "" && (dst.IsLinkLocalUnicast() || dst.IsMulticast()) {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		sa.ZoneId = uint32(ifi.Index)
	}
	if err := unix.Sendto(fd, p, 0, sa); err != nil {
		return fmt.Errorf("send to %s: %w", dst, err)
	}
	return nil
}

// Upper-layer protocols of the forged packets.
const (
	protoTCP    = 6
	protoUDP    = 17
	protoICMPv6 = 58
)

// ipPacket wraps payload (an upper-layer header and its data, checksum
// still zero at csumAt, or csumAt < 0 for none) in an IPv4 or IPv6 header
// from src to dst, and fills in the upper-layer checksum.
func ipPacket(src, dst netip.Addr, proto byte, hopLimit byte, payload []byte, csumAt int) []byte {
	var sum uint32
	if csumAt >= 0 {
		sum = pseudoSum(src, dst, proto, len(payload))
		binary.BigEndian.PutUint16(payload[csumAt:], finish(sum+onesSum(payload)))
	}
	if src.Is4() {
		h := make([]byte, 20)
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(payload)))
		binary.BigEndian.PutUint16(h[4:], 0x5c5c)
		h[8] = hopLimit
		h[9] = proto
		s, d := src.As4(), dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		binary.BigEndian.PutUint16(h[10:], finish(onesSum(h)))
		return append(h, payload...)
	}
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(payload)))
	h[6] = proto
	h[7] = hopLimit
	s, d := src.As16(), dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	return append(h, payload...)
}

func pseudoSum(src, dst netip.Addr, proto byte, n int) uint32 {
	var b []byte
	b = append(b, src.AsSlice()...)
	b = append(b, dst.AsSlice()...)
	if src.Is4() {
		b = append(b, 0, proto, byte(n>>8), byte(n))
	} else {
		b = append(b, byte(n>>24), byte(n>>16), byte(n>>8), byte(n), 0, 0, 0, proto)
	}
	return onesSum(b)
}

func onesSum(b []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	return s
}

func finish(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// tcpSYN is a TCP SYN from src to dst carrying data (a SYN may carry data,
// and the capture finds the token in it).
func tcpSYN(src, dst netip.AddrPort, data []byte) []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h[0:], src.Port())
	binary.BigEndian.PutUint16(h[2:], dst.Port())
	binary.BigEndian.PutUint32(h[4:], 0x5eed0001)
	h[12] = 5 << 4
	h[13] = 0x02 // SYN
	binary.BigEndian.PutUint16(h[14:], 64240)
	return ipPacket(src.Addr(), dst.Addr(), protoTCP, 64, append(h, data...), 16)
}

// udpDatagram is a UDP datagram from src to dst.
func udpDatagram(src, dst netip.AddrPort, data []byte) []byte {
	return ipPacket(src.Addr(), dst.Addr(), protoUDP, 64, udpPayload(src.Port(), dst.Port(), data), 6)
}

func udpPayload(sport, dport uint16, data []byte) []byte {
	h := make([]byte, 8)
	binary.BigEndian.PutUint16(h[0:], sport)
	binary.BigEndian.PutUint16(h[2:], dport)
	binary.BigEndian.PutUint16(h[4:], uint16(8+len(data)))
	return append(h, data...)
}

// tokenOption is an ICMPv6 neighbour discovery option of an experimental
// type (253, RFC 4727) carrying the token, which receivers skip.
func tokenOption(token []byte) []byte {
	n := (2 + len(token) + 7) / 8 * 8
	o := make([]byte, n)
	o[0], o[1] = 253, byte(n/8)
	copy(o[2:], token)
	return o
}

// routerAdvertisement is an ICMPv6 router advertisement from src (a
// router's link-local address) to dst, hop limit 255 as receivers demand,
// announcing a default router and the prefix 2001:db8:bad::/64.
func routerAdvertisement(src, dst netip.Addr, token []byte) []byte {
	m := make([]byte, 16)
	m[0] = 134
	m[4] = 64                               // current hop limit
	binary.BigEndian.PutUint16(m[6:], 1800) // router lifetime
	pi := make([]byte, 32)
	pi[0], pi[1], pi[2], pi[3] = 3, 4, 64, 0xc0 // prefix information, /64, on-link and autonomous
	binary.BigEndian.PutUint32(pi[4:], 86400)
	binary.BigEndian.PutUint32(pi[8:], 14400)
	prefix := netip.MustParseAddr("2001:db8:bad::").As16()
	copy(pi[16:], prefix[:])
	m = append(m, pi...)
	m = append(m, tokenOption(token)...)
	return ipPacket(src, dst, protoICMPv6, 255, m, 2)
}

// redirect is an ICMPv6 redirect from src to dst: "to reach about, go
// through target".
func redirect(src, dst, target, about netip.Addr, token []byte) []byte {
	m := make([]byte, 40)
	m[0] = 137
	t, a := target.As16(), about.As16()
	copy(m[8:], t[:])
	copy(m[24:], a[:])
	m = append(m, tokenOption(token)...)
	return ipPacket(src, dst, protoICMPv6, 255, m, 2)
}

// vxlanFrame is a VXLAN datagram from src to dst (port 4789) with the VNI,
// carrying an Ethernet frame from srcMAC to dstMAC with the inner IP packet.
func vxlanFrame(src, dst netip.AddrPort, vni uint32, dstMAC, srcMAC net.HardwareAddr, inner []byte) []byte {
	v := make([]byte, 8)
	v[0] = 0x08
	v[4], v[5], v[6] = byte(vni>>16), byte(vni>>8), byte(vni)
	eth := make([]byte, 14)
	copy(eth[0:], dstMAC)
	copy(eth[6:], srcMAC)
	if inner[0]>>4 == 4 {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
	}
	data := append(append(v, eth...), inner...)
	// VXLAN over IPv4 may leave the UDP checksum zero.
	return ipPacket(src.Addr(), dst.Addr(), protoUDP, 64, udpPayload(src.Port(), dst.Port(), data), -1)
}
