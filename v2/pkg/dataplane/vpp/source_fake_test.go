package vpp

import (
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/fib_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/urpf"
	"go.fd.io/govpp/binapi/vlib"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// fakeSource is the fake VPP's model of source validation as VPP 25.10's
// uRPF plugin and FIB behave: the source tables and their routes, each
// interface's uRPF configuration (which VPP keeps when the interface is
// deleted) apart from whether its feature runs (which it does not keep),
// and the error counters "show errors" prints.
type fakeSource struct {
	tables map[fakeTable]map[netip.Prefix]fib_types.FibPath
	// cfg is urpf_cfgs: mode and table by interface and family.
	cfg map[uint32]map[bool]urpf.UrpfInterfaceDetails
	// feature: the strict check runs on the interface, by family.
	feature map[uint32]map[bool]bool
	// destroyedWithRoutes are tables deleted while they held routes
	// (VPP would leave its entries dangling).
	destroyedWithRoutes []fakeTable
	showErrors          string
}

type fakeTable struct {
	id uint32
	v6 bool
}

func newFakeSource() *fakeSource {
	return &fakeSource{tables: map[fakeTable]map[netip.Prefix]fib_types.FibPath{},
		cfg: map[uint32]map[bool]urpf.UrpfInterfaceDetails{}, feature: map[uint32]map[bool]bool{}}
}

// checked reports whether VPP validates sw's sources of family v6 against
// its source table.
func (s *fakeSource) checked(sw uint32, v6 bool) bool {
	c := s.cfg[sw][v6]
	return s.feature[sw][v6] && c.Mode == urpf.URPF_API_MODE_STRICT && c.TableID == sourceTable(sw)
}

func isSourceTable(id uint32) bool { _, ok := sourceTableInterface(id); return ok }

func (f *fakeVPP) handleSource(msg api.Message) (api.Message, int32, bool) {
	s := f.source
	switch m := msg.(type) {
	case *ip.IPTableAddDel:
		if !isSourceTable(m.Table.TableID) {
			return nil, 0, false
		}
		k := fakeTable{m.Table.TableID, m.Table.IsIP6}
		switch {
		case m.IsAdd && s.tables[k] == nil:
			s.tables[k] = map[netip.Prefix]fib_types.FibPath{}
		case !m.IsAdd:
			if len(s.tables[k]) > 0 {
				s.destroyedWithRoutes = append(s.destroyedWithRoutes, k)
			}
			delete(s.tables, k)
		}
		return &ip.IPTableAddDelReply{}, 0, true
	case *ip.IPRouteAddDel:
		if !isSourceTable(m.Route.TableID) {
			return nil, 0, false
		}
		p := fromVPPPrefix(m.Route.Prefix)
		rs := s.tables[fakeTable{m.Route.TableID, p.Addr().Is6()}]
		switch {
		case rs == nil:
			return &ip.IPRouteAddDelReply{}, int32(api.NO_SUCH_FIB), true
		case m.IsAdd:
			rs[p] = m.Route.Paths[0]
		case rs[p] == (fib_types.FibPath{}):
			return &ip.IPRouteAddDelReply{}, int32(api.NO_SUCH_ENTRY), true
		default:
			delete(rs, p)
		}
		return &ip.IPRouteAddDelReply{}, 0, true
	case *urpf.UrpfUpdateV2:
		sw, v6 := uint32(m.SwIfIndex), m.Af == ip_types.ADDRESS_IP6
		if f.ifs[sw] == nil {
			return &urpf.UrpfUpdateV2Reply{}, int32(api.INVALID_SW_IF_INDEX), true
		}
		if m.TableID != ^uint32(0) && s.tables[fakeTable{m.TableID, v6}] == nil {
			return &urpf.UrpfUpdateV2Reply{}, int32(api.INVALID_VALUE), true
		}
		if s.cfg[sw] == nil {
			s.cfg[sw], s.feature[sw] = map[bool]urpf.UrpfInterfaceDetails{}, map[bool]bool{}
		}
		if s.feature[sw] == nil {
			s.feature[sw] = map[bool]bool{}
		}
		table := m.TableID
		if table == ^uint32(0) {
			table = 0
		}
		old := s.cfg[sw][v6]
		s.cfg[sw][v6] = urpf.UrpfInterfaceDetails{SwIfIndex: m.SwIfIndex, IsInput: true, Mode: m.Mode, Af: m.Af, TableID: table}
		// urpf_update: no change of mode and table, no change of the
		// feature.
		if old.Mode != m.Mode || old.TableID != table {
			s.feature[sw][v6] = m.Mode != urpf.URPF_API_MODE_OFF
		}
		return &urpf.UrpfUpdateV2Reply{}, 0, true
	case *vlib.CliInband:
		if m.Cmd != showErrors {
			return &vlib.CliInbandReply{}, int32(api.INVALID_VALUE), true
		}
		return &vlib.CliInbandReply{Reply: s.showErrors}, 0, true
	}
	return nil, 0, false
}

func (f *fakeVPP) handleSourceDump(msg api.Message) ([]api.Message, bool) {
	s := f.source
	var out []api.Message
	switch m := msg.(type) {
	case *ip.IPTableDump:
		for k := range s.tables {
			out = append(out, &ip.IPTableDetails{Table: ip.IPTable{TableID: k.id, IsIP6: k.v6}})
		}
		for id, on := range f.snat.tables {
			if on {
				out = append(out, &ip.IPTableDetails{Table: ip.IPTable{TableID: id}})
			}
		}
		slices.SortFunc(out, func(a, b api.Message) int {
			return int(a.(*ip.IPTableDetails).Table.TableID) - int(b.(*ip.IPTableDetails).Table.TableID)
		})
		return out, true
	case *ip.IPRouteDump:
		if !isSourceTable(m.Table.TableID) {
			return nil, false
		}
		rs := s.tables[fakeTable{m.Table.TableID, m.Table.IsIP6}]
		ps := make([]netip.Prefix, 0, len(rs))
		for p := range rs {
			ps = append(ps, p)
		}
		slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		for _, p := range ps {
			out = append(out, &ip.IPRouteDetails{Route: ip.IPRoute{TableID: m.Table.TableID, Prefix: vppapi.Prefix(p), NPaths: 1, Paths: []fib_types.FibPath{rs[p]}}})
		}
		return out, true
	case *urpf.UrpfInterfaceDump:
		for _, i := range f.sortedIfs() {
			if m.SwIfIndex != ^index(0) && uint32(m.SwIfIndex) != i.sw {
				continue
			}
			for _, v6 := range sourceFamilies {
				if c, ok := s.cfg[i.sw][v6]; ok && (c.Mode != urpf.URPF_API_MODE_OFF || c.TableID != 0) {
					out = append(out, &c)
				}
			}
		}
		return out, true
	}
	return nil, false
}

func sourceMsgString(msg api.Message) (string, bool) {
	switch m := msg.(type) {
	case *ip.IPTableAddDel:
		if !isSourceTable(m.Table.TableID) {
			return "", false
		}
		return fmt.Sprintf("ip_table_add_del add=%t table=%d ip6=%t name=%q", m.IsAdd, m.Table.TableID, m.Table.IsIP6, m.Table.Name), true
	case *ip.IPRouteAddDel:
		if !isSourceTable(m.Route.TableID) {
			return "", false
		}
		p := m.Route.Paths[0]
		nh := "none"
		if p.Nh.Address != (ip_types.AddressUnion{}) {
			nh = "set"
		}
		return fmt.Sprintf("ip_route_add_del add=%t table=%d %s through %d nh=%s", m.IsAdd, m.Route.TableID, fromVPPPrefix(m.Route.Prefix), p.SwIfIndex, nh), true
	case *ip.IPTableDump:
		return "ip_table_dump", true
	case *urpf.UrpfUpdateV2:
		fam := "ip4"
		if m.Af == ip_types.ADDRESS_IP6 {
			fam = "ip6"
		}
		table := fmt.Sprint(m.TableID)
		if m.TableID == ^uint32(0) {
			table = "none"
		}
		return fmt.Sprintf("urpf_update_v2 %d %s input=%t mode=%s table=%s", m.SwIfIndex, fam, m.IsInput, m.Mode, table), true
	case *urpf.UrpfInterfaceDump:
		if m.SwIfIndex == ^index(0) {
			return "urpf_interface_dump all", true
		}
		return fmt.Sprintf("urpf_interface_dump %d", m.SwIfIndex), true
	case *vlib.CliInband:
		return fmt.Sprintf("cli_inband %q", m.Cmd), true
	}
	return "", false
}

// sourceSetUp are the messages that give a new pod interface sw its source
// validation: v4 and v6 are the pod's addresses ("" when it lacks one),
// extra its other source prefixes.
func sourceSetUp(sw uint32, v4, v6 string, extra ...string) []string {
	t := sourceTable(sw)
	out := []string{fmt.Sprintf("urpf_interface_dump %d", sw)}
	for _, fam := range []string{"ip4", "ip6"} {
		out = append(out, fmt.Sprintf("ip_table_add_del add=true table=%d ip6=%t name=%q", t, fam == "ip6", SourceTableName(sw)))
		for _, p := range sourceRoutesOf(fam, v4, v6, extra) {
			out = append(out, fmt.Sprintf("ip_route_add_del add=true table=%d %s through %d nh=none", t, p, sw))
		}
		out = append(out, fmt.Sprintf("urpf_update_v2 %d %s input=true mode=URPF_API_MODE_STRICT table=%d", sw, fam, t))
	}
	return out
}

// sourceTearDown are the messages that remove them.
func sourceTearDown(sw uint32, v4, v6 string, extra ...string) []string {
	return sourceRemoval([]string{"ip4", "ip6"}, sw, v4, v6, extra)
}

// sourceUndo are the messages that remove them when a set-up fails after
// them: in the reverse order.
func sourceUndo(sw uint32, v4, v6 string, extra ...string) []string {
	return sourceRemoval([]string{"ip6", "ip4"}, sw, v4, v6, extra)
}

func sourceRemoval(families []string, sw uint32, v4, v6 string, extra []string) []string {
	t := sourceTable(sw)
	var out []string
	for _, fam := range families {
		out = append(out, fmt.Sprintf("urpf_update_v2 %d %s input=true mode=URPF_API_MODE_OFF table=none", sw, fam))
		for _, p := range sourceRoutesOf(fam, v4, v6, extra) {
			out = append(out, fmt.Sprintf("ip_route_add_del add=false table=%d %s through %d nh=none", t, p, sw))
		}
		out = append(out, fmt.Sprintf("ip_table_add_del add=false table=%d ip6=%t name=\"\"", t, fam == "ip6"))
	}
	return out
}

func sourceRoutesOf(fam, v4, v6 string, extra []string) []string {
	var out []string
	a := v4
	if fam == "ip6" {
		a = v6
	}
	if a != "" {
		out = append(out, hostPrefix(netip.MustParseAddr(a)).String())
	}
	for _, e := range extra {
		if netip.MustParsePrefix(e).Addr().Is6() == (fam == "ip6") {
			out = append(out, e)
		}
	}
	if fam == "ip6" {
		out = append(out, "fe80::/11", "fea0::/11")
	}
	return out
}
