package enforcer

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
)

// stubVPP stands for the VPP dataplane, which CleanUp only tells apart
// from none.
type stubVPP struct{ vpp.Dataplane }

// On the Linux dataplane, a vcoild that does not enforce policies removes
// the table an earlier one left (its rules would go on filtering); one that
// enforces them keeps it for its renderer, and on VPP the kernel's table
// is not the policies' at all.
func TestCleanUpRemovesThePolicyTableOnlyWhenPoliciesAreOffOnLinux(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "polclean")
	n.Exec("nft", "add", "table", "inet", constants.PolicyTable)
	has := func() bool { return strings.Contains(n.Exec("nft", "list", "tables"), constants.PolicyTable) }
	for _, tc := range []struct {
		name      string
		opts      Options
		enforcing bool
	}{
		{"enforcing, on Linux", Options{Netns: n.Path()}, true},
		{"not enforcing, on VPP", Options{Netns: n.Path(), VPP: stubVPP{}}, false},
	} {
		if err := CleanUp(t.Context(), tc.opts, tc.enforcing); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !has() {
			t.Fatalf("%s: CleanUp removed the policy table", tc.name)
		}
	}
	for range 2 { // again with nothing left: no error
		if err := CleanUp(t.Context(), Options{Netns: n.Path()}, false); err != nil {
			t.Fatal(err)
		}
		if has() {
			t.Fatal("not enforcing on Linux, CleanUp left the policy table")
		}
	}
}

// heldPods counts ReleasePods and fails it with err.
type heldPods struct {
	calls int
	err   error
}

func (h *heldPods) ReleasePods(context.Context) error {
	h.calls++
	return h.err
}

// On VPP the agent's AfterResync releases the held pods; a refusal fails
// the sync (the agent then retries and fails its readiness), naming why.
func TestAfterASyncTheHeldPodsAreReleased(t *testing.T) {
	h := &heldPods{}
	after := releaseAfterSync(h)
	if err := after(t.Context()); err != nil || h.calls != 1 {
		t.Fatalf("after a sync: %v, %d calls, want nil and 1", err, h.calls)
	}
	h.err = errors.New("the policies' ACL lists are not in VPP incarnation 2 yet")
	if err := after(t.Context()); err == nil || !strings.Contains(err.Error(), "incarnation 2") {
		t.Fatalf("a refused release: %v", err)
	}
}
