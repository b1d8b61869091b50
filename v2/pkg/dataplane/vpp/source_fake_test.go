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
// uRPF plugin and FIB behave: the source tables (and an earlier vcoild's
// per-interface ones) and their routes' paths, each
// interface's uRPF configuration (which VPP keeps when the interface is
// deleted) apart from whether its feature runs (which it does not keep),
// and the error counters "show errors" prints.
type fakeSource struct {
	tables map[fakeTable]map[netip.Prefix][]fib_types.FibPath
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
	return &fakeSource{tables: map[fakeTable]map[netip.Prefix][]fib_types.FibPath{},
		cfg: map[uint32]map[bool]urpf.UrpfInterfaceDetails{}, feature: map[uint32]map[bool]bool{}}
}

// checked reports whether VPP validates sw's sources of family v6 against
// the source table.
func (s *fakeSource) checked(sw uint32, v6 bool) bool {
	c := s.cfg[sw][v6]
	return s.feature[sw][v6] && c.Mode == urpf.URPF_API_MODE_STRICT && c.TableID == SourceTableID
}

// through are the prefixes of family v6 whose routes in the source table
// have a path through sw, sorted.
func (s *fakeSource) through(sw uint32, v6 bool) []netip.Prefix {
	var out []netip.Prefix
	for p, paths := range s.tables[fakeTable{SourceTableID, v6}] {
		if slices.ContainsFunc(paths, func(x fib_types.FibPath) bool { return x.SwIfIndex == sw }) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, comparePrefixes)
	return out
}

func isSourceTable(id uint32) bool {
	_, legacy := legacyTableInterface(id)
	return id == SourceTableID || legacy
}

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
			s.tables[k] = map[netip.Prefix][]fib_types.FibPath{}
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
		case m.IsMultipath && len(m.Route.Paths) == 0:
			return &ip.IPRouteAddDelReply{}, -57, true
		case m.IsMultipath && m.IsAdd:
			// fib_path_list: no duplicate paths.
			if !slices.Contains(rs[p], m.Route.Paths[0]) {
				rs[p] = append(rs[p], m.Route.Paths[0])
			}
		case m.IsMultipath:
			// fib_table_entry_path_remove2: nothing to remove is no
			// error; the route goes with its last path.
			rs[p] = slices.DeleteFunc(rs[p], func(x fib_types.FibPath) bool { return x == m.Route.Paths[0] })
			if len(rs[p]) == 0 {
				delete(rs, p)
			}
		case m.IsAdd:
			rs[p] = slices.Clone(m.Route.Paths)
		default:
			// fib_table_entry_delete of a missing entry changes nothing.
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
	case *ip.IPRouteV2Dump:
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
			out = append(out, &ip.IPRouteV2Details{Route: ip.IPRouteV2{TableID: m.Table.TableID, Prefix: vppapi.Prefix(p), Src: fakeSourceAPI, NPaths: uint8(len(rs[p])), Paths: slices.Clone(rs[p])}})
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
		var p fib_types.FibPath
		if len(m.Route.Paths) > 0 {
			p = m.Route.Paths[0]
		}
		nh := "none"
		if p.Nh.Address != (ip_types.AddressUnion{}) {
			nh = "set"
		}
		if !m.IsMultipath {
			return fmt.Sprintf("ip_route_add_del add=%t table=%d %s", m.IsAdd, m.Route.TableID, fromVPPPrefix(m.Route.Prefix)), true
		}
		return fmt.Sprintf("ip_route_add_del add=%t path table=%d %s through %d nh=%s", m.IsAdd, m.Route.TableID, fromVPPPrefix(m.Route.Prefix), p.SwIfIndex, nh), true
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
	out := []string{fmt.Sprintf("urpf_interface_dump %d", sw)}
	for _, p := range sourcePathsOf(v4, v6, extra) {
		out = append(out, fmt.Sprintf("ip_route_add_del add=true path table=%d %s through %d nh=none", SourceTableID, p, sw))
	}
	for _, fam := range []string{"ip4", "ip6"} {
		out = append(out, fmt.Sprintf("urpf_update_v2 %d %s input=true mode=URPF_API_MODE_STRICT table=%d", sw, fam, SourceTableID))
	}
	return out
}

// sourceTearDown are the messages that remove them, also when a set-up
// fails after them.
func sourceTearDown(sw uint32, v4, v6 string, extra ...string) []string {
	out := []string{
		fmt.Sprintf("urpf_update_v2 %d ip4 input=true mode=URPF_API_MODE_OFF table=none", sw),
		fmt.Sprintf("urpf_update_v2 %d ip6 input=true mode=URPF_API_MODE_OFF table=none", sw),
	}
	paths := sourcePathsOf(v4, v6, extra)
	ps := make([]netip.Prefix, 0, len(paths))
	for _, p := range paths {
		ps = append(ps, netip.MustParsePrefix(p))
	}
	slices.SortFunc(ps, comparePrefixes)
	for _, p := range ps {
		out = append(out, fmt.Sprintf("ip_route_add_del add=false path table=%d %s through %d nh=none", SourceTableID, p, sw))
	}
	return out
}

// sourcePathsOf are a pod's source prefixes in the order they are added:
// IPv4's, then IPv6's with the link-local halves.
func sourcePathsOf(v4, v6 string, extra []string) []string {
	var out []string
	for _, fam := range []string{"ip4", "ip6"} {
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
	}
	return out
}

// paths counts the paths of every route of the source tables (and of
// an earlier vcoild's tables).
func (s *fakeSource) paths() int {
	n := 0
	for _, rs := range s.tables {
		for _, ps := range rs {
			n += len(ps)
		}
	}
	return n
}
