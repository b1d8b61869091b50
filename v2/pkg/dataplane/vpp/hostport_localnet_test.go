package vpp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// A pod must not reach what listens on the node's 127.0.0.1 by sending to
// 127.0.0.1 through VPP. hostPorts on 127.0.0.1 need route_localnet on the
// interconnect (replies to the node's own connections come back to a
// loopback address), which also lets such packets in: a forged UDP
// datagram reaches a service on 127.0.0.1, and a TCP SYN reaches a
// listener (whose answer, from a loopback source, cannot leave). The
// hostPort table drops what arrives on the interconnect for 127.0.0.0/8
// unless it belongs to a connection the node made, and route_localnet is
// reset with the last hostPort. The stand-in VPP namespace holds the pod's
// address and sends to 127.0.0.1 through the interconnect, as VPP forwards
// a pod's packets (a pod needs no more than NET_RAW; the route here does
// it with plain sockets).
func TestAPodCannotReachTheNodesLoopbackThroughTheInterconnect(t *testing.T) {
	netnstest.RequireRoot(t)
	s := newServiceNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The node's private services on its loopback.
	private := s.node.Listen("tcp4", "127.0.0.1:7070")
	accepted := make(chan struct{}, 8)
	go func() {
		for {
			c, err := private.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	var udp net.PacketConn
	if err := s.node.Do(func() (err error) { udp, err = net.ListenPacket("udp4", "127.0.0.1:7071"); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	got := make(chan string, 64)
	go func() {
		b := make([]byte, 64)
		for {
			n, _, err := udp.ReadFrom(b)
			if err != nil {
				return
			}
			got <- string(b[:n])
		}
	}()
	// In the stand-in, 127.0.0.1 is the node's, through the interconnect.
	s.vpp.IP("route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
	s.vpp.IP("route", "del", "local", "127.0.0.1", "dev", "lo", "table", "local")
	s.vpp.IP("route", "add", "127.0.0.1/32", "via", "169.254.100.2", "dev", HostInterconnectVPPName)
	s.vpp.Sysctl("net.ipv4.conf."+HostInterconnectVPPName+".route_localnet", "1")

	// reached sends datagrams and a SYN for a while and reports what the
	// node's loopback services saw.
	reached := func(what string) error {
		for len(got) > 0 {
			<-got
		}
		var c net.Conn
		err := s.vpp.Do(func() (err error) {
			c, err = (&net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP("10.100.0.2")}}).DialContext(ctx, "udp4", "127.0.0.1:7071")
			return err
		})
		if err != nil {
			return err
		}
		defer c.Close()
		tcp := make(chan error, 1)
		go func() {
			c, err := dialFrom(ctx, s.vpp, "tcp4", "10.100.0.2", "127.0.0.1:7070")
			if err == nil {
				c.Close()
			}
			tcp <- err
		}()
		deadline := time.After(5 * time.Second)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case m := <-got:
				return fmt.Errorf("%s: the node's UDP service on 127.0.0.1 received %q from a pod", what, m)
			case <-accepted:
				return fmt.Errorf("%s: the node's TCP listener on 127.0.0.1 accepted a pod's connection", what)
			case <-tick.C:
				_, _ = c.Write([]byte("forged"))
			case <-deadline:
				if err := <-tcp; err == nil {
					return fmt.Errorf("%s: a pod connected to the node's 127.0.0.1:7070", what)
				}
				return nil
			}
		}
	}
	// A hostPort on 127.0.0.1 turns route_localnet on.
	dnats := []HostPortDNAT{{Addr: netip.MustParseAddr("127.0.0.1"), Protocol: 6, Port: 9443, PodAddr: netip.MustParseAddr("10.100.0.2"), PodPort: 80}}
	if err := s.k.SyncHostPorts(ctx, dnats); err != nil {
		t.Fatal(err)
	}
	key := "net.ipv4.conf." + HostInterconnectName + ".route_localnet"
	if got := s.node.ReadSysctl(key); got != "1" {
		t.Fatalf("%s = %s with a hostPort on 127.0.0.1, want 1", key, got)
	}
	var errs []error
	if err := reached("with a hostPort on 127.0.0.1"); err != nil {
		errs = append(errs, err)
	}
	// Without hostPorts, route_localnet is off again.
	if err := s.k.SyncHostPorts(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.node.ReadSysctl(key); got != "0" {
		errs = append(errs, fmt.Errorf("%s = %s without hostPorts, want 0", key, got))
	}
	if err := reached("without hostPorts"); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
