package acl

import (
	"slices"
	"strings"
	"testing"
	"time"

	"go.fd.io/govpp/binapi/acl"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// TestRealVPPPolicy runs the renderer on vcoil's VPP driver against a real
// VPP (VCOIL_VPP_BIN) with three pods and checks real traffic: pod s admits
// TCP from a only, then from b only; b's egress policy is enforced on a
// (CombineRules) while a's own connections to b get their replies through
// the reflective ACL; after a VPP restart, Resync puts it all back.
func TestRealVPPPolicy(t *testing.T) {
	e := newITEnv(t, "a", "b", "s")
	a, b, s := e.pods["a"], e.pods["b"], e.pods["s"]
	for _, p := range []*itPod{a, b, s} {
		for _, q := range []*itPod{a, b, s} {
			if p != q {
				e.reaches(p, q)
			}
		}
	}
	if err := e.r.Render(e.ctx, renderer.Txn{Resync: true, Pods: []renderer.PodRules{unrestricted(a), unrestricted(b), admits(s, a)}}); err != nil {
		t.Fatal(err)
	}
	t.Run("s admits TCP from a only", func(t *testing.T) {
		e.reaches(a, s)
		e.refused(b, s)
		// s's own connections: their replies pass s's output ACL through
		// the sessions of the reflective ACL on its input.
		e.reaches(s, a)
		e.reaches(s, b)
		pings(t, e, s, b, true)
		pings(t, e, b, s, false)
		table := e.r.pods[s.id].table
		if n := e.matched(string(table)); n < 3 {
			t.Fatalf("the hit counter of s's table %s is %v, want at least the 3 refused connections", table, n)
		}
		if n := e.matched("reflect"); n == 0 {
			t.Fatal("the hit counter of the reflective ACL is 0")
		}
		t.Logf("hit counters: s's table %s %v packets, the reflective ACL %v", table, e.matched(string(table)), e.matched("reflect"))
	})
	t.Run("s admits TCP from b only", func(t *testing.T) {
		e.render(admits(s, b))
		e.reaches(b, s)
		e.refused(a, s)
		e.reaches(s, a)
	})
	// b may send only to s's TCP 8080: a (local) gets a table that denies
	// b, and the global table holds b's rules on the host interconnect.
	egressB := unrestricted(b)
	egressB.Egress = []renderer.Rule{{Action: renderer.ActionPermit, Protocol: renderer.ProtocolTCP,
		DstNetwork: renderer.HostNetwork(s.ip), SrcPort: renderer.AnyPort, DstPort: renderer.SinglePort(8080)}, renderer.DenyAll}
	check := func(t *testing.T) {
		e.reaches(b, s)
		e.refused(b, a)
		e.refused(a, s)
		e.reaches(a, b)
		e.reaches(s, a)
	}
	t.Run("b may send only to s on TCP 8080", func(t *testing.T) {
		e.render(egressB)
		check(t)
		tags := vcoilACLs(t, e)
		if want := []string{"vcoil-pol@2 global", "vcoil-pol@2 local-1", "vcoil-pol@2 local-2", "vcoil-pol@2 reflect"}; !slices.Equal(tags, want) {
			t.Fatalf("VPP's policy ACLs: %v, want %v", tags, want)
		}
	})
	t.Run("after a VPP restart, Resync renders it all again", func(t *testing.T) {
		drain := e.d.Resynced()
		select {
		case <-drain:
		default:
		}
		e.v.Restart()
		select {
		case <-drain:
		case <-time.After(30 * time.Second):
			t.Fatal("the driver did not sync the restarted VPP")
		}
		// The pods are open until the renderer syncs.
		e.reaches(b, a)
		if err := e.r.Resync(e.ctx); err != nil {
			t.Fatal(err)
		}
		check(t)
		if tags := vcoilACLs(t, e); len(tags) != 4 {
			t.Fatalf("VPP's policy ACLs after the resync: %v", tags)
		}
		// b's refused connections to a hit a's table in the new VPP.
		if table := e.r.pods[a.id].table; e.matched(string(table)) < 3 {
			t.Fatalf("the hit counter of a's table %s after the restart: %v", table, e.matched(string(table)))
		}
	})
}

// pings checks that from's ICMP echo to to passes or not.
func pings(t *testing.T, e *itEnv, from, to *itPod, want bool) {
	t.Helper()
	if want {
		poll.Eventually(t, 10*time.Second, func() error { return from.ns.Ping(e.ctx, to.ip.String()) })
		return
	}
	for range 2 {
		if from.ns.Ping(e.ctx, to.ip.String()) == nil {
			t.Fatalf("pod %s pinged pod %s, which its policy denies", from.name, to.name)
		}
	}
}

// vcoilACLs are the tags of the renderer's ACLs in VPP, sorted.
func vcoilACLs(t *testing.T, e *itEnv) []string {
	t.Helper()
	ch, done := e.v.Connect(t)
	defer done()
	var tags []string
	err := vppapi.Dump(ch, &acl.ACLDump{ACLIndex: ^uint32(0)}, func() *acl.ACLDetails { return &acl.ACLDetails{} }, func(d *acl.ACLDetails) {
		if strings.HasPrefix(d.Tag, tagKind+"@") {
			tags = append(tags, d.Tag)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(tags)
	return tags
}
