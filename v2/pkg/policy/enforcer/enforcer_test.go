package enforcer

import (
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
