package vpp

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.fd.io/govpp/api"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// podUp is whether the fake VPP holds interface sw admin-up.
func (h *harness) podUp(sw uint32) bool {
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	i := h.vpp.ifs[sw]
	return i != nil && i.up
}

func (h *harness) wantDown(what string, sws ...uint32) {
	h.t.Helper()
	for _, sw := range sws {
		if h.podUp(sw) {
			h.t.Fatalf("%s: pod interface %d is up, want it held down", what, sw)
		}
	}
}

// setFlagsOf are the sw_interface_set_flags requests among msgs.
func setFlagsOf(msgs []string) []string {
	var out []string
	for _, m := range msgs {
		if strings.HasPrefix(m, "sw_interface_set_flags ") {
			out = append(out, m)
		}
	}
	return out
}

// With the policy stack on, pods wired into an incarnation before the
// policies' ACL lists are in it stay down: at start, and after a VPP
// restart, while the policy resync fails; ReleasePods brings them up only
// after the lists are set, each list before its interface's
// sw_interface_set_flags. A pod wired after the release comes up at once.
func TestPodsStayDownUntilTheirPolicyACLsAreInTheIncarnation(t *testing.T) {
	cfg := testConfig()
	cfg.HoldPodsForPolicies = true
	h := start(t, cfg)
	h.vpp.take()

	// Incarnation 1: vcoild starts; the policies have not synced yet.
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	if got := setFlagsOf(h.vpp.take()); len(got) > 0 {
		t.Fatalf("a pod wired before the policies' sync was set up: %v", got)
	}
	h.wantDown("a new pod before the policies' sync", 3)
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatalf("SetupPod again on a held pod: %v", err)
	}
	wantLines(t, "SetupPod again on a held pod (read back, not wired again)", h.vpp.take(), []string{"sw_interface_dump 3"})
	if err := h.d.CheckPod(ctx(t), podA); err == nil || !strings.Contains(err.Error(), "held down until the network policies are in VPP") {
		t.Fatalf("CheckPod of a held pod = %v, want it held", err)
	}
	h.vpp.take()
	if err := h.d.ReleasePods(ctx(t)); err == nil || !strings.Contains(err.Error(), "not in VPP incarnation 1 yet") {
		t.Fatalf("ReleasePods before the policies' lists = %v, want a refusal", err)
	}
	wantLines(t, "a refused release", h.vpp.take(), nil)
	h.wantDown("after a refused release", 3)

	isolate := []ACLSetting{{Interface: ACLInterface{Pod: podA.IPv4}, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{1}}}}
	if err := h.d.SetACLLists(ctx(t), 1, ACLPolicy, isolate); err != nil {
		t.Fatal(err)
	}
	if err := h.d.ReleasePods(ctx(t)); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the policies' sync, then the release", h.vpp.take(), []string{
		"acl_interface_set_acl_list 3 count=3 n_input=2 acls=[100 0 1]",
		"sw_interface_set_flags 3 flags=1",
	})
	if err := h.d.CheckPod(ctx(t), podA); err != nil {
		t.Fatalf("CheckPod after the release: %v", err)
	}
	h.vpp.take()
	if err := h.d.ReleasePods(ctx(t)); err != nil {
		t.Fatalf("ReleasePods again: %v", err)
	}
	wantLines(t, "ReleasePods again", h.vpp.take(), nil)

	// After the release a new pod comes up as it is wired.
	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	if got := setFlagsOf(h.vpp.take()); !slices.Equal(got, []string{"sw_interface_set_flags 4 flags=1"}) {
		t.Fatalf("a pod wired after the release: %v, want it set up", got)
	}

	// Incarnation 2: VPP restarts. The replay wires both pods again and
	// leaves them down; the node's interfaces come up as before.
	h.vpp.restart()
	if inc := waitSynced(t, h, 101); inc != 2 {
		t.Fatalf("incarnation %d after a restart, want 2", inc)
	}
	replay := h.vpp.take()
	if got := setFlagsOf(replay); !slices.Equal(got, []string{"sw_interface_set_flags 1 flags=1", "sw_interface_set_flags 2 flags=1"}) {
		t.Fatalf("set_flags of the replay: %v, want the loopback's and the host interconnect's only", got)
	}
	// beef (podB) is 3, c0ffee (podA) 4.
	h.wantDown("pods replayed into a new VPP", 3, 4)

	// The policy resync has not reached VPP (or fails): the pods stay down.
	if err := h.d.ReleasePods(ctx(t)); err == nil || !strings.Contains(err.Error(), "not in VPP incarnation 2 yet (last set in 1)") {
		t.Fatalf("ReleasePods after the restart, before the policies' resync = %v", err)
	}
	if err := h.d.SetACLLists(ctx(t), 1, ACLPolicy, isolate); err == nil {
		t.Fatal("lists of the old incarnation were taken")
	}
	for attempt := range 3 {
		h.vpp.mu.Lock()
		h.vpp.failWhen = func(m api.Message) int32 {
			if strings.HasPrefix(msgString(m), "acl_interface_set_acl_list") {
				return int32(api.INVALID_VALUE)
			}
			return 0
		}
		h.vpp.mu.Unlock()
		if err := h.d.SetACLLists(ctx(t), 2, ACLPolicy, isolate); err == nil {
			t.Fatalf("attempt %d: a refused list succeeded", attempt)
		}
		if err := h.d.ReleasePods(ctx(t)); err == nil {
			t.Fatalf("attempt %d: released after a failed policy resync", attempt)
		}
		h.wantDown(fmt.Sprintf("after failed policy resync %d", attempt), 3, 4)
	}
	h.vpp.take()

	// The resync succeeds: lists first, then the held pods come up.
	if err := h.d.SetACLLists(ctx(t), 2, ACLPolicy, isolate); err != nil {
		t.Fatal(err)
	}
	if err := h.d.ReleasePods(ctx(t)); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the policies' resync, then the release", h.vpp.take(), []string{
		"acl_interface_set_acl_list 4 count=3 n_input=2 acls=[100 0 1]",
		"sw_interface_set_flags 3 flags=1",
		"sw_interface_set_flags 4 flags=1",
	})
	for _, p := range []dataplane.Pod{podA, podB} {
		if err := h.d.CheckPod(ctx(t), p); err != nil {
			t.Fatalf("CheckPod after the release: %v", err)
		}
	}
}

// A pod the policies already isolate when it is wired gets its ACL list
// before its interface comes up and before its routes.
func TestAWiredPodGetsItsACLsBeforeItComesUp(t *testing.T) {
	h := start(t, testConfig())
	if err := h.d.SetACLLists(ctx(t), 1, ACLPolicy, []ACLSetting{
		{Interface: ACLInterface{Pod: podB.IPv4}, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{1}}},
	}); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	msgs := h.vpp.take()
	acl := slices.Index(msgs, "acl_interface_set_acl_list 3 count=3 n_input=2 acls=[100 0 1]")
	up := slices.Index(msgs, "sw_interface_set_flags 3 flags=1")
	route := slices.IndexFunc(msgs, func(m string) bool { return strings.HasPrefix(m, "ip_route_add_del add=true 10.100.0.3/32") })
	if acl < 0 || up < 0 || route < 0 || acl > up || up > route {
		t.Fatalf("want the ACL list, then up, then the route:\n  %s", strings.Join(msgs, "\n  "))
	}
}

// Without the policy stack nothing is held: ReleasePods does nothing, and
// a replay sets every pod up (TestRestartedVPPGetsTheWholeStateBack has
// the messages).
func TestWithoutPoliciesNothingIsHeld(t *testing.T) {
	h := start(t, testConfig())
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	h.vpp.restart()
	waitSynced(t, h, 101)
	if !h.podUp(3) {
		t.Fatal("a replayed pod is down without the policy stack")
	}
	h.vpp.take()
	if err := h.d.ReleasePods(ctx(t)); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "ReleasePods without the policy stack", h.vpp.take(), nil)
}
