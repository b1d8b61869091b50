package sourceguard

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// The guard's table, rules and element batches as the kernel (and nft)
// take them: concatenated interval sets of ifname and address written over
// netlink, read back by the layouts.
func TestGuardOnTheKernel(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "guard")
	g, err := Open(context.Background(), n.NetNS(), "vcoil", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	exerciseGuard(t, g.t)

	// nft lists the chain at raw priority, before conntrack.
	out := n.Exec("nft", "list", "chain", "inet", "vcoil-source", "prerouting")
	for _, want := range []string{"hook prerouting priority raw", `iifname != "vcoil*" return`, `iifname . ip saddr @allow4 accept`} {
		if !strings.Contains(out, want) {
			t.Errorf("nft lists the chain without %q:\n%s", want, out)
		}
	}
}
