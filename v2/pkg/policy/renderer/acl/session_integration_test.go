package acl

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"go.fd.io/govpp/binapi/acl_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// What VPP does to a pod's connections when its policy changes, with the
// ACL plugin's session reclassification off and on, and with two
// reflective ACLs: the Contiv/VPP design's (permit and reflect every
// packet) and vcoil's (reflect a TCP SYN only). Pod s admits a and b;
// then only a, either by a change of its table (the renderer replaces the
// ACL in place: s's lists stay) or by a move to another table (s shared
// its table with pod t: the dataplane adds the new ACL to s's output side
// and removes the old one). The renderer turns reclassification on; the
// test sets the case's value after the first transaction. Recorded in
// docs/policy.md#vpp-acls. After the change:
//
//   - allowed: a's connection to s goes on (a sends, s answers);
//   - denied: on b's connection, s pushes a line first (as a retransmission
//     or a server push would), b reads it, then b sends: the connection
//     should be cut;
//   - outgoing: s's own connection to a: a pushes a line first, then s
//     sends one and a echoes it, then a pushes again: s should get all.
func TestRealVPPSessionsWhenAPolicyChanges(t *testing.T) {
	type outcome struct{ allowed, denied, outgoing bool }
	for _, tc := range []struct {
		name       string
		move       bool
		reflective []acl_types.ACLRule
		reclassify int
		want       outcome
		// racy: whether s's own connection passes depends on timing.
		racy bool
	}{
		{"table replaced, reflect everything, reclassify 0", false, reflectEverything(), 0, outcome{true, true, true}, false},
		{"table replaced, reflect everything, reclassify 1", false, reflectEverything(), 1, outcome{true, true, true}, false},
		{"table replaced, reflect TCP SYN only, reclassify 0", false, vpp.ReflectiveRules(), 0, outcome{true, false, true}, false},
		{"table replaced, reflect TCP SYN only, reclassify 1 (vcoil)", false, vpp.ReflectiveRules(), 1, outcome{true, false, true}, false},
		// s's own connection: cut, unless s happens to send on it after
		// the change and before a pushes (a delayed ACK does), which makes
		// a new session: both were seen.
		{"moved to another table, reflect everything, reclassify 0", true, reflectEverything(), 0, outcome{true, true, false}, true},
		{"moved to another table, reflect everything, reclassify 1", true, reflectEverything(), 1, outcome{true, true, true}, false},
		{"moved to another table, reflect TCP SYN only, reclassify 0", true, vpp.ReflectiveRules(), 0, outcome{true, false, false}, false},
		{"moved to another table, reflect TCP SYN only, reclassify 1 (vcoil)", true, vpp.ReflectiveRules(), 1, outcome{true, false, true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newITEnv(t, "a", "b", "s", "t")
			a, b, s, tt := e.pods["a"], e.pods["b"], e.pods["s"], e.pods["t"]
			e.r.reflective = tc.reflective
			others := []renderer.PodRules{unrestricted(a), unrestricted(b), unrestricted(tt)}
			if tc.move {
				others[2] = admits(tt, a, b)
			}
			e.render(append(others, admits(s, a, b))...)
			e.cli(fmt.Sprintf("set acl-plugin reclassify-sessions %d", tc.reclassify))
			e.reaches(a, s)
			e.reaches(b, s)
			fromA, err := e.connect(a, s, 8080)
			if err != nil {
				t.Fatal(err)
			}
			fromB, err := e.connect(b, s, 9090)
			if err != nil {
				t.Fatal(err)
			}
			out, err := e.connect(s, a, 9090)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []*itConn{fromA, fromB, out} {
				if err := c.echo(); err != nil {
					t.Fatalf("before the change: %v", err)
				}
			}
			a.push <- struct{}{}
			if err := out.pushed(); err != nil {
				t.Fatalf("before the change: %v", err)
			}
			tableBefore := e.r.pods[s.id].table

			e.render(admits(s, a)) // b is now denied
			if moved := e.r.pods[s.id].table != tableBefore; moved != tc.move {
				t.Fatalf("s's table %s -> %s: moved %t, want %t", tableBefore, e.r.pods[s.id].table, moved, tc.move)
			}
			e.refused(b, s)
			e.reaches(a, s)
			allowed := fromA.echo()
			s.push <- struct{}{}
			denied := fromB.pushed()
			if denied == nil {
				denied = fromB.echo()
			}
			a.push <- struct{}{}
			outgoing := out.pushed()
			if outgoing == nil {
				outgoing = out.echo()
			}
			if outgoing == nil {
				a.push <- struct{}{}
				outgoing = out.pushed()
			}
			t.Logf("%s: a's connection (allowed): %s; b's connection after s pushed (denied): %s; s's own connection, a pushing, s sending, a pushing: %s",
				tc.name, errString(allowed), errString(denied), errString(outgoing))
			got := outcome{allowed == nil, denied == nil, outgoing == nil}
			if tc.racy {
				got.outgoing = tc.want.outgoing
			}
			if got != tc.want {
				t.Errorf("connections that pass: %+v, want %+v", got, tc.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "passes"
	}
	return "fails (" + err.Error() + ")"
}

// reflectEverything is the reflective ACL of the Contiv/VPP design, which
// vcoil does not use: permit and reflect every packet. The session test
// compares it with vpp.ReflectiveRules.
func reflectEverything() []acl_types.ACLRule {
	out := make([]acl_types.ACLRule, 0, 2)
	for _, all := range []netip.Prefix{anyIPv4, anyIPv6} {
		out = append(out, acl_types.ACLRule{
			IsPermit:  acl_types.ACL_ACTION_API_PERMIT_REFLECT,
			SrcPrefix: vppapi.Prefix(all), DstPrefix: vppapi.Prefix(all),
			SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeLast: 65535,
		})
	}
	return out
}

// A full session table: the reflective ACL cannot record a new session,
// and VPP drops the packet that wanted one, so an isolated pod cannot open
// connections any more while the connections it holds go on. The table is
// shrunk to 4 entries here (VPP adds a session while the count plus the
// number of threads, 1, stays below the maximum: 3 sessions); its default
// size is 500,000 (startup.conf's acl-plugin { connection count max }).
func TestRealVPPAFullSessionTableDropsNewConnections(t *testing.T) {
	e := newITEnv(t, "a", "s")
	a, s := e.pods["a"], e.pods["s"]
	e.cli("set acl-plugin session table max-entries 4")
	e.render(unrestricted(a), admits(s))
	var held []*itConn
	for i := range 3 {
		c, err := e.connect(s, a, 8080)
		if err != nil {
			t.Fatalf("connection %d of s: %v", i+1, err)
		}
		held = append(held, c)
	}
	if _, err := e.connect(s, a, 8080); err == nil {
		t.Fatal("s opened a fourth connection with a full session table")
	}
	for i, c := range held {
		if err := c.echo(); err != nil {
			t.Fatalf("connection %d of s with a full session table: %v", i+1, err)
		}
	}
	if out := e.cli("show errors"); !strings.Contains(out, "too many sessions to add new") {
		t.Fatalf("VPP's error counters do not count the dropped packets:\n%s", out)
	}
}
