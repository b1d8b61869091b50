package linux_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// Hand-made packets, for what a pod with CAP_NET_RAW can send: any source
// at all.

// flow is what a probe sends and a capture recognises.
type flow struct {
	src, dst netip.Addr
	proto    byte // unix.IPPROTO_UDP or unix.IPPROTO_TCP (a SYN)
	sport    uint16
	dport    uint16
}

func (f flow) String() string {
	p := "udp"
	if f.proto == unix.IPPROTO_TCP {
		p = "tcp"
	}
	return fmt.Sprintf("%s %s:%d -> %s:%d", p, f.src, f.sport, f.dst, f.dport)
}

func checksum(b []byte, sum uint32) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// packet is f's IP packet: a UDP datagram, or a TCP SYN.
func (f flow) packet() []byte {
	var l4 []byte
	if f.proto == unix.IPPROTO_TCP {
		l4 = make([]byte, 20)
		binary.BigEndian.PutUint32(l4[4:], 1) // seq
		l4[12] = 5 << 4
		l4[13] = 0x02 // SYN
		binary.BigEndian.PutUint16(l4[14:], 65535)
	} else {
		l4 = append(make([]byte, 8), "vcoil"...)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	}
	binary.BigEndian.PutUint16(l4[0:], f.sport)
	binary.BigEndian.PutUint16(l4[2:], f.dport)
	// The pseudo-header: addresses, protocol, length.
	pseudo := append(f.src.AsSlice(), f.dst.AsSlice()...)
	pseudo = append(pseudo, 0, f.proto)
	pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(l4)))
	var sum uint32
	for i := 0; i+1 < len(pseudo); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(pseudo[i:]))
	}
	at := 6
	if f.proto == unix.IPPROTO_TCP {
		at = 16
	}
	binary.BigEndian.PutUint16(l4[at:], checksum(l4, sum))

	if f.src.Is4() {
		h := make([]byte, 20)
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF
		h[8] = 64
		h[9] = f.proto
		copy(h[12:], f.src.AsSlice())
		copy(h[16:], f.dst.AsSlice())
		binary.BigEndian.PutUint16(h[10:], checksum(h, 0))
		return append(h, l4...)
	}
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(l4)))
	h[6] = f.proto
	h[7] = 64
	copy(h[8:], f.src.AsSlice())
	copy(h[24:], f.dst.AsSlice())
	return append(h, l4...)
}

// sendRaw sends each flow's packet from inside n through a raw socket
// that writes the whole IP header (IPPROTO_RAW), as a pod with
// CAP_NET_RAW can.
func sendRaw(t *testing.T, n *netnstest.NS, flows ...flow) {
	t.Helper()
	err := n.Do(func() error {
		for _, f := range flows {
			fam := unix.AF_INET6
			var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: f.dst.As16()}
			if f.dst.Is4() {
				fam, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: f.dst.As4()}
			}
			fd, err := unix.Socket(fam, unix.SOCK_RAW, unix.IPPROTO_RAW)
			if err != nil {
				return fmt.Errorf("raw socket: %w", err)
			}
			err = unix.Sendto(fd, f.packet(), 0, sa)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("send %s: %w", f, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// capture reads the IP packets that arrive on one link of a namespace,
// from an AF_PACKET socket: what the link receives, before anything in
// the namespace filters it.
type capture struct {
	fd int
}

func newCapture(t *testing.T, n *netnstest.NS, link string) *capture {
	t.Helper()
	c := &capture{fd: -1}
	err := n.Do(func() error {
		l, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return err
		}
		c.fd = fd
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: l.Index})
	})
	if err != nil {
		t.Fatalf("capture on %s in %s: %v", link, n, err)
	}
	t.Cleanup(func() { unix.Close(c.fd) })
	return c
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// until reads packets until one matches stop or timeout passes; it
// returns the flows read, stop's included.
func (c *capture) until(t *testing.T, timeout time.Duration, stop func(flow) bool) ([]flow, error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 65536)
	var seen []flow
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return seen, errors.New("timed out")
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return seen, err
		}
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return seen, err
		}
		f, ok := parseFrame(buf[:n])
		if !ok {
			continue
		}
		seen = append(seen, f)
		if stop(f) {
			return seen, nil
		}
	}
}

// drain returns the packets already received, without waiting.
func (c *capture) drain(t *testing.T) []flow {
	t.Helper()
	buf := make([]byte, 65536)
	var seen []flow
	for {
		n, _, err := unix.Recvfrom(c.fd, buf, unix.MSG_DONTWAIT)
		if err != nil {
			return seen
		}
		if f, ok := parseFrame(buf[:n]); ok {
			seen = append(seen, f)
		}
	}
}

// parseFrame reads an Ethernet frame's IP addresses and ports.
func parseFrame(b []byte) (flow, bool) {
	if len(b) < 14 {
		return flow{}, false
	}
	et, p := binary.BigEndian.Uint16(b[12:]), b[14:]
	var f flow
	var l4 []byte
	switch {
	case et == unix.ETH_P_IP && len(p) >= 20:
		f.src, _ = netip.AddrFromSlice(p[12:16])
		f.dst, _ = netip.AddrFromSlice(p[16:20])
		f.proto, l4 = p[9], p[int(p[0]&0xf)*4:]
	case et == unix.ETH_P_IPV6 && len(p) >= 40:
		f.src, _ = netip.AddrFromSlice(p[8:24])
		f.dst, _ = netip.AddrFromSlice(p[24:40])
		f.proto, l4 = p[6], p[40:]
	default:
		return flow{}, false
	}
	if len(l4) >= 4 {
		f.sport, f.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	}
	return f, true
}

// injectFrame sends an Ethernet frame carrying f's packet out of link in
// n, from its MAC to dstMAC: the way to send to 127.0.0.1 out of a pod's
// eth0, which the pod's own routing would keep on lo.
func injectFrame(t *testing.T, n *netnstest.NS, link string, dstMAC net.HardwareAddr, f flow) {
	t.Helper()
	err := n.Do(func() error {
		l, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		et := uint16(unix.ETH_P_IP)
		if f.src.Is6() {
			et = unix.ETH_P_IPV6
		}
		frame := append(append(append([]byte{}, dstMAC...), l.HardwareAddr...), byte(et>>8), byte(et))
		frame = append(frame, f.packet()...)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: l.Index, Halen: 6, Addr: [8]byte(append(append([]byte{}, dstMAC...), 0, 0))})
	})
	if err != nil {
		t.Fatalf("inject %s on %s in %s: %v", f, link, n, err)
	}
}

// sendRA sends a router advertisement from src (an address of link) to
// all nodes, with the hop limit 255 RAs need; the kernel fills in the
// checksum.
func sendRA(t *testing.T, n *netnstest.NS, link string, src netip.Addr) {
	t.Helper()
	err := n.Do(func() error {
		l, err := net.InterfaceByName(link)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, 255); err != nil {
			return err
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, l.Index); err != nil {
			return err
		}
		if err := unix.Bind(fd, &unix.SockaddrInet6{Addr: src.As16(), ZoneId: uint32(l.Index)}); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		// Type 134, code 0, checksum, hop limit 64, flags 0, lifetime
		// 1800 s, reachable time and retransmission timer 0.
		ra := []byte{134, 0, 0, 0, 64, 0, 0x07, 0x08, 0, 0, 0, 0, 0, 0, 0, 0}
		dst := netip.MustParseAddr("ff02::1").As16()
		return unix.Sendto(fd, ra, 0, &unix.SockaddrInet6{Addr: dst, ZoneId: uint32(l.Index)})
	})
	if err != nil {
		t.Fatalf("send a router advertisement from %s in %s: %v", src, n, err)
	}
}
