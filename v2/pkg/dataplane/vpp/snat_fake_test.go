package vpp

import (
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/classify"
	"go.fd.io/govpp/binapi/fib_types"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/pipe"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// fakeSNAT is the fake VPP's model of what SNAT uses: pipes, IPv4 tables
// other than 0 and their routes, interface tables, NAT forwarding, the
// NAT pool's interface addresses, NAT output interfaces and the classifier.
// Retvals are VPP 25.10's for the cases the driver meets.
type fakeSNAT struct {
	pipes       map[uint32][2]uint32
	instances   int
	tables      map[uint32]bool
	ifTable     map[uint32]uint32
	tableRoutes map[uint32]map[netip.Prefix]fib_types.FibPath
	forwarding  bool
	poolIfs     map[uint32]bool
	outputIfs   map[uint32]bool
	classifiers map[uint32]*fakeClassifier
	nextTable   uint32
	inputACL    map[uint32]uint32
}

type fakeClassifier struct {
	table    classify.ClassifyAddDelTable
	sessions map[string]classify.ClassifyAddDelSession
}

func newFakeSNAT() *fakeSNAT {
	return &fakeSNAT{
		pipes: map[uint32][2]uint32{}, tables: map[uint32]bool{}, ifTable: map[uint32]uint32{},
		tableRoutes: map[uint32]map[netip.Prefix]fib_types.FibPath{}, poolIfs: map[uint32]bool{}, outputIfs: map[uint32]bool{},
		classifiers: map[uint32]*fakeClassifier{}, inputACL: map[uint32]uint32{},
	}
}

// handleSNAT answers the requests of SNAT; ok is false for the others.
func (f *fakeVPP) handleSNAT(msg api.Message) (reply api.Message, retval int32, ok bool) {
	s := f.snat
	switch m := msg.(type) {
	case *pipe.PipeCreate:
		n := s.instances
		s.instances++
		parent := f.add(&fakeIf{name: fmt.Sprintf("pipe%d", n)})
		e0 := f.add(&fakeIf{name: fmt.Sprintf("pipe%d.0", n)})
		e1 := f.add(&fakeIf{name: fmt.Sprintf("pipe%d.1", n)})
		s.pipes[parent.sw] = [2]uint32{e0.sw, e1.sw}
		return &pipe.PipeCreateReply{SwIfIndex: index(parent.sw), PipeSwIfIndex: [2]interface_types.InterfaceIndex{index(e0.sw), index(e1.sw)}}, 0, true
	case *pipe.PipeDelete:
		ends, found := s.pipes[uint32(m.SwIfIndex)]
		if !found {
			return &pipe.PipeDeleteReply{}, int32(api.INVALID_SW_IF_INDEX), true
		}
		for _, sw := range []uint32{uint32(m.SwIfIndex), ends[0], ends[1]} {
			f.deleteIf(sw)
			delete(s.ifTable, sw)
			delete(s.outputIfs, sw)
			delete(s.inputACL, sw)
			for _, rs := range s.tableRoutes {
				for p, path := range rs {
					if path.SwIfIndex == sw {
						delete(rs, p)
					}
				}
			}
		}
		delete(s.pipes, uint32(m.SwIfIndex))
		return &pipe.PipeDeleteReply{}, 0, true
	case *ip.IPTableAddDel:
		if m.Table.IsIP6 {
			return nil, 0, false
		}
		s.tables[m.Table.TableID] = m.IsAdd
		return &ip.IPTableAddDelReply{}, 0, true
	case *interfaces.SwInterfaceSetTable:
		i := f.ifs[uint32(m.SwIfIndex)]
		switch {
		case i == nil:
			return &interfaces.SwInterfaceSetTableReply{}, int32(api.INVALID_SW_IF_INDEX), true
		case m.VrfID != 0 && !s.tables[m.VrfID]:
			return &interfaces.SwInterfaceSetTableReply{}, int32(api.NO_SUCH_FIB), true
		case len(i.addrs) > 0:
			return &interfaces.SwInterfaceSetTableReply{}, int32(api.ADDRESS_FOUND_FOR_INTERFACE), true
		}
		s.ifTable[i.sw] = m.VrfID
		return &interfaces.SwInterfaceSetTableReply{}, 0, true
	case *ip.IPRouteAddDel:
		t := m.Route.TableID
		if t == 0 {
			return nil, 0, false
		}
		if !s.tables[t] {
			return &ip.IPRouteAddDelReply{}, int32(api.NO_SUCH_FIB), true
		}
		p := fromVPPPrefix(m.Route.Prefix)
		if s.tableRoutes[t] == nil {
			s.tableRoutes[t] = map[netip.Prefix]fib_types.FibPath{}
		}
		if m.IsAdd {
			s.tableRoutes[t][p] = m.Route.Paths[0]
			return &ip.IPRouteAddDelReply{}, 0, true
		}
		if _, found := s.tableRoutes[t][p]; !found {
			return &ip.IPRouteAddDelReply{}, int32(api.NO_SUCH_ENTRY), true
		}
		delete(s.tableRoutes[t], p)
		return &ip.IPRouteAddDelReply{}, 0, true
	case *nat44_ed.Nat44ForwardingEnableDisable:
		if !f.nat {
			return &nat44_ed.Nat44ForwardingEnableDisableReply{}, int32(api.UNSUPPORTED), true
		}
		s.forwarding = m.Enable
		return &nat44_ed.Nat44ForwardingEnableDisableReply{}, 0, true
	case *nat44_ed.Nat44AddDelInterfaceAddr:
		sw := uint32(m.SwIfIndex)
		switch {
		case !f.nat:
			return &nat44_ed.Nat44AddDelInterfaceAddrReply{}, int32(api.UNSUPPORTED), true
		case f.ifs[sw] == nil:
			return &nat44_ed.Nat44AddDelInterfaceAddrReply{}, int32(api.INVALID_SW_IF_INDEX), true
		case m.IsAdd && s.poolIfs[sw]:
			return &nat44_ed.Nat44AddDelInterfaceAddrReply{}, int32(api.VALUE_EXIST), true
		case !m.IsAdd && !s.poolIfs[sw]:
			return &nat44_ed.Nat44AddDelInterfaceAddrReply{}, int32(api.NO_SUCH_ENTRY), true
		}
		s.poolIfs[sw] = m.IsAdd
		return &nat44_ed.Nat44AddDelInterfaceAddrReply{}, 0, true
	case *nat44_ed.Nat44EdAddDelOutputInterface:
		sw := uint32(m.SwIfIndex)
		switch {
		case !f.nat:
			return &nat44_ed.Nat44EdAddDelOutputInterfaceReply{}, int32(api.UNSUPPORTED), true
		case f.ifs[sw] == nil:
			return &nat44_ed.Nat44EdAddDelOutputInterfaceReply{}, int32(api.INVALID_SW_IF_INDEX), true
		case m.IsAdd && (s.outputIfs[sw] || len(f.natFeat[sw]) > 0):
			// VPP: an interface is either in/out or output-feature.
			return &nat44_ed.Nat44EdAddDelOutputInterfaceReply{}, int32(api.VALUE_EXIST), true
		case !m.IsAdd && !s.outputIfs[sw]:
			return &nat44_ed.Nat44EdAddDelOutputInterfaceReply{}, int32(api.NO_SUCH_ENTRY), true
		}
		s.outputIfs[sw] = m.IsAdd
		return &nat44_ed.Nat44EdAddDelOutputInterfaceReply{}, 0, true
	case *classify.ClassifyTableByInterface:
		sw := uint32(m.SwIfIndex)
		if f.ifs[sw] == nil {
			return &classify.ClassifyTableByInterfaceReply{}, int32(api.INVALID_SW_IF_INDEX), true
		}
		t, found := s.inputACL[sw]
		if !found {
			t = ^uint32(0)
		}
		return &classify.ClassifyTableByInterfaceReply{SwIfIndex: m.SwIfIndex, L2TableID: ^uint32(0), IP4TableID: t, IP6TableID: ^uint32(0)}, 0, true
	case *classify.ClassifyAddDelTable:
		if !m.IsAdd || m.MatchNVectors == 0 || len(m.Mask) != int(m.MatchNVectors)*16 {
			return &classify.ClassifyAddDelTableReply{}, int32(api.INVALID_VALUE), true
		}
		t := s.nextTable
		s.nextTable++
		s.classifiers[t] = &fakeClassifier{table: *m, sessions: map[string]classify.ClassifyAddDelSession{}}
		return &classify.ClassifyAddDelTableReply{NewTableIndex: t, SkipNVectors: m.SkipNVectors, MatchNVectors: m.MatchNVectors}, 0, true
	case *classify.InputACLSetInterface:
		sw := uint32(m.SwIfIndex)
		switch {
		case f.ifs[sw] == nil:
			return &classify.InputACLSetInterfaceReply{}, int32(api.INVALID_SW_IF_INDEX), true
		case s.classifiers[m.IP4TableIndex] == nil:
			return &classify.InputACLSetInterfaceReply{}, int32(api.NO_SUCH_TABLE), true
		}
		if m.IsAdd {
			s.inputACL[sw] = m.IP4TableIndex
		} else {
			delete(s.inputACL, sw)
		}
		return &classify.InputACLSetInterfaceReply{}, 0, true
	case *classify.ClassifyAddDelSession:
		c := s.classifiers[m.TableIndex]
		switch {
		case c == nil:
			return &classify.ClassifyAddDelSessionReply{}, int32(api.NO_SUCH_TABLE), true
		case len(m.Match) != int(c.table.SkipNVectors+c.table.MatchNVectors)*16:
			return &classify.ClassifyAddDelSessionReply{}, int32(api.INVALID_VALUE), true
		}
		k := string(m.Match)
		if m.IsAdd {
			c.sessions[k] = *m
			return &classify.ClassifyAddDelSessionReply{}, 0, true
		}
		if _, found := c.sessions[k]; !found {
			return &classify.ClassifyAddDelSessionReply{}, int32(api.NO_SUCH_ENTRY), true
		}
		delete(c.sessions, k)
		return &classify.ClassifyAddDelSessionReply{}, 0, true
	}
	return nil, 0, false
}

// handleSNATDump answers the dumps of SNAT; ok is false for the others.
func (f *fakeVPP) handleSNATDump(msg api.Message) (out []api.Message, ok bool) {
	s := f.snat
	switch m := msg.(type) {
	case *pipe.PipeDump:
		var parents []uint32
		for p := range s.pipes {
			parents = append(parents, p)
		}
		slices.Sort(parents)
		for i, p := range parents {
			e := s.pipes[p]
			out = append(out, &pipe.PipeDetails{SwIfIndex: index(p), PipeSwIfIndex: [2]interface_types.InterfaceIndex{index(e[0]), index(e[1])}, Instance: uint32(i)})
		}
		return out, true
	case *classify.ClassifySessionDump:
		c := s.classifiers[m.TableID]
		if c == nil {
			return nil, true
		}
		var keys []string
		for k := range c.sessions {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			out = append(out, &classify.ClassifySessionDetails{TableID: m.TableID, HitNextIndex: c.sessions[k].HitNextIndex, Match: []byte(k)})
		}
		return out, true
	case *ip.IPRouteV2Dump:
		t := m.Table.TableID
		if t == 0 {
			return nil, false
		}
		var ps []netip.Prefix
		for p := range s.tableRoutes[t] {
			ps = append(ps, p)
		}
		slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		for _, p := range ps {
			out = append(out, &ip.IPRouteV2Details{Route: ip.IPRouteV2{TableID: t, Prefix: vppapi.Prefix(p), Src: fakeSourceAPI, NPaths: 1, Paths: []fib_types.FibPath{s.tableRoutes[t][p]}}})
		}
		return out, true
	}
	return nil, false
}

// snatMsgString renders the requests of SNAT (and routes in other tables
// than 0); ok is false for the others.
func snatMsgString(msg api.Message) (string, bool) {
	switch m := msg.(type) {
	case *pipe.PipeCreate:
		return "pipe_create", true
	case *pipe.PipeDelete:
		return fmt.Sprintf("pipe_delete %d", m.SwIfIndex), true
	case *pipe.PipeDump:
		return "pipe_dump", true
	case *ip.IPTableAddDel:
		return fmt.Sprintf("ip_table_add_del add=%t table=%d ip6=%t", m.IsAdd, m.Table.TableID, m.Table.IsIP6), true
	case *interfaces.SwInterfaceSetTable:
		return fmt.Sprintf("sw_interface_set_table %d table=%d ip6=%t", m.SwIfIndex, m.VrfID, m.IsIPv6), true
	case *ip.IPRouteAddDel:
		if m.Route.TableID == 0 {
			return "", false
		}
		return fmt.Sprintf("ip_route_add_del add=%t table=%d %s %s", m.IsAdd, m.Route.TableID, fromVPPPrefix(m.Route.Prefix), snatPathString(m.Route.Paths[0])), true
	case *nat44_ed.Nat44ForwardingEnableDisable:
		return fmt.Sprintf("nat44_forwarding_enable_disable enable=%t", m.Enable), true
	case *nat44_ed.Nat44AddDelInterfaceAddr:
		return fmt.Sprintf("nat44_add_del_interface_addr add=%t %d flags=%d", m.IsAdd, m.SwIfIndex, m.Flags), true
	case *nat44_ed.Nat44EdAddDelOutputInterface:
		return fmt.Sprintf("nat44_ed_add_del_output_interface add=%t %d", m.IsAdd, m.SwIfIndex), true
	case *classify.ClassifyTableByInterface:
		return fmt.Sprintf("classify_table_by_interface %d", m.SwIfIndex), true
	case *classify.ClassifyAddDelTable:
		return fmt.Sprintf("classify_add_del_table add=%t index=%d buckets=%d memory=%d skip=%d match=%d next=%d miss=%d mask=%x",
			m.IsAdd, int32(m.TableIndex), m.Nbuckets, m.MemorySize, m.SkipNVectors, m.MatchNVectors, int32(m.NextTableIndex), int32(m.MissNextIndex), m.Mask), true
	case *classify.InputACLSetInterface:
		return fmt.Sprintf("input_acl_set_interface add=%t %d ip4=%d ip6=%d l2=%d", m.IsAdd, m.SwIfIndex, int32(m.IP4TableIndex), int32(m.IP6TableIndex), int32(m.L2TableIndex)), true
	case *classify.ClassifySessionDump:
		return fmt.Sprintf("classify_session_dump table=%d", m.TableID), true
	case *classify.ClassifyAddDelSession:
		src := "?"
		if a, ok := exemptSource(m.Match); ok && len(m.Match) == 32 {
			src = a.String()
		}
		return fmt.Sprintf("classify_add_del_session add=%t table=%d hit=%d opaque=%d action=%d metadata=%d src=%s match=%x",
			m.IsAdd, m.TableIndex, int32(m.HitNextIndex), int32(m.OpaqueIndex), m.Action, m.Metadata, src, m.Match), true
	}
	return "", false
}

func snatPathString(p fib_types.FibPath) string {
	nh := netip.AddrFrom4(p.Nh.Address.GetIP4())
	switch {
	case p.SwIfIndex == ^uint32(0) && !nh.IsUnspecified():
		return fmt.Sprintf("via %s", nh)
	case p.SwIfIndex == ^uint32(0):
		return fmt.Sprintf("lookup in table %d", p.TableID)
	case nh.IsUnspecified():
		return fmt.Sprintf("out of %d", p.SwIfIndex)
	}
	return fmt.Sprintf("via %s %d", nh, p.SwIfIndex)
}
