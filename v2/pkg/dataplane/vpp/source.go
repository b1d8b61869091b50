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
// source up in vcoil's source table of that family, not in the main
// table:
//
//   - the main table's fe80::/10 entry leads to VPP's link-local lookup,
//     whose uRPF list holds no interface, so that a pod's unicast neighbour
//     solicitations and advertisements from its link-local address (only
//     multicast destinations pass unchecked) would be dropped and a stale
//     neighbour entry never resolved again;
//   - a pod's extra sources (Pod.SourcePrefixes) would need routes in the
//     main table, which would change where VPP forwards them.
//
// So there is one source table per family, used only by the pods' uRPF
// checks (nothing forwards through it), in which each pod interface adds
// paths through itself (attached, no next hop) to the pod's address, its
// source prefixes of that family and, for IPv6, the link-local range. A
// prefix that several pods may use (the link-local range, a source prefix
// two pods were given) is one route with a path through each of them: its
// uRPF list holds all their interfaces. A pod's own address is a host
// route, more specific than any source prefix, so no other local pod may
// send from it, whatever prefixes that pod was given.
//
// One table per family, not one per pod: every VPP table comes with its
// own multicast table and special entries, and with two tables per pod a
// real VPP stopped answering a route into the 137th pod's table (make
// bench-cni; the cause inside VPP was not pinned down). Here a
// node's pods add paths, not tables. The driver keeps the paths it knows
// VPP holds per interface (read at each sync, changed only by the driver
// under its lock), so that a pod's paths are removed whole at DEL, and a
// reused sw_if_index never inherits a gone pod's sources.
//
// Every IPv6 table VPP makes holds fe80::/10 from a source that outranks
// the API's, so a route of ours to fe80::/10 would never be used: the
// link-local range is routed as its two halves, which are more specific.

// SourceTableID is the VPP table ID of the source tables, in both
// families.
const SourceTableID uint32 = 2_000_000_000

// SourceTableName is the name VPP shows for the source tables ("show ip
// fib table").
const SourceTableName = "vcoil-source-check"

// legacyTableSpan: an earlier vcoild made a source table per pod
// interface, with the ID SourceTableID plus its sw_if_index; a sync moves
// their routes into the source tables and deletes them.
const legacyTableSpan = 1 << 24

// legacyTableInterface is the interface a table of an earlier vcoild
// belonged to, if id is one's.
func legacyTableInterface(id uint32) (uint32, bool) {
	if id <= SourceTableID || id-SourceTableID >= legacyTableSpan {
		return 0, false
	}
	return id - SourceTableID, true
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

// strict reports whether the check of family v6 is the one vcoil sets.
func (h urpfHeld) strict(v6 bool) bool {
	c, ok := h[v6]
	return ok && c.Mode == urpf.URPF_API_MODE_STRICT && c.TableID == SourceTableID
}

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

// addTable makes table id of family v6 (adding an existing table changes
// nothing).
func addTable(ch channel, id uint32, v6 bool, name string) error {
	req := &ip.IPTableAddDel{IsAdd: true, Table: ip.IPTable{TableID: id, IsIP6: v6, Name: name}}
	if err := vppapi.Call(ch, req, &ip.IPTableAddDelReply{}); err != nil {
		return fmt.Errorf("add the %s table %d: %w", familyName(v6), id, err)
	}
	return nil
}

// delTable deletes table id, whose routes must be gone: VPP destroys a
// table without flushing it. A missing table is no error.
func delTable(ch channel, id uint32, v6 bool) error {
	req := &ip.IPTableAddDel{IsAdd: false, Table: ip.IPTable{TableID: id, IsIP6: v6}}
	if err := vppapi.IgnoreRetval(vppapi.Call(ch, req, &ip.IPTableAddDelReply{}), api.NO_SUCH_FIB, api.NO_SUCH_TABLE); err != nil {
		return fmt.Errorf("delete the %s table %d: %w", familyName(v6), id, err)
	}
	return nil
}

// sourcePath adds (or removes) the path through sw of prefix p in the
// source table of p's family, leaving the route's other paths as they
// are; VPP deletes the route with its last path. Removing a path that is
// not there changes nothing.
func sourcePath(ch channel, add bool, sw uint32, p netip.Prefix) error {
	path := throughInterface(sw, p.Addr().Is6())
	req := &ip.IPRouteAddDel{IsAdd: add, IsMultipath: true, Route: ip.IPRoute{TableID: SourceTableID, Prefix: vppapi.Prefix(p), NPaths: 1, Paths: []fib_types.FibPath{path}}}
	err := vppapi.Call(ch, req, &ip.IPRouteAddDelReply{})
	if !add {
		err = vppapi.IgnoreRetval(err, api.NO_SUCH_ENTRY, api.NO_SUCH_FIB)
	}
	if err != nil {
		verb := "add"
		if !add {
			verb = "remove"
		}
		return fmt.Errorf("source table: %s the path of %s through interface %d: %w", verb, p, sw, err)
	}
	return nil
}

// tableRoutes reads table id of family v6: each prefix's interfaces, for
// the routes whose paths go through interfaces (the ones vcoil adds; an
// IPv6 table's own entries go elsewhere). A missing table has none.
func tableRoutes(ch channel, id uint32, v6 bool) (map[netip.Prefix][]uint32, error) {
	out := map[netip.Prefix][]uint32{}
	err := apiRoutes(ch, id, v6,
		func(r *ip.IPRouteV2) {
			p := fromVPPPrefix(r.Prefix)
			for _, path := range r.Paths {
				if path.Type == fib_types.FIB_API_PATH_TYPE_NORMAL && path.SwIfIndex != ^uint32(0) && !slices.Contains(out[p], path.SwIfIndex) {
					out[p] = append(out[p], path.SwIfIndex)
				}
			}
		})
	if err != nil && !vppapi.IsRetval(err, api.NO_SUCH_FIB) && !vppapi.IsRetval(err, api.NO_SUCH_TABLE) {
		return nil, fmt.Errorf("list the routes of table %d: %w", id, err)
	}
	return out, nil
}

// sourcePaths are the prefixes of the source tables' paths, by the
// interface they go through. Kept by the driver between syncs.
type sourcePaths map[uint32]map[netip.Prefix]bool

func (s sourcePaths) add(sw uint32, p netip.Prefix) {
	if s[sw] == nil {
		s[sw] = map[netip.Prefix]bool{}
	}
	s[sw][p] = true
}

func (s sourcePaths) remove(sw uint32, p netip.Prefix) {
	delete(s[sw], p)
	if len(s[sw]) == 0 {
		delete(s, sw)
	}
}

// sorted are sw's prefixes, IPv4 first, in address order.
func (s sourcePaths) sorted(sw uint32) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s[sw]))
	for p := range s[sw] {
		out = append(out, p)
	}
	slices.SortFunc(out, comparePrefixes)
	return out
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}

// setSourcePaths makes sw's paths in the source tables those of want:
// the missing ones added, the others removed. The caller holds d.mu.
func (d *driver) setSourcePaths(sw uint32, want []netip.Prefix) error {
	for _, p := range want {
		if d.sources[sw][p] {
			continue
		}
		if err := sourcePath(d.ch, true, sw, p); err != nil {
			return err
		}
		d.sources.add(sw, p)
	}
	for _, p := range d.sources.sorted(sw) {
		if slices.Contains(want, p) {
			continue
		}
		if err := sourcePath(d.ch, false, sw, p); err != nil {
			return err
		}
		d.sources.remove(sw, p)
	}
	return nil
}

// podSources are every source prefix of pod, IPv4 first.
func podSources(pod dataplane.Pod) []netip.Prefix {
	return append(sourcePrefixes(pod, false), sourcePrefixes(pod, true)...)
}

// enableSourceCheck gives the new interface sw of pod its paths in the
// source tables and its checks, before the interface is up. An earlier
// interface with this sw_if_index may have left its uRPF configuration
// behind (VPP keeps it when an interface is deleted, and vcoil removes it
// first only when it deletes the interface itself): VPP would then take
// the same mode and table for no change and leave the check off, so such
// a configuration is removed first, as are paths through sw the driver
// knows of. u gets the steps that undo it. The caller holds d.mu.
func (d *driver) enableSourceCheck(sw uint32, pod dataplane.Pod, u *undo) error {
	held, err := urpfDump(d.ch, sw)
	if err != nil {
		return err
	}
	for _, v6 := range sourceFamilies {
		if h, ok := held[sw][v6]; ok && h.Mode != urpf.URPF_API_MODE_OFF {
			if err := setURPF(d.ch, sw, v6, true, 0); err != nil {
				return err
			}
		}
	}
	u.push(func() error { return d.dropSourceCheck(sw) })
	if err := d.setSourcePaths(sw, podSources(pod)); err != nil {
		return err
	}
	for _, v6 := range sourceFamilies {
		if err := setURPF(d.ch, sw, v6, false, SourceTableID); err != nil {
			return err
		}
	}
	return nil
}

// dropSourceCheck turns sw's checks off, then removes its paths from the
// source tables (at DEL, before the interface is deleted, and for
// interfaces no pod uses). What is gone already is no error. The caller holds d.mu.
func (d *driver) dropSourceCheck(sw uint32) error {
	var errs []error
	for _, v6 := range sourceFamilies {
		if err := setURPF(d.ch, sw, v6, true, 0); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return d.setSourcePaths(sw, nil)
}

// sourceChecks is what VPP holds of the source checks at a sync: the uRPF
// checks by interface (the paths are in driver.sources).
type sourceChecks struct {
	urpf map[uint32]urpfHeld
}

// readSourceChecks makes the source tables (when VPP lacks them), moves
// what an earlier vcoild's per-interface tables held into them, and reads
// the paths (into d.sources) and the uRPF checks VPP holds. The caller
// holds d.mu.
func (d *driver) readSourceChecks() (sourceChecks, error) {
	ch := d.ch
	for _, v6 := range sourceFamilies {
		if err := addTable(ch, SourceTableID, v6, SourceTableName); err != nil {
			return sourceChecks{}, fmt.Errorf("source validation: %w", err)
		}
	}
	d.sources = sourcePaths{}
	for _, v6 := range sourceFamilies {
		routes, err := tableRoutes(ch, SourceTableID, v6)
		if err != nil {
			return sourceChecks{}, fmt.Errorf("source validation: %w", err)
		}
		for p, sws := range routes {
			for _, sw := range sws {
				d.sources.add(sw, p)
			}
		}
	}
	held, err := urpfDump(ch, ^uint32(0))
	if err != nil {
		return sourceChecks{}, err
	}
	if err := d.migrateLegacyTables(held); err != nil {
		return sourceChecks{}, fmt.Errorf("source validation: %w", err)
	}
	return sourceChecks{urpf: held}, nil
}

// migrateLegacyTables moves the routes of an earlier vcoild's source
// tables (one per interface and family) into the source tables as paths
// through their interface, points the interfaces' checks that used them
// at the source tables (in held too), and deletes them: the paths go in
// before the check moves, so that the interface is never checked against
// less than it was. The caller holds d.mu.
func (d *driver) migrateLegacyTables(held map[uint32]urpfHeld) error {
	type legacy struct {
		id uint32
		v6 bool
	}
	var tables []legacy
	err := vppapi.Dump(d.ch, &ip.IPTableDump{},
		func() *ip.IPTableDetails { return &ip.IPTableDetails{} },
		func(m *ip.IPTableDetails) {
			if _, ok := legacyTableInterface(m.Table.TableID); ok {
				tables = append(tables, legacy{m.Table.TableID, m.Table.IsIP6})
			}
		})
	if err != nil {
		return fmt.Errorf("list VPP's tables: %w", err)
	}
	slices.SortFunc(tables, func(a, b legacy) int {
		if a.id != b.id {
			return int(a.id) - int(b.id)
		}
		return boolOrder(a.v6) - boolOrder(b.v6)
	})
	for _, t := range tables {
		sw, _ := legacyTableInterface(t.id)
		routes, err := tableRoutes(d.ch, t.id, t.v6)
		if err != nil {
			return err
		}
		prefixes := make([]netip.Prefix, 0, len(routes))
		for p := range routes {
			prefixes = append(prefixes, p)
		}
		slices.SortFunc(prefixes, comparePrefixes)
		if c, ok := held[sw][t.v6]; ok && c.Mode == urpf.URPF_API_MODE_STRICT && c.TableID == t.id {
			for _, p := range prefixes {
				if !slices.Contains(routes[p], sw) || d.sources[sw][p] {
					continue
				}
				if err := sourcePath(d.ch, true, sw, p); err != nil {
					return err
				}
				d.sources.add(sw, p)
			}
			// Another table is a change VPP applies (urpf_update compares
			// mode and table).
			if err := setURPF(d.ch, sw, t.v6, false, SourceTableID); err != nil {
				return err
			}
			c.TableID = SourceTableID
			held[sw][t.v6] = c
		}
		for _, p := range prefixes {
			req := &ip.IPRouteAddDel{IsAdd: false, Route: ip.IPRoute{TableID: t.id, Prefix: vppapi.Prefix(p)}}
			if err := vppapi.IgnoreRetval(vppapi.Call(d.ch, req, &ip.IPRouteAddDelReply{}), api.NO_SUCH_ENTRY, api.NO_SUCH_FIB); err != nil {
				return fmt.Errorf("table %d: delete the route to %s: %w", t.id, p, err)
			}
		}
		if err := delTable(d.ch, t.id, t.v6); err != nil {
			return err
		}
		d.log.Info("moved an earlier vcoild's per-interface source table into the source table", "table", t.id, "family", familyName(t.v6), "interface", sw, "routes", len(prefixes))
	}
	return nil
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}

// syncSourceCheck makes the source check of a kept pod interface sw hold
// paths (added and removed) and its uRPF checks. The caller holds d.mu.
func (d *driver) syncSourceCheck(sw uint32, pod dataplane.Pod, held sourceChecks, paths []netip.Prefix) error {
	if err := d.setSourcePaths(sw, paths); err != nil {
		return err
	}
	for _, v6 := range sourceFamilies {
		if !held.urpf[sw].strict(v6) {
			if err := setURPF(d.ch, sw, v6, false, SourceTableID); err != nil {
				return err
			}
		}
	}
	return nil
}

// adoptSourceCheck makes sure that an adopted pod interface sw (its pod
// known only by its addresses) is checked, and may send from pod's
// addresses and the link-local range. Paths it holds beyond those stay:
// they may be source prefixes of the pod, which vcoild's recovery names
// when it sets the pod up again (updateSourceCheck). The caller holds
// d.mu.
func (d *driver) adoptSourceCheck(sw uint32, pod dataplane.Pod, held sourceChecks) error {
	want := podSources(pod)
	for p := range d.sources[sw] {
		if !slices.Contains(want, p) {
			want = append(want, p)
		}
	}
	return d.syncSourceCheck(sw, pod, held, want)
}

// removeStaleSources removes the paths, and turns off the checks, of
// interfaces that are no wired pod's (held: the uRPF checks read at the
// start of the sync). An interface the sync deleted already is asked
// again, which changes nothing. The caller holds d.mu.
func (d *driver) removeStaleSources(held sourceChecks) error {
	wired := map[uint32]bool{}
	for _, st := range d.pods {
		if st.wired {
			wired[st.swIfIndex] = true
		}
	}
	stale := map[uint32]bool{}
	for sw := range d.sources {
		stale[sw] = !wired[sw]
	}
	for sw, h := range held.urpf {
		if !wired[sw] && (h.strict(false) || h.strict(true)) {
			stale[sw] = true
		}
	}
	sws := make([]uint32, 0, len(stale))
	for sw, s := range stale {
		if s {
			sws = append(sws, sw)
		}
	}
	slices.Sort(sws)
	for _, sw := range sws {
		n := len(d.sources[sw])
		if err := d.dropSourceCheck(sw); err != nil {
			return err
		}
		d.log.Info("removed the source checks of an interface no pod uses", "interface", sw, "paths", n)
	}
	return nil
}

// updateSourceCheck changes the paths of a wired pod's interface to
// pod's (its SourcePrefixes changed). The caller holds d.mu.
func (d *driver) updateSourceCheck(sw uint32, pod dataplane.Pod) error {
	return d.setSourcePaths(sw, podSources(pod))
}

// checkSourceCheck fails unless VPP checks the sources of both families
// on sw against the source tables.
func (d *driver) checkSourceCheck(sw uint32) error {
	held, err := urpfDump(d.ch, sw)
	if err != nil {
		return err
	}
	for _, v6 := range sourceFamilies {
		if !held[sw].strict(v6) {
			return fmt.Errorf("VPP does not validate the %s sources of interface %d (strict uRPF against table %d)", familyName(v6), sw, SourceTableID)
		}
	}
	return nil
}
