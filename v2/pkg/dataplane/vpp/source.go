package vpp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/fib_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/urpf"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// Source validation. Every pod has NET_RAW and can forge its source
// address, so VPP checks the source of what a pod interface receives with
// the uRPF plugin in strict mode (the source must be reachable through
// the interface it came in on), for both families. The check looks the
// source up in a table of the pod's own, not in the main table:
//
//   - the main table's fe80::/10 entry leads to VPP's link-local lookup,
//     whose uRPF list holds no interface, so that a pod's unicast neighbour
//     solicitations and advertisements from its link-local address (only
//     multicast destinations pass unchecked) would be dropped and a stale
//     neighbour entry never resolved again;
//   - a pod's extra sources (Pod.SourcePrefixes) would need routes in the
//     main table, which would change where VPP forwards them.
//
// So each pod interface gets, per family, a source table: routes through
// the interface (attached, no next hop) to the pod's address, its source
// prefixes of that family and, for IPv6, the link-local range. Each table
// is used only by that interface's uRPF check; nothing forwards through
// it. Its ID is SourceTableBase plus the interface's sw_if_index, so a
// sync finds the tables of interfaces that are gone and removes them.
//
// Every IPv6 table VPP makes holds fe80::/10 from a source that outranks
// the API's, so a route of ours to fe80::/10 would never be used: the
// link-local range is routed as its two halves, which are more specific.

// SourceTableBase is the first VPP table ID of the pods' source tables:
// a pod interface's table is SourceTableBase plus its sw_if_index, in
// both families. IDs from SourceTableBase to SourceTableBase+2^24-1 are
// vcoil's.
const SourceTableBase uint32 = 2_000_000_000

// sourceTableSpan bounds the sw_if_indexes whose tables are recognised.
const sourceTableSpan = 1 << 24

// SourceTableName is the name VPP shows for a source table
// ("show ip fib table").
func SourceTableName(swIfIndex uint32) string {
	return fmt.Sprintf("vcoil-source-check-%d", swIfIndex)
}

func sourceTable(swIfIndex uint32) uint32 { return SourceTableBase + swIfIndex }

// sourceTableInterface is the interface whose table id is, if id is a
// source table's.
func sourceTableInterface(id uint32) (uint32, bool) {
	if id < SourceTableBase || id-SourceTableBase >= sourceTableSpan {
		return 0, false
	}
	return id - SourceTableBase, true
}

// linkLocalHalves cover fe80::/10 (see the comment at the top).
var linkLocalHalves = []netip.Prefix{netip.MustParsePrefix("fe80::/11"), netip.MustParsePrefix("fea0::/11")}

// sourceFamilies are the two checks of every pod interface, IPv4 first.
var sourceFamilies = []bool{false, true}

// sourcePrefixes are the routes of a pod's source table of one family.
func sourcePrefixes(pod dataplane.Pod, v6 bool) []netip.Prefix {
	var out []netip.Prefix
	if a := pod.IPv4; v6 {
		a = pod.IPv6
		if a.IsValid() {
			out = append(out, hostPrefix(a))
		}
	} else if a.IsValid() {
		out = append(out, hostPrefix(a))
	}
	for _, p := range pod.SourcePrefixes {
		p = p.Masked()
		if p.IsValid() && p.Addr().Is6() == v6 && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	if v6 {
		out = append(out, linkLocalHalves...)
	}
	return out
}

// throughInterface reaches a prefix straight through sw_if_index: its uRPF
// list is that interface.
func throughInterface(swIfIndex uint32, v6 bool) fib_types.FibPath {
	proto := fib_types.FIB_API_PATH_NH_PROTO_IP4
	if v6 {
		proto = fib_types.FIB_API_PATH_NH_PROTO_IP6
	}
	return fib_types.FibPath{SwIfIndex: swIfIndex, Weight: 1, Proto: proto, Type: fib_types.FIB_API_PATH_TYPE_NORMAL}
}

func family(v6 bool) ip_types.AddressFamily {
	if v6 {
		return ip_types.ADDRESS_IP6
	}
	return ip_types.ADDRESS_IP4
}

func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// setURPF sets the strict check of sw_if_index's input against table, or,
// with off, removes it.
func setURPF(ch channel, sw uint32, v6, off bool, table uint32) error {
	req := &urpf.UrpfUpdateV2{IsInput: true, Mode: urpf.URPF_API_MODE_STRICT, Af: family(v6), SwIfIndex: index(sw), TableID: table}
	if off {
		req.Mode, req.TableID = urpf.URPF_API_MODE_OFF, ^uint32(0)
	}
	err := vppapi.Call(ch, req, &urpf.UrpfUpdateV2Reply{})
	if off {
		err = vppapi.IgnoreRetval(err, api.INVALID_SW_IF_INDEX)
	}
	if err != nil {
		return fmt.Errorf("source validation (%s uRPF) of interface %d: %w", familyName(v6), sw, err)
	}
	return nil
}

// urpfHeld is one interface's uRPF input checks VPP holds, by family
// (false: IPv4).
type urpfHeld map[bool]urpf.UrpfInterfaceDetails

// urpfDump returns the uRPF input checks VPP holds for sw (every
// interface's when sw is ^0), by interface.
func urpfDump(ch channel, sw uint32) (map[uint32]urpfHeld, error) {
	out := map[uint32]urpfHeld{}
	err := vppapi.Dump(ch, &urpf.UrpfInterfaceDump{SwIfIndex: index(sw)},
		func() *urpf.UrpfInterfaceDetails { return &urpf.UrpfInterfaceDetails{} },
		func(m *urpf.UrpfInterfaceDetails) {
			if !m.IsInput {
				return
			}
			s := uint32(m.SwIfIndex)
			if out[s] == nil {
				out[s] = urpfHeld{}
			}
			out[s][m.Af == ip_types.ADDRESS_IP6] = *m
		})
	if err != nil {
		return nil, fmt.Errorf("list VPP's uRPF checks: %w", err)
	}
	return out, nil
}

// addSourceTable makes the table of sw's family v6 (adding an existing
// table changes nothing).
func addSourceTable(ch channel, sw uint32, v6 bool) error {
	req := &ip.IPTableAddDel{IsAdd: true, Table: ip.IPTable{TableID: sourceTable(sw), IsIP6: v6, Name: SourceTableName(sw)}}
	if err := vppapi.Call(ch, req, &ip.IPTableAddDelReply{}); err != nil {
		return fmt.Errorf("add the %s source table %d: %w", familyName(v6), sourceTable(sw), err)
	}
	return nil
}

// delSourceTable deletes table id, whose routes must be gone: VPP
// destroys a table without flushing it. A missing table is no error.
func delSourceTable(ch channel, id uint32, v6 bool) error {
	req := &ip.IPTableAddDel{IsAdd: false, Table: ip.IPTable{TableID: id, IsIP6: v6}}
	if err := vppapi.IgnoreRetval(vppapi.Call(ch, req, &ip.IPTableAddDelReply{}), api.NO_SUCH_FIB, api.NO_SUCH_TABLE); err != nil {
		return fmt.Errorf("delete the %s source table %d: %w", familyName(v6), id, err)
	}
	return nil
}

func sourceRoute(ch channel, add bool, sw, table uint32, p netip.Prefix) error {
	path := throughInterface(sw, p.Addr().Is6())
	req := &ip.IPRouteAddDel{IsAdd: add, Route: ip.IPRoute{TableID: table, Prefix: vppapi.Prefix(p), NPaths: 1, Paths: []fib_types.FibPath{path}}}
	err := vppapi.Call(ch, req, &ip.IPRouteAddDelReply{})
	if !add {
		err = vppapi.IgnoreRetval(err, api.NO_SUCH_ENTRY, api.NO_SUCH_FIB)
	}
	if err != nil {
		return fmt.Errorf("source table %d: route %s through interface %d: %w", table, p, sw, err)
	}
	return nil
}

// enableSourceCheck gives the new interface sw of pod its source tables
// and checks, before the interface is up. An earlier interface with this
// sw_if_index may have left its uRPF configuration behind (VPP keeps it
// when an interface is deleted, and vcoil removes it first only when it
// deletes the interface itself): VPP would then take the same mode and
// table index for no change and leave the check off, so such a
// configuration, and its table, is removed first. u gets the steps that
// undo it.
func (d *driver) enableSourceCheck(sw uint32, pod dataplane.Pod, u *undo) error {
	ch := d.ch
	held, err := urpfDump(ch, sw)
	if err != nil {
		return err
	}
	for _, v6 := range sourceFamilies {
		if h, ok := held[sw][v6]; ok && h.Mode != urpf.URPF_API_MODE_OFF {
			// Its table may be left too, with another pod's sources.
			if err := d.dropSourceCheck(sw); err != nil {
				return err
			}
			break
		}
	}
	for _, v6 := range sourceFamilies {
		table := sourceTable(sw)
		if err := addSourceTable(ch, sw, v6); err != nil {
			return err
		}
		routes := sourcePrefixes(pod, v6)
		u.push(func() error { return removeSourceTable(ch, sw, v6, routes) })
		for _, p := range routes {
			if err := sourceRoute(ch, true, sw, table, p); err != nil {
				return err
			}
		}
		if err := setURPF(ch, sw, v6, false, table); err != nil {
			return err
		}
	}
	return nil
}

// removeSourceTable turns sw's check of family v6 off, then deletes the
// routes of its table and the table. What is gone already is no error.
func removeSourceTable(ch channel, sw uint32, v6 bool, routes []netip.Prefix) error {
	if err := setURPF(ch, sw, v6, true, 0); err != nil {
		return err
	}
	var errs []error
	for _, p := range routes {
		if err := sourceRoute(ch, false, sw, sourceTable(sw), p); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return delSourceTable(ch, sourceTable(sw), v6)
}

// disableSourceCheck removes what enableSourceCheck made for pod on sw,
// before the interface is deleted.
func (d *driver) disableSourceCheck(sw uint32, pod dataplane.Pod) error {
	var errs []error
	for _, v6 := range sourceFamilies {
		if err := removeSourceTable(d.ch, sw, v6, sourcePrefixes(pod, v6)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// dropSourceCheck removes the source checks and tables of an interface
// whose pod is not known (a leftover), reading the tables' routes.
func (d *driver) dropSourceCheck(sw uint32) error {
	for _, v6 := range sourceFamilies {
		routes, err := sourceTableRoutes(d.ch, sourceTable(sw), v6)
		if err != nil {
			return err
		}
		if err := removeSourceTable(d.ch, sw, v6, routes); err != nil {
			return err
		}
	}
	return nil
}

// sourceTableRoutes are the routes of table id that go through an
// interface: the ones vcoil adds (an IPv6 table's own entries go
// elsewhere). A missing table has none.
func sourceTableRoutes(ch channel, id uint32, v6 bool) ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := vppapi.Dump(ch, &ip.IPRouteDump{Table: ip.IPTable{TableID: id, IsIP6: v6}},
		func() *ip.IPRouteDetails { return &ip.IPRouteDetails{} },
		func(m *ip.IPRouteDetails) {
			for _, p := range m.Route.Paths {
				if p.Type == fib_types.FIB_API_PATH_TYPE_NORMAL && p.SwIfIndex != ^uint32(0) {
					out = append(out, fromVPPPrefix(m.Route.Prefix))
					return
				}
			}
		})
	if err != nil && !vppapi.IsRetval(err, api.NO_SUCH_FIB) && !vppapi.IsRetval(err, api.NO_SUCH_TABLE) {
		return nil, fmt.Errorf("list the routes of source table %d: %w", id, err)
	}
	return out, nil
}

// sourceChecks is what VPP holds of the source checks at a sync: the
// source tables by ID and family, and the uRPF checks by interface.
type sourceChecks struct {
	tables map[uint32]map[bool]bool
	urpf   map[uint32]urpfHeld
}

// readSourceChecks reads the source tables and uRPF checks VPP holds.
func readSourceChecks(ch channel) (sourceChecks, error) {
	tables, err := readSourceTables(ch)
	if err != nil {
		return sourceChecks{}, err
	}
	held, err := urpfDump(ch, ^uint32(0))
	if err != nil {
		return sourceChecks{}, err
	}
	return sourceChecks{tables: tables, urpf: held}, nil
}

// readSourceTables lists the source tables VPP holds, by ID and family.
func readSourceTables(ch channel) (map[uint32]map[bool]bool, error) {
	tables := map[uint32]map[bool]bool{}
	err := vppapi.Dump(ch, &ip.IPTableDump{},
		func() *ip.IPTableDetails { return &ip.IPTableDetails{} },
		func(m *ip.IPTableDetails) {
			if _, ok := sourceTableInterface(m.Table.TableID); !ok {
				return
			}
			if tables[m.Table.TableID] == nil {
				tables[m.Table.TableID] = map[bool]bool{}
			}
			tables[m.Table.TableID][m.Table.IsIP6] = true
		})
	if err != nil {
		return nil, fmt.Errorf("list VPP's tables: %w", err)
	}
	return tables, nil
}

// syncSourceCheck makes the source check of a kept pod interface sw match
// pod: its tables, their routes (added and removed) and its uRPF checks.
func (d *driver) syncSourceCheck(sw uint32, pod dataplane.Pod, held sourceChecks) error {
	ch, table := d.ch, sourceTable(sw)
	for _, v6 := range sourceFamilies {
		var have []netip.Prefix
		if held.tables[table][v6] {
			var err error
			if have, err = sourceTableRoutes(ch, table, v6); err != nil {
				return err
			}
		} else if err := addSourceTable(ch, sw, v6); err != nil {
			return err
		}
		want := sourcePrefixes(pod, v6)
		for _, p := range want {
			if !slices.Contains(have, p) {
				if err := sourceRoute(ch, true, sw, table, p); err != nil {
					return err
				}
			}
		}
		for _, p := range have {
			if !slices.Contains(want, p) {
				if err := sourceRoute(ch, false, sw, table, p); err != nil {
					return err
				}
			}
		}
		if h, ok := held.urpf[sw][v6]; !ok || h.Mode != urpf.URPF_API_MODE_STRICT || h.TableID != table {
			if err := setURPF(ch, sw, v6, false, table); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeStaleSourceTables deletes the source tables of held (read at the
// start of the sync) whose interface is no wired pod's, with their
// routes, after turning the interface's check off (when the interface
// still exists). A table the sync removed already with its interface is
// asked for again, which changes nothing.
func (d *driver) removeStaleSourceTables(held map[uint32]map[bool]bool) error {
	wired := map[uint32]bool{}
	for _, st := range d.pods {
		if st.wired {
			wired[st.swIfIndex] = true
		}
	}
	ids := make([]uint32, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		sw, _ := sourceTableInterface(id)
		if wired[sw] {
			continue
		}
		for _, v6 := range sourceFamilies {
			if !held[id][v6] {
				continue
			}
			routes, err := sourceTableRoutes(d.ch, id, v6)
			if err != nil {
				return err
			}
			if err := removeSourceTable(d.ch, sw, v6, routes); err != nil {
				return err
			}
			d.log.Info("removed a source table no pod interface uses", "table", id, "family", familyName(v6))
		}
	}
	return nil
}

// updateSourceCheck changes the routes of a wired pod's source tables to
// pod's (its SourcePrefixes changed).
func (d *driver) updateSourceCheck(sw uint32, pod dataplane.Pod) error {
	held, err := urpfDump(d.ch, sw)
	if err != nil {
		return err
	}
	return d.syncSourceCheck(sw, pod, sourceChecks{
		tables: map[uint32]map[bool]bool{sourceTable(sw): {false: true, true: true}}, urpf: held,
	})
}

// checkSourceCheck fails unless VPP checks the sources of both families
// on sw against its source tables.
func (d *driver) checkSourceCheck(sw uint32) error {
	held, err := urpfDump(d.ch, sw)
	if err != nil {
		return err
	}
	for _, v6 := range sourceFamilies {
		if h, ok := held[sw][v6]; !ok || h.Mode != urpf.URPF_API_MODE_STRICT || h.TableID != sourceTable(sw) {
			return fmt.Errorf("VPP does not validate the %s sources of interface %d (strict uRPF against table %d)", familyName(v6), sw, sourceTable(sw))
		}
	}
	return nil
}
