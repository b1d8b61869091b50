package nftables_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/nodestate/nftables"
)

// The tables asked for are printed from the namespace given, in the order
// asked; a table that does not exist is left out, and a table nobody asked
// for is not shown.
func TestSourcePrintsTheTablesOfTheNamespace(t *testing.T) {
	netnstest.RequireRoot(t)
	node := netnstest.New(t, "nftstate")
	node.Exec("nft", "add table inet vcoil-policy; add chain inet vcoil-policy forward { type filter hook forward priority 0; }; add rule inet vcoil-policy forward ip daddr 10.1.0.5 tcp dport 80 accept")
	node.Exec("nft", "add table ip vcoil-vpp; add chain ip vcoil-vpp input { type filter hook input priority 0; }")
	node.Exec("nft", "add table inet someone-else")
	policy := node.Exec("nft", "list", "table", "inet", "vcoil-policy")
	vppTable := node.Exec("nft", "list", "table", "ip", "vcoil-vpp")
	if !strings.Contains(policy, "tcp dport 80 accept") {
		t.Fatalf("the test's table is not as made:\n%s", policy)
	}

	st := &nodestate.State{}
	src := nftables.Source(node.Path(), []nftables.Table{
		{Family: "ip", Name: "vcoil-vpp"}, {Family: "inet", Name: "vcoil-services"}, {Family: "inet", Name: "vcoil-policy"},
	})
	if err := src.Fill(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	want := []nodestate.NFTable{
		{Family: "ip", Name: "vcoil-vpp", Text: vppTable},
		{Family: "inet", Name: "vcoil-policy", Text: policy},
	}
	if !reflect.DeepEqual(st.NFTables, want) {
		t.Errorf("tables:\n got %+v\nwant %+v", st.NFTables, want)
	}
}

func TestSourceNamesAMissingNamespace(t *testing.T) {
	err := nftables.Source("/run/netns/vcoil-no-such-namespace", []nftables.Table{{Family: "inet", Name: "vcoil-policy"}}).Fill(context.Background(), &nodestate.State{})
	if err == nil || !strings.Contains(err.Error(), "/run/netns/vcoil-no-such-namespace") {
		t.Errorf("error = %v, want one naming the namespace", err)
	}
}
