package nftables

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// expect polls until a TCP and a UDP request from one namespace to a
// frontend are answered as want says (a fresh link may need a moment for
// neighbour resolution).
func expect(t *testing.T, from *netnstest.NS, addr string, tcp, udp uint16, want answer) {
	t.Helper()
	for _, c := range []struct {
		proto string
		port  uint16
		ask   func(context.Context, *netnstest.NS, string) (answer, error)
	}{{"TCP", tcp, askTCP}, {"UDP", udp, askUDP}} {
		if c.port == 0 {
			continue
		}
		target := hostPort(addr, c.port)
		poll.Eventually(t, 10*time.Second, func() error {
			got, err := c.ask(t.Context(), from, target)
			if err != nil {
				return fmt.Errorf("%s to %s: %w", c.proto, target, err)
			}
			if got != want {
				return poll.Stop(fmt.Errorf("%s to %s: %s, want %s", c.proto, target, got, want))
			}
			return nil
		})
	}
}

// expectNoAnswer asserts that a TCP connection to addr times out: the
// packets are dropped, not rejected.
func expectNoAnswer(t *testing.T, from *netnstest.NS, addr string) {
	t.Helper()
	got, err := askTCP(t.Context(), from, addr)
	if err == nil || isRefused(err) {
		t.Fatalf("TCP to %s: %v %v, want a timeout (dropped)", addr, got, err)
	}
}

func bothFamilies(t *testing.T, f func(t *testing.T, ip fam)) {
	for _, ip := range []fam{v4, v6} {
		t.Run(ip.name, func(t *testing.T) { f(t, ip) })
	}
}

func TestClusterIPsNodePortsAndExternalIPsReachTheirBackendsWithPortsRemapped(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	l.serve(remote, l.remote)
	r := l.renderer()
	l.resync(r,
		withExternalIPs(withNodePorts(dual("local", 1, podA), 30080, 30053)),
		withNodePorts(dual("far", 2, remote), 30081, 30054),
	)
	bothFamilies(t, func(t *testing.T, ip fam) {
		t.Run("a pod reaches a cluster IP and keeps its address", func(t *testing.T) {
			expect(t, l.podB, ip.cluster(1), svcTCP, svcUDP, answer{"pod-a", ip.podB})
			expect(t, l.podB, ip.cluster(2), svcTCP, svcUDP, answer{"remote", ip.podB})
		})
		t.Run("the node reaches a cluster IP", func(t *testing.T) {
			expect(t, l.node, ip.cluster(1), svcTCP, svcUDP, answer{"pod-a", ip.node})
		})
		t.Run("an external client reaches a node port of a local backend with its own address", func(t *testing.T) {
			expect(t, l.cliA, ip.node, 30080, 30053, answer{"pod-a", ip.clientA})
		})
		t.Run("an external client reaches an external IP", func(t *testing.T) {
			expect(t, l.cliA, ip.extIP, svcTCP, svcUDP, answer{"pod-a", ip.clientA})
		})
		t.Run("an external client's traffic to a remote backend is masqueraded", func(t *testing.T) {
			expect(t, l.cliA, ip.node, 30081, 30054, answer{"remote", ip.node})
		})
	})
}

func TestLoadBalancerSourceRangesAdmitTheirClientsAndDropOthers(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	r := l.renderer()
	l.resync(r, withLoadBalancer(dual("lb", 1, podA), v4.allowed, v6.allowed))
	bothFamilies(t, func(t *testing.T, ip fam) {
		expect(t, l.cliA, ip.lbIP, svcTCP, svcUDP, answer{"pod-a", ip.clientA})
		expectNoAnswer(t, l.cliB, hostPort(ip.lbIP, svcTCP))
		// The cluster IP of the same service is not firewalled.
		expect(t, l.podB, ip.cluster(1), svcTCP, 0, answer{"pod-a", ip.podB})
	})
}

func TestAFrontendWithoutEndpointsRejectsAtOnce(t *testing.T) {
	l := newLab(t)
	r := l.renderer()
	l.resync(r, withNodePorts(dual("empty", 1), 30080, 30053))
	bothFamilies(t, func(t *testing.T, ip fam) {
		for _, c := range []struct {
			name string
			from *netnstest.NS
			addr string
			tcp  uint16
			udp  uint16
		}{
			{"a pod to the cluster IP (forwarded)", l.podB, ip.cluster(1), svcTCP, svcUDP},
			{"the node to the cluster IP (output)", l.node, ip.cluster(1), svcTCP, svcUDP},
			{"a client to the node port (input)", l.cliA, ip.node, 30080, 30053},
		} {
			t.Run(c.name, func(t *testing.T) {
				start := time.Now()
				_, err := askTCP(t.Context(), c.from, hostPort(c.addr, c.tcp))
				if !isRefused(err) || time.Since(start) > time.Second {
					t.Errorf("TCP: %v after %v, want connection refused at once", err, time.Since(start))
				}
				poll.Eventually(t, 5*time.Second, func() error {
					_, err := askUDP(t.Context(), c.from, hostPort(c.addr, c.udp))
					// A packet the node itself sends is refused on the way
					// out: the sender gets EPERM, as with kube-proxy.
					if isRefused(err) || (c.from == l.node && errors.Is(err, syscall.EPERM)) {
						return nil
					}
					return fmt.Errorf("UDP: %v, want connection refused (ICMP port unreachable)", err)
				})
			})
		}
	})
}

func TestExternalTrafficPolicyLocal(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	l.serve(remote, l.remote)
	r := l.renderer()
	l.resync(r,
		externalLocal(withNodePorts(dual("local", 1, podA, remote), 30080, 30053)),
		externalLocal(withExternalIPs(dual("remote-only", 2, remote))),
	)
	bothFamilies(t, func(t *testing.T, ip fam) {
		t.Run("external traffic goes to the local endpoint and keeps the client's address", func(t *testing.T) {
			for range 10 {
				expect(t, l.cliA, ip.node, 30080, 30053, answer{"pod-a", ip.clientA})
			}
		})
		t.Run("without a local endpoint, external traffic is dropped", func(t *testing.T) {
			expectNoAnswer(t, l.cliA, hostPort(ip.extIP, svcTCP))
		})
		t.Run("a pod of the node uses every endpoint", func(t *testing.T) {
			expect(t, l.podB, ip.extIP, svcTCP, svcUDP, answer{"remote", ip.podB})
		})
		t.Run("the cluster IP uses every endpoint", func(t *testing.T) {
			seen := map[string]bool{}
			poll.Eventually(t, 10*time.Second, func() error {
				a, err := askTCP(t.Context(), l.podB, hostPort(ip.cluster(1), svcTCP))
				if err != nil {
					return err
				}
				seen[a.backend] = true
				if !seen["remote"] || !seen["pod-a"] {
					return fmt.Errorf("backends seen: %v", seen)
				}
				return nil
			})
		})
	})
}

func TestAPodReachingItselfThroughItsServiceSeesTheNATLoopback(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	r := l.renderer()
	l.resync(r, dual("self", 1, podA))
	bothFamilies(t, func(t *testing.T, ip fam) {
		expect(t, l.podA, ip.cluster(1), svcTCP, svcUDP, answer{"pod-a", ip.loopback})
	})
}

func TestClientIPAffinity(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	l.serve(remote, l.remote)
	r := l.renderer()
	l.resync(r, withAffinity(dual("sticky", 1, podA, remote), 2*time.Second))
	bothFamilies(t, func(t *testing.T, ip fam) {
		addr := hostPort(ip.cluster(1), svcTCP)
		var first answer
		poll.Eventually(t, 10*time.Second, func() error {
			var err error
			first, err = askTCP(t.Context(), l.podB, addr)
			return err
		})
		for i := range 20 {
			got, err := askTCP(t.Context(), l.podB, addr)
			if err != nil || got != first {
				t.Fatalf("connection %d: %v %v, want %s like the first", i, got, err, first)
			}
		}
		if ip.name == "IPv6" {
			return // hashed: no timeout to wait for
		}
		// Once the client's entry times out, a new connection is spread
		// again: wait for the entry to expire, then try once; a new
		// entry is written if the same backend comes up again.
		poll.Eventually(t, 60*time.Second, func() error {
			out := l.node.Exec("nft", "list", "map", "inet", "vcoil-services", "affinity4-2")
			if strings.Contains(out, ip.podB+" . ") {
				return fmt.Errorf("the affinity entry of %s is still there", ip.podB)
			}
			got, err := askTCP(t.Context(), l.podB, addr)
			if err != nil {
				return err
			}
			if got == first {
				return fmt.Errorf("still %s", got)
			}
			return nil
		})
	})
}

func TestRemovedServicesAndEndpointsStopWorkingAndLeaveNoElements(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	l.serve(remote, l.remote)
	r := l.renderer()
	gone := withNodePorts(dual("gone", 1, podA), 30080, 30053)
	shrinking := dual("shrinking", 2, podA, remote)
	l.resync(r, gone, shrinking)
	bothFamilies(t, func(t *testing.T, ip fam) {
		expect(t, l.podB, ip.cluster(1), svcTCP, 0, answer{"pod-a", ip.podB})
	})
	if err := r.Update(t.Context(), &service.Changes{
		Delete: []service.ID{gone.ID},
		Upsert: []*service.Service{dual("shrinking", 2, podA)},
	}); err != nil {
		t.Fatalf("Update: %v", err)
	}
	table := l.ruleset()
	for _, stale := range []string{v4.cluster(1) + " ", v6.cluster(1) + " ", "30080", v4.remote, v6.remote} {
		if strings.Contains(table, stale) {
			t.Errorf("the table still holds %q:\n%s", stale, table)
		}
	}
	bothFamilies(t, func(t *testing.T, ip fam) {
		if a, err := askTCP(t.Context(), l.podB, hostPort(ip.cluster(1), svcTCP)); err == nil {
			t.Errorf("the deleted service still answers: %s", a)
		}
		for range 10 {
			expect(t, l.podB, ip.cluster(2), svcTCP, 0, answer{"pod-a", ip.podB})
		}
	})
}

func TestARestartedRendererAdoptsTheTableWithoutChangingIt(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	first := l.renderer()
	l.resync(first, everything()...)

	var conn net.Conn
	poll.Eventually(t, 10*time.Second, func() error {
		var err error
		conn, err = l.podB.Dial(t.Context(), "tcp", hostPort(v4.cluster(3), svcTCP)) // sticky-long: pod-a only
		return err
	})
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if a, err := readAnswer(conn); err != nil || a.backend != "pod-a" {
		t.Fatalf("before the restart: %v %v", a, err)
	}
	// The connection left an affinity entry, whose expiry counts down.
	expiry := regexp.MustCompile(` expires [0-9hms]+`)
	before := expiry.ReplaceAllString(l.ruleset(), "")

	second := l.renderer()
	l.resync(second, everything()...)
	if after := expiry.ReplaceAllString(l.ruleset(), ""); after != before {
		t.Fatalf("the second renderer changed the table:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if _, err := fmt.Fprintln(conn, "still there?"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "still there?\n" {
		t.Fatalf("the established connection after the restart: %q %v", buf[:n], err)
	}

	// A changed state on adoption changes only what differs.
	changed := everything()
	changed[0] = withNodePorts(dual("plain", 1, podA), 30080, 30053)
	l.resync(second, changed...)
	if after := l.ruleset(); after == before || !strings.Contains(after, "# handle") {
		t.Fatal("the changed state left the table as it was")
	}
}

func TestRemoveDeletesTheTableAndKubeProxyLeftoversGo(t *testing.T) {
	l := newLab(t)
	r := l.renderer()
	l.resync(r, dual("a", 1, podA))
	for _, fam := range []string{"ip", "ip6"} {
		l.node.Exec("nft", "add", "table", fam, "kube-proxy")
		l.node.Exec("nft", "add", "chain", fam, "kube-proxy", "services")
	}
	if err := RemoveKubeProxyTables(t.Context(), l.node.Path()); err != nil {
		t.Fatal(err)
	}
	if err := RemoveKubeProxyTables(t.Context(), l.node.Path()); err != nil {
		t.Fatalf("a second time, with nothing left: %v", err)
	}
	if err := r.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(t.Context()); err != nil {
		t.Fatalf("a second Remove: %v", err)
	}
	if out := l.node.Exec("nft", "list", "tables"); strings.TrimSpace(out) != "" {
		t.Fatalf("tables left in the node: %s", out)
	}
	if err := r.Update(t.Context(), &service.Changes{Delete: []service.ID{{Namespace: "default", Name: "a"}}}); err == nil {
		t.Fatal("Update after Remove succeeded; want a Resync first")
	}
}

func TestAffinityEntriesOfARemovedEndpointAreDeleted(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	l.serve(remote, l.remote)
	r := l.renderer()
	l.resync(r, withAffinity(dual("sticky", 1, podA, remote), time.Hour))
	addr := hostPort(v4.cluster(1), svcTCP)
	var first answer
	poll.Eventually(t, 10*time.Second, func() error {
		var err error
		first, err = askTCP(t.Context(), l.podB, addr)
		return err
	})
	entries := func() string {
		return l.node.Exec("nft", "list", "map", "inet", "vcoil-services", "affinity4-3600")
	}
	if !strings.Contains(entries(), v4.podB+" . "+v4.cluster(1)) {
		t.Fatalf("no affinity entry for %s after a connection:\n%s", v4.podB, entries())
	}
	// Keep only the endpoint the client did not get.
	kept := podA
	if first.backend == "pod-a" {
		kept = remote
	}
	if err := r.Update(t.Context(), &service.Changes{Upsert: []*service.Service{withAffinity(dual("sticky", 1, kept), time.Hour)}}); err != nil {
		t.Fatal(err)
	}
	if out := entries(); strings.Contains(out, v4.podB+" . ") {
		t.Fatalf("the entry pointing to the removed endpoint is still there:\n%s", out)
	}
	got, err := askTCP(t.Context(), l.podB, addr)
	if err != nil || got.backend != kept.name {
		t.Fatalf("after the removal: %v %v, want %s", got, err, kept.name)
	}
}

func TestAHostNetworkEndpointIsReachedThroughItsServiceFromTheNodeAndItsPods(t *testing.T) {
	l := newLab(t)
	// A host-network endpoint is an address of the node: the one the node
	// itself sends from towards the cluster IPs, so that the node's own
	// connections have the endpoint's address as source and destination.
	src := func(dst string) string {
		out := l.node.Exec("ip", "-o", "route", "get", dst)
		m := regexp.MustCompile(` src (\S+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no source address in %q", out)
		}
		return m[1]
	}
	host := backend{"node", src(v4.cluster(1)), src(v6.cluster(1)), true}
	l.serve(host, l.node)
	r := l.renderer()
	l.resync(r, dual("host", 1, host))
	bothFamilies(t, func(t *testing.T, ip fam) {
		t.Run("the node reaches it from one of its own addresses (not the NAT loopback, which routes nowhere on the node)", func(t *testing.T) {
			for _, c := range []struct {
				port uint16
				ask  func(context.Context, *netnstest.NS, string) (answer, error)
			}{{svcTCP, askTCP}, {svcUDP, askUDP}} {
				poll.Eventually(t, 10*time.Second, func() error {
					got, err := c.ask(t.Context(), l.node, hostPort(ip.cluster(1), c.port))
					if err != nil {
						return err
					}
					if got.backend != "node" || got.client == ip.loopback {
						return poll.Stop(fmt.Errorf("got %s", got))
					}
					return nil
				})
			}
		})
		t.Run("a pod keeps its address", func(t *testing.T) {
			expect(t, l.podB, ip.cluster(1), svcTCP, svcUDP, answer{"node", ip.podB})
		})
	})
}
