// Package echotest serves and asks the named echo the tests of service
// renderers use: a server says which backend it is and whom it saw.
package echotest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// Serve makes ns serve TCP and UDP on addr:8080 (addr's family; the
// unspecified address serves every address of it) with name: a TCP
// connection gets "<name> <its address>\n", then its bytes echoed; a UDP
// datagram gets "<name> <its address>". Bound to addr, UDP answers
// leave from the address asked (an unbound socket answers from the
// kernel's choice, which NAT would not match), and several servers can
// share a namespace.
func Serve(t testing.TB, ns *netnstest.NS, name string, addr netip.Addr) {
	fam := "4"
	if addr.Is6() {
		fam = "6"
	}
	l := ns.Listen("tcp"+fam, netip.AddrPortFrom(addr, 8080).String())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr()); err == nil {
					_, _ = io.Copy(c, c)
				}
			}()
		}
	}()
	var pc net.PacketConn
	ns.Run(func() error {
		var err error
		pc, err = net.ListenPacket("udp"+fam, netip.AddrPortFrom(addr, 8080).String())
		return err
	})
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s %s", name, from)), from)
		}
	}()
}

// Ask connects from ns (from src when valid) to target over network and
// returns the name of the backend that answered and the source address it
// saw. Errors keep the socket's cause (connection refused, timeout).
func Ask(ctx context.Context, ns *netnstest.NS, network string, target netip.AddrPort, src netip.Addr) (name string, from netip.Addr, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var conn net.Conn
	err = ns.Do(func() error {
		dialer := net.Dialer{}
		if src.IsValid() {
			if network == "udp" {
				dialer.LocalAddr = &net.UDPAddr{IP: src.AsSlice()}
			} else {
				dialer.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
			}
		}
		var err error
		fam := "4"
		if target.Addr().Is6() {
			fam = "6"
		}
		conn, err = dialer.DialContext(ctx, network+fam, target.String())
		return err
	})
	if err != nil {
		return "", from, fmt.Errorf("connect to %s from %s: %w", target, ns, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	var line string
	if network == "udp" {
		if _, err := conn.Write([]byte("hello")); err != nil {
			return "", from, err
		}
		buf := make([]byte, 200)
		n, err := conn.Read(buf)
		if err != nil {
			return "", from, fmt.Errorf("answer of %s/udp to %s: %w", target, ns, err)
		}
		line = string(buf[:n])
	} else {
		line, err = bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return "", from, fmt.Errorf("greeting of %s to %s: %w", target, ns, err)
		}
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		return "", from, fmt.Errorf("%s answered %q", target, line)
	}
	ap, err := netip.ParseAddrPort(f[1])
	if err != nil {
		return f[0], from, fmt.Errorf("%s answered %q: %w", target, line, err)
	}
	return f[0], ap.Addr().Unmap(), nil
}
