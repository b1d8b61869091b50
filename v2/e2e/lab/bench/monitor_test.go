package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// The tests write real nftables objects into a namespace of their own and
// read the kernel's notices of them: only addresses of EndpointRange and of
// the documentation ranges 198.51.100.0/24 and 203.0.113.0/24 (the
// ClusterIPs here) appear.

// monitorIn starts a monitor in a new namespace, stopped with the test.
func monitorIn(t *testing.T) (*netnstest.NS, *Monitor, context.Context) {
	t.Helper()
	ns := netnstest.New(t, "bench")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	m, err := StartMonitor(ctx, ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	return ns, m, ctx
}

// nftFile runs script with `nft -f` in ns: one transaction.
func nftFile(t testing.TB, ns *netnstest.NS, script string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rules.nft")
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	ns.Exec("nft", "-f", file)
}

// settle writes marker in a transaction of its own and waits for it: the
// kernel commits one transaction at a time and notifies in that order, so
// that everything written before has been read by then.
func settle(t *testing.T, ctx context.Context, ns *netnstest.NS, m *Monitor, marker netip.Addr) {
	t.Helper()
	wait := m.Expect(marker)
	nftFile(t, ns, fmt.Sprintf("table inet marker { set s { type ipv4_addr; }; }\nadd element inet marker s { %s }\n", marker))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// seenAddrs lists the addresses seen since Reset, marker left out.
func seenAddrs(m *Monitor, marker netip.Addr) []netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []netip.Addr
	for a := range m.seen {
		if a != marker {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// vcoilLike is vcoil's form: maps of frontend (ClusterIP . protocol .
// port) to endpoint (address . port), the hairpin set of address pairs
// (here with the endpoint second), a verdict map, an interval set. Its endpoint addresses are
// vcoilLikeAddrs; the others lie outside EndpointRange, or are only text
// (a chain's comment, an element's comment), or end an interval.
const vcoilLike = `table inet vcoil-test {
	map backends4-0 { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service; }
	set hairpin4 { type ipv4_addr . ipv4_addr; }
	set ranges4 { type ipv4_addr; flags interval; }
	map services4 { type ipv4_addr . inet_proto . inet_service : verdict; }
	chain endpoint4-0 { comment "10.200.9.9"; }
}
add element inet vcoil-test backends4-0 { 203.0.113.16 . tcp . 80 : 10.200.0.4 . 8080, 203.0.113.17 . tcp . 80 : 198.51.100.4 . 8080, 203.0.113.18 . udp . 53 comment "10.200.9.8" : 10.207.255.254 . 53 }
add element inet vcoil-test backends4-0 { 203.0.113.19 . tcp . 80 : 10.199.255.255 . 80, 203.0.113.20 . tcp . 80 : 10.208.0.0 . 80 }
add element inet vcoil-test hairpin4 { 198.51.100.6 . 10.200.0.6, 198.51.100.5 . 203.0.113.5 }
add element inet vcoil-test ranges4 { 10.200.7.1-10.200.7.5 }
add element inet vcoil-test services4 { 203.0.113.16 . tcp . 80 : goto endpoint4-0 }
`

var vcoilLikeAddrs = addrs("10.200.0.4", "10.207.255.254", "10.200.0.6", "10.200.7.1")

// kubeProxyLike is kube-proxy's form (nftables mode): an endpoint's
// address in its chain's rules, `ip saddr` (a cmp) and `dnat to` (an
// immediate), and as text in the chain's name. The chains with only one of
// the two rules tell that each is read.
const kubeProxyLike = `table ip kube-proxy-test {
	chain nat-prerouting { type nat hook prerouting priority dstnat; policy accept; jump services; }
	chain mark-for-masquerade { meta mark set meta mark or 0x4000; }
	chain services { ip daddr 203.0.113.16 tcp dport 80 goto service-x; }
	chain service-x { numgen random mod 2 vmap { 0 : goto endpoint-a, 1 : goto endpoint-b }; }
	chain endpoint-a { ip saddr 10.200.1.2 jump mark-for-masquerade; meta l4proto tcp dnat to 10.200.1.2:80; }
	chain endpoint-b { ip saddr 10.200.1.3 jump mark-for-masquerade; meta l4proto tcp dnat to 10.200.1.3:8080; }
	chain dnat-only { meta l4proto tcp dnat to 10.200.1.4:80; }
	chain saddr-only { ip saddr 10.200.1.5 jump mark-for-masquerade; }
	chain endpoint-X-ns/svc/tcp/http__10.200.1.9/80 { ip saddr 198.51.100.7 accept; ip daddr 10.208.0.1 accept; }
}
`

var kubeProxyLikeAddrs = addrs("10.200.1.2", "10.200.1.3", "10.200.1.4", "10.200.1.5")

func TestMonitorSeesVcoilsMapElements(t *testing.T) {
	ns, m, ctx := monitorIn(t)
	nftFile(t, ns, vcoilLike)
	settle(t, ctx, ns, m, ChangeAddr(0))
	if got := seenAddrs(m, ChangeAddr(0)); !slices.Equal(got, vcoilLikeAddrs) {
		t.Errorf("seen %v, want %v", got, vcoilLikeAddrs)
	}
}

func TestMonitorSeesKubeProxysRules(t *testing.T) {
	ns, m, ctx := monitorIn(t)
	nftFile(t, ns, kubeProxyLike)
	settle(t, ctx, ns, m, ChangeAddr(0))
	if got := seenAddrs(m, ChangeAddr(0)); !slices.Equal(got, kubeProxyLikeAddrs) {
		t.Errorf("seen %v, want %v", got, kubeProxyLikeAddrs)
	}
}

// Deleted elements and rules name their addresses too, and a deleted
// table's objects go with it: none of it is a sighting.
func TestMonitorCountsNoDeletion(t *testing.T) {
	ns, m, ctx := monitorIn(t)
	nftFile(t, ns, vcoilLike+kubeProxyLike)
	settle(t, ctx, ns, m, ChangeAddr(0))
	if got, want := m.Count(), len(vcoilLikeAddrs)+len(kubeProxyLikeAddrs)+1; got != want {
		t.Fatalf("%d addresses before the deletions, want %d", got, want)
	}
	m.Reset()
	ns.Exec("nft", "delete element inet vcoil-test backends4-0 { 203.0.113.16 . tcp . 80 }; delete element inet vcoil-test hairpin4 { 198.51.100.6 . 10.200.0.6 }")
	ns.Exec("nft", "flush chain ip kube-proxy-test endpoint-a")
	ns.Exec("nft", "delete table inet vcoil-test; delete table ip kube-proxy-test")
	settle(t, ctx, ns, m, ChangeAddr(1))
	if got := seenAddrs(m, ChangeAddr(1)); len(got) != 0 {
		t.Errorf("the deletions brought %v", got)
	}
	if got := m.Count(); got != 1 {
		t.Errorf("%d addresses after the deletions, want only the marker's", got)
	}
}

// 20,000 elements in one transaction (a full sync writes 100,000) are all
// counted, dated by the kernel's notice of their commit, without an
// overflow.
func TestMonitorCountsABigTransactionWhole(t *testing.T) {
	ns, m, ctx := monitorIn(t)
	const n = 20000
	want := map[netip.Addr]bool{}
	var elems []string
	for i := range n {
		a := EndpointAddr(i/EndpointsPerService, i%EndpointsPerService)
		want[a] = true
		elems = append(elems, fmt.Sprintf("203.0.113.%d . tcp . %d : %s . 8080", i%200+1, i/200+1, a))
	}
	script := "table inet bench {\nmap backends4-0 { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service; }\n}\n" +
		"add element inet bench backends4-0 { " + strings.Join(elems, ", ") + " }\n"
	before := time.Now()
	nftFile(t, ns, script)
	after := time.Now()
	at, err := m.WaitCount(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	// The notice is dated when the monitor read it: on a loaded machine
	// its reader may run a moment after nft has returned.
	if at.Before(before) || at.After(after.Add(time.Second)) {
		t.Errorf("the transaction is dated %s, outside the nft run %s..%s", at.Format(time.StampMicro), before.Format(time.StampMicro), after.Format(time.StampMicro))
	}
	m.mu.Lock()
	for a, seen := range m.seen {
		if !want[a] {
			t.Errorf("%s seen, not written", a)
		}
		if !seen.Equal(at) {
			t.Errorf("%s dated %s, not by its transaction's commit at %s", a, seen.Format(time.StampMicro), at.Format(time.StampMicro))
			break
		}
	}
	m.mu.Unlock()
	if got := m.Count(); got != n {
		t.Errorf("%d addresses, want %d", got, n)
	}
	if lost := m.Lost(); lost > 0 {
		t.Errorf("the monitor's socket overflowed %d times", lost)
	}
}

// An address expected before the change that brings it is dated by its
// transaction's commit, after the change began; one already seen is
// answered at once, one never written not at all.
func TestMonitorExpectDatesAChange(t *testing.T) {
	ns, m, ctx := monitorIn(t)
	nftFile(t, ns, vcoilLike)
	wait := m.Expect(ChangeAddr(0))
	start := time.Now()
	ns.Exec("nft", "add", "element", "inet", "vcoil-test", "backends4-0", "{ 203.0.113.30 . tcp . 80 : "+ChangeAddr(0).String()+" . 8080 }")
	end := time.Now()
	seen, err := wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if seen.Before(start) || seen.After(end.Add(time.Second)) {
		t.Errorf("the change made %s..%s was dated %s", start.Format(time.StampMicro), end.Format(time.StampMicro), seen.Format(time.StampMicro))
	}
	again, err := m.Expect(ChangeAddr(0))(ctx)
	if err != nil || !again.Equal(seen) {
		t.Errorf("expected again: %s, %v; want %s", again.Format(time.StampMicro), err, seen.Format(time.StampMicro))
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if at, err := m.Expect(ChangeAddr(1))(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an address never written: %s, %v", at, err)
	}
}

// A transaction's addresses count only once its NEWGEN is read, and are
// dated by it: fed the kernel's notices of one transaction without the
// last, the monitor has nothing yet.
func TestMonitorCountsATransactionAtItsCommit(t *testing.T) {
	dgrams := recordNotices(t, vcoilLike+kubeProxyLike)
	last := len(dgrams) - 1
	msgs := parseNotices(t, dgrams)
	if len(msgs[last]) != 1 || msgs[last][0].Header.Type != NFNLSubsysNFTables<<8|nftMsgNewGen {
		t.Fatalf("the transaction's last notice is not its NEWGEN: %+v", msgs[last])
	}
	m := newMonitor()
	t0 := time.Now()
	for i, d := range msgs[:last] {
		m.notices(t0.Add(time.Duration(i)*time.Millisecond), d)
	}
	if got := m.Count(); got != 0 {
		t.Fatalf("%d addresses before the commit", got)
	}
	committed := t0.Add(time.Hour)
	m.notices(committed, msgs[last])
	want := slices.Concat(vcoilLikeAddrs, kubeProxyLikeAddrs)
	slices.SortFunc(want, netip.Addr.Compare)
	if got := seenAddrs(m, netip.Addr{}); !slices.Equal(got, want) {
		t.Errorf("seen %v, want %v", got, want)
	}
	for a, at := range m.seen {
		if !at.Equal(committed) {
			t.Errorf("%s dated %s, want the commit's %s", a, at, committed)
		}
	}
}

// recordNotices runs script with `nft -f` in a new namespace and returns
// the datagrams of the kernel's notices of it, up to its NEWGEN. An
// overflow fails: the record must be whole.
func recordNotices(tb testing.TB, script string) [][]byte {
	tb.Helper()
	ns := netnstest.New(tb, "record")
	fd, err := NFTablesSocket(ns.Path())
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
	type result struct {
		dgrams [][]byte
		err    error
	}
	ch := make(chan result, 1)
	go func() {
		defer unix.Close(fd)
		var r result
		buf := make([]byte, 1<<20)
		for {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			switch {
			case (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) && ctx.Err() == nil:
				// The receive timeout: nft takes its time before it
				// commits.
				continue
			case err != nil:
				r.err = err
				ch <- r
				return
			}
			r.dgrams = append(r.dgrams, slices.Clone(buf[:n]))
			msgs, err := syscall.ParseNetlinkMessage(buf[:n])
			if err == nil && len(msgs) > 0 && msgs[len(msgs)-1].Header.Type == NFNLSubsysNFTables<<8|nftMsgNewGen {
				ch <- r
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-ch
	}()
	nftFile(tb, ns, script)
	r := <-ch
	ch <- r
	if r.err != nil {
		tb.Fatalf("read the notices of the transaction: %v", r.err)
	}
	return r.dgrams
}

// processCPU is the user and system time the test process has used.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func parseNotices(tb testing.TB, dgrams [][]byte) [][]syscall.NetlinkMessage {
	tb.Helper()
	var out [][]syscall.NetlinkMessage
	for _, d := range dgrams {
		msgs, err := syscall.ParseNetlinkMessage(d)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, msgs)
	}
	return out
}

// BenchmarkMonitorDecode measures the monitor's CPU per 10,000 endpoint
// addresses (one op), fed the kernel's notices of one transaction,
// recorded once in a namespace: vcoil's form (10,000 map elements) and
// kube-proxy's (10,000 endpoint chains of two rules). An op parses the
// datagrams, decodes them and counts the addresses at the commit, in a new
// monitor; the socket's reads are left out.
func BenchmarkMonitorDecode(b *testing.B) {
	const n = 10000
	var vcoil, kubeProxy strings.Builder
	vcoil.WriteString("table inet bench {\nmap backends4-0 { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service; }\n}\nadd element inet bench backends4-0 { ")
	kubeProxy.WriteString("table ip bench {\n")
	for i := range n {
		a := EndpointAddr(i/EndpointsPerService, i%EndpointsPerService)
		if i > 0 {
			vcoil.WriteString(", ")
		}
		fmt.Fprintf(&vcoil, "203.0.113.%d . tcp . %d : %s . 8080", i%200+1, i/200+1, a)
		fmt.Fprintf(&kubeProxy, "chain endpoint-%d { ip saddr %s jump mark-for-masquerade; meta l4proto tcp dnat to %s:8080; }\n", i, a, a)
	}
	vcoil.WriteString(" }\n")
	kubeProxy.WriteString("chain mark-for-masquerade { meta mark set meta mark or 0x4000; }\nchain nat { type nat hook prerouting priority dstnat; }\n}\n")
	for _, bc := range []struct{ name, script string }{
		{"vcoil-map-elements", vcoil.String()},
		{"kube-proxy-rules", kubeProxy.String()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			dgrams := recordNotices(b, bc.script)
			var size int
			for _, d := range dgrams {
				size += len(d)
			}
			b.SetBytes(int64(size))
			now := time.Now()
			cpu0 := processCPU(b)
			for b.Loop() {
				m := newMonitor()
				for _, d := range dgrams {
					msgs, err := syscall.ParseNetlinkMessage(d)
					if err != nil {
						b.Fatal(err)
					}
					m.notices(now, msgs)
				}
				if m.Count() != n {
					b.Fatalf("%d addresses, want %d", m.Count(), n)
				}
			}
			// The lab's machine is shared: the process's CPU time, the
			// garbage collector's included, tells the cost better than
			// ns/op, the wall time.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
		})
	}
}
