package nftables

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// format1Services is the model that testdata/format1/services.nft was
// rendered from, by the renderer before format versions (commit 2711c05),
// in this lab.
func format1Services() []*service.Service {
	return []*service.Service{
		withNodePorts(dual("plain", 1, podA, remote), 30080, 30053),
		withAffinity(dual("sticky", 2, podA), 3*time.Second),
	}
}

// loadFormat1 writes the format 1 table into the lab's node: the script
// the old renderer ran (nft cannot read back its listing of the affinity
// rules), checked against the old renderer's listing.
func (l *lab) loadFormat1() {
	l.t.Helper()
	path, err := filepath.Abs("testdata/format1/services.script.nft")
	if err != nil {
		l.t.Fatal(err)
	}
	l.node.Exec("nft", "-f", path)
	listing, err := os.ReadFile("testdata/format1/services.nft")
	if err != nil {
		l.t.Fatal(err)
	}
	if got := l.node.Exec("nft", "list", "table", "inet", "vcoil-services"); got != string(listing) {
		l.t.Fatalf("the format 1 script does not make the format 1 table:\n%s", got)
	}
}

// heldConn is a TCP connection through a frontend, kept open across a
// change of the table.
type heldConn struct {
	c    net.Conn
	r    *bufio.Reader
	name string
}

func (l *lab) hold(from string, dial func() (net.Conn, error)) *heldConn {
	l.t.Helper()
	c, err := dial()
	if err != nil {
		l.t.Fatalf("%s: %v", from, err)
	}
	l.t.Cleanup(func() { c.Close() })
	h := &heldConn{c: c, r: bufio.NewReader(c), name: from}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := h.r.ReadString('\n'); err != nil {
		l.t.Fatalf("%s: no greeting: %v", from, err)
	}
	h.echo(l.t, "before")
	return h
}

// echo sends a line and wants it back.
func (h *heldConn) echo(t *testing.T, line string) {
	t.Helper()
	_ = h.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintln(h.c, line); err != nil {
		t.Fatalf("%s: send %q: %v", h.name, line, err)
	}
	got, err := h.r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("%s: echo of %q = %q, %v", h.name, line, got, err)
	}
}

// tableHandle is the handle nft gives the table: a table deleted and made
// again gets a new one (the handles of its chains start again from the
// same numbers, and cannot tell).
func tableHandle(t *testing.T, table string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^table inet vcoil-services \{ # handle ([0-9]+)$`).FindStringSubmatch(table)
	if m == nil {
		t.Fatalf("no table handle in:\n%s", table)
	}
	return m[1]
}

// withoutTimers drops the lines of a canonical table that the packet path
// writes (affinity entries, with their timers) and the blank ones.
func withoutTimers(table string) string {
	var out []string
	for _, l := range strings.Split(table, "\n") {
		if l != "" && !strings.Contains(l, " expires ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The upgrade from the renderer before format versions: the new renderer
// finds the old table and adopts it in place, in one transaction that only
// adds the format set. A connection held through a cluster IP and one
// through a node port carry data across the upgrade, and new connections
// work before and after.
func TestAFormat1TableIsAdoptedInPlaceAndTrafficFlowsAcrossTheUpgrade(t *testing.T) {
	l := newLab(t)
	l.serve(podA, l.podA)
	l.serve(remote, l.remote)
	l.loadFormat1()
	before := l.ruleset()
	handle := tableHandle(t, before)
	if strings.Contains(before, "set format") {
		t.Fatal("the format 1 fixture has a format set")
	}
	bothFamilies(t, func(t *testing.T, ip fam) {
		expect(t, l.podB, ip.cluster(2), svcTCP, svcUDP, answer{"pod-a", ip.podB})
	})
	var held []*heldConn
	for _, ip := range []fam{v4, v6} {
		cluster, nodePort := hostPort(ip.cluster(2), svcTCP), hostPort(ip.node, 30080)
		held = append(held,
			l.hold("pod-b to "+cluster, func() (net.Conn, error) { return l.podB.Dial(t.Context(), "tcp", cluster) }),
			l.hold("client-a to "+nodePort, func() (net.Conn, error) { return l.cliA.Dial(t.Context(), "tcp", nodePort) }))
	}

	r := l.renderer()
	l.resync(r, format1Services()...)

	after := l.ruleset()
	if got := tableHandle(t, after); got != handle {
		t.Fatalf("the table was made again, not adopted: handle %s, was %s", got, handle)
	}
	wantSet := "set format {\ntype ipv4_addr\ncomment \"vcoil services v2\"\n}"
	// The affinity entries that the traffic recorded (with their timers)
	// are the packet path's, not the renderer's.
	if got, want := withoutTimers(canonical(after)), withoutTimers(canonical(before+"\n"+wantSet)); got != want {
		t.Errorf("adoption changed more than the format set:\nwant:\n%s\ngot:\n%s", want, got)
	}
	for _, h := range held {
		h.echo(t, "after the upgrade")
	}
	bothFamilies(t, func(t *testing.T, ip fam) {
		expect(t, l.podB, ip.cluster(2), svcTCP, svcUDP, answer{"pod-a", ip.podB})
		// The node port's service has two backends, either may answer.
		target := hostPort(ip.node, 30080)
		poll.Eventually(t, 10*time.Second, func() error {
			got, err := askTCP(t.Context(), l.cliA, target)
			if err != nil {
				return fmt.Errorf("TCP to %s: %w", target, err)
			}
			if got.backend != "pod-a" && got.backend != "remote" {
				return poll.Stop(fmt.Errorf("TCP to %s: answered by %s", target, got))
			}
			return nil
		})
	})
}

// A downgrade: the table was written by a newer vcoild. The renderer
// refuses it with an error naming the table and both versions, and leaves
// it exactly as it was, however different the state it was asked for.
func TestATableOfANewerFormatIsRefusedAndLeftUnchanged(t *testing.T) {
	l := newLab(t)
	l.loadFormat1()
	l.node.Exec("nft", "add", "set", "inet", "vcoil-services", "format", `{ type ipv4_addr; comment "vcoil services v3"; }`)
	before := l.ruleset()
	r := l.renderer()
	st := &service.State{Node: l.nodeModel(), Services: map[service.ID]*service.Service{}}
	err := r.Resync(t.Context(), st)
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 3 || ne.Known != formatversion.ServiceTable {
		t.Fatalf("Resync = %v, want a refusal of format 3", err)
	}
	for _, want := range []string{"nftables table inet vcoil-services", "format version 3", "this vcoild's 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q lacks %q", err, want)
		}
	}
	if after := l.ruleset(); after != before {
		t.Fatalf("the newer table changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if err := r.Update(t.Context(), &service.Changes{Delete: []service.ID{{Namespace: "default", Name: "plain"}}}); err == nil {
		t.Fatal("an Update after the refusal succeeded")
	}
}
