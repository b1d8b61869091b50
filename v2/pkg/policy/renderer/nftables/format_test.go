package nftables

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

func TestTheFormatCommentIsTheSharedSpelling(t *testing.T) {
	if got := nft.FormatComment(formatKind, formatVersion); got != formatComment {
		t.Fatalf("nft.FormatComment = %q, the table is written with %q", got, formatComment)
	}
}

// A downgrade: a newer vcoild's policy table is refused with an error
// naming it and both versions, and left exactly as it was (no pod loses
// its filtering to a purge).
func TestAPolicyTableOfANewerFormatIsRefusedAndLeftUnchanged(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "polnew")
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{{Pod: renderer.PodID{Namespace: "ns", Name: "a"},
		IPs: []netip.Addr{addr("10.0.0.1")}, Ingress: list(permit(renderer.Ingress, "10.1.0.0/16", renderer.ProtocolAny, renderer.AnyPort))}}}
	if err := newRenderer(t, n).Render(t.Context(), txn); err != nil {
		t.Fatal(err)
	}
	// The newer vcoild's marker.
	n.Exec("nft", "delete", "set", "inet", "vcoil-policy", "format")
	n.Exec("nft", "add", "set", "inet", "vcoil-policy", "format", `{ type ipv4_addr; comment "vcoil policy v2"; }`)
	before := n.Exec("nft", "-a", "list", "table", "inet", "vcoil-policy")

	err := newRenderer(t, n).Render(t.Context(), renderer.Txn{Resync: true})
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 2 || ne.Known != 1 {
		t.Fatalf("Render = %v, want a refusal of format 2", err)
	}
	for _, want := range []string{"nftables table inet vcoil-policy", "format version 2", "this vcoild's 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q lacks %q", err, want)
		}
	}
	if after := n.Exec("nft", "-a", "list", "table", "inet", "vcoil-policy"); after != before {
		t.Fatalf("the newer table changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
