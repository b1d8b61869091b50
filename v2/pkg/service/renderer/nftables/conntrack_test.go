package nftables

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// flows lists the node's UDP conntrack entries to frontend, as
// "frontend -> endpoint" strings.
func (l *lab) flows(frontend netip.AddrPort) []string {
	l.t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(l.node.NetNS().Fd()), unix.NETLINK_NETFILTER)
	if err != nil {
		l.t.Fatal(err)
	}
	defer h.Close()
	var out []string
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			l.t.Fatal(err)
		}
		for _, f := range flows {
			dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
			if f.Forward.Protocol == unix.IPPROTO_UDP && netip.AddrPortFrom(dst.Unmap(), f.Forward.DstPort) == frontend {
				out = append(out, fmt.Sprintf("%s -> %s", frontend, net.JoinHostPort(f.Reverse.SrcIP.String(), fmt.Sprint(f.Reverse.SrcPort))))
			}
		}
	}
	return out
}

// exchange sends on a connected UDP socket (one conntrack entry for all
// its packets) and returns the answer.
func exchange(c net.Conn) (answer, error) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("?")); err != nil {
		return answer{}, err
	}
	return readAnswer(c)
}

func TestUDPConntrackEntriesToARemovedEndpointAreDeleted(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	l.serve(remote, l.remote)
	r := l.renderer()
	l.resync(r, dual("dns", 1, podA))
	bothFamilies(t, func(t *testing.T, ip fam) {
		frontend := netip.AddrPortFrom(netip.MustParseAddr(ip.cluster(1)), svcUDP)
		c, err := l.podB.Dial(t.Context(), "udp", frontend.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		poll.Eventually(t, 10*time.Second, func() error {
			a, err := exchange(c)
			if err == nil && a.backend != "pod-a" {
				return poll.Stop(fmt.Errorf("answer %s, want pod-a's", a))
			}
			return err
		})
		if got := l.flows(frontend); len(got) != 1 {
			t.Fatalf("conntrack entries to %s before the change: %v, want pod-a's", frontend, got)
		}
		if err := r.Update(t.Context(), &service.Changes{Upsert: []*service.Service{dual("dns", 1, remote)}}); err != nil {
			t.Fatal(err)
		}
		if got := l.flows(frontend); len(got) != 0 {
			t.Fatalf("conntrack entries to %s after pod-a left: %v, want none", frontend, got)
		}
		// The same socket (the same 5-tuple) now reaches the remaining
		// endpoint.
		poll.Eventually(t, 5*time.Second, func() error {
			a, err := exchange(c)
			if err == nil && a.backend != "remote" {
				return poll.Stop(fmt.Errorf("after the change: %s, want remote's answer", a))
			}
			return err
		})
		// Back to pod-a for the other family's run.
		if err := r.Update(t.Context(), &service.Changes{Upsert: []*service.Service{dual("dns", 1, podA)}}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestUDPConntrackEntriesOfAFrontendThatHadNoEndpointsAreDeleted(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	r := l.renderer()
	l.resync(r)
	bothFamilies(t, func(t *testing.T, ip fam) {
		frontend := netip.AddrPortFrom(netip.MustParseAddr(ip.cluster(2)), svcUDP)
		c, err := l.podB.Dial(t.Context(), "udp", frontend.String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Before the service exists, the packets are routed on, and
		// conntrack records a flow without DNAT.
		poll.Eventually(t, 10*time.Second, func() error {
			_, _ = c.Write([]byte("?"))
			if got := l.flows(frontend); len(got) == 0 {
				return fmt.Errorf("no conntrack entry to %s yet", frontend)
			}
			return nil
		})
		if err := r.Update(t.Context(), &service.Changes{Upsert: []*service.Service{dual("late", 2, podA)}}); err != nil {
			t.Fatal(err)
		}
		a, err := exchange(c)
		if err != nil || a.backend != "pod-a" {
			t.Fatalf("the socket that sent before the service existed: %v %v, want pod-a's answer", a, err)
		}
		if err := r.Update(t.Context(), &service.Changes{Delete: []service.ID{{Namespace: "default", Name: "late"}}}); err != nil {
			t.Fatal(err)
		}
	})
}
