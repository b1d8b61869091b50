package vpp

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// The node's two small tables (service network, hostPorts) hold only what
// each sync renders, and are replaced whole in one transaction. A format 1
// table (the fixture, written by the driver before format versions) is
// replaced by the current one, format set included; a table of a newer
// format is refused by name and left unchanged.
func TestTheNodeKernelTablesReplaceFormat1AndRefuseANewerFormat(t *testing.T) {
	netnstest.RequireRoot(t)
	net1 := ServiceNetwork{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, Source: netip.MustParseAddr("10.100.0.1"), Sinks: true,
		Refused: []Frontend{{Addr: netip.MustParseAddr("10.96.0.30"), Protocol: 6, Port: 8080}}}
	dnats := []HostPortDNAT{{Addr: netip.MustParseAddr("198.18.0.2"), Protocol: 6, Port: 8081, PodAddr: netip.MustParseAddr("10.100.0.3"), PodPort: 81}}
	for _, tc := range []struct {
		table, fixture, kind string
		sync                 func(s serviceNode) error
		want                 string
	}{
		{ServiceTable, "service-network.nft", "vpp-services",
			func(s serviceNode) error { return s.k.SyncServiceNetwork(t.Context(), net1) }, "10.96.0.30 . tcp . 8080"},
		{HostPortTable, "hostports.nft", "vpp-hostports",
			func(s serviceNode) error { return s.k.SyncHostPorts(t.Context(), dnats) }, "198.18.0.2 . tcp . 8081 : 10.100.0.3 . 81"},
	} {
		t.Run(tc.table, func(t *testing.T) {
			s := newServiceNode(t)
			path, err := filepath.Abs(filepath.Join("testdata/format1", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			s.node.Exec("nft", "-f", path)
			if err := tc.sync(s); err != nil {
				t.Fatalf("sync over the format 1 table: %v", err)
			}
			got := s.node.Exec("nft", "list", "table", "ip", tc.table)
			for _, want := range []string{"set format {", `comment "vcoil ` + tc.kind + ` v2"`, tc.want} {
				if !strings.Contains(got, want) {
					t.Errorf("the table lacks %q:\n%s", want, got)
				}
			}
			if strings.Contains(got, "10.96.0.20") || strings.Contains(got, "9443") {
				t.Errorf("the format 1 table's elements are left:\n%s", got)
			}

			// A newer vcoild's table.
			s.node.Exec("nft", "delete", "set", "ip", tc.table, "format")
			s.node.Exec("nft", "add", "set", "ip", tc.table, "format", `{ type ipv4_addr; comment "vcoil `+tc.kind+` v3"; }`)
			before := s.node.Exec("nft", "-a", "list", "table", "ip", tc.table)
			err = tc.sync(s)
			var ne *formatversion.NewerError
			if !errors.As(err, &ne) || ne.Found != 3 || ne.Known != formatversion.KernelTable || !strings.Contains(err.Error(), "nftables table ip "+tc.table) {
				t.Fatalf("sync over a newer table = %v, want a refusal naming it", err)
			}
			if after := s.node.Exec("nft", "-a", "list", "table", "ip", tc.table); after != before {
				t.Fatalf("the newer table changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}
