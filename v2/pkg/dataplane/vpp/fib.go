package vpp

import (
	"fmt"

	"go.fd.io/govpp/binapi/fib"
	"go.fd.io/govpp/binapi/ip"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// fibSourceAPI names the FIB source of the routes added through the API:
// vcoil's (VPP's "API" source).
const fibSourceAPI = "API"

// apiRoutes calls fn for each route of table (family v6) that was added
// through the API, as vcoil adds its routes. The table also holds entries
// of other sources VPP makes for its own plugins, many with the same look
// as vcoil's routes: cnat's entry for each VIP, and one for each backend
// it tracks, which inherits the path of its covering route (the host
// interconnect for a node whose default route goes through it): tens of
// thousands with 10,000 Services, which a dump of every entry would hand
// to the caller (and did: each sync of the service network tried to
// delete them one by one, holding the driver for seconds). The source's
// number is VPP's own, read from VPP by its name.
func apiRoutes(ch channel, table uint32, v6 bool, fn func(*ip.IPRouteV2)) error {
	src, err := fibSourceID(ch, fibSourceAPI)
	if err != nil {
		return err
	}
	return vppapi.Dump(ch, &ip.IPRouteV2Dump{Src: src, Table: ip.IPTable{TableID: table, IsIP6: v6}},
		func() *ip.IPRouteV2Details { return &ip.IPRouteV2Details{} },
		func(m *ip.IPRouteV2Details) { fn(&m.Route) })
}

// fibSourceID returns the number VPP gives the FIB source name.
func fibSourceID(ch channel, name string) (uint8, error) {
	var id uint8
	found := false
	err := vppapi.Dump(ch, &fib.FibSourceDump{},
		func() *fib.FibSourceDetails { return &fib.FibSourceDetails{} },
		func(m *fib.FibSourceDetails) {
			if m.Src.Name == name && !found {
				id, found = m.Src.ID, true
			}
		})
	if err != nil {
		return 0, fmt.Errorf("list VPP's FIB sources: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("VPP has no FIB source %q", name)
	}
	return id, nil
}
