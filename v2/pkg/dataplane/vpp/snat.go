package vpp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/classify"
	"go.fd.io/govpp/binapi/fib_types"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/pipe"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// Source NAT of pods' IPv4 traffic leaving the node (Config.SNAT).
//
// NAT44-ED can only SNAT dynamically in its output feature, which
// translates every new flow leaving its interface and cannot exclude
// destinations; its identity mappings exempt sources, but they also match
// as destinations on the in/out interfaces the services renderer makes
// (pods, the uplink), and then break every connection of that address. So
// vcoil decides by routing, in VPP, with two pipes (pipeN.0 and pipeN.1:
// what leaves one end enters the other):
//
//	table 0:           cluster CIDRs via the uplink's gateway (unchanged);
//	                   0.0.0.0/0 into the split pipe.
//	split pipe .1:     in SNATTable, with an input classifier that sends
//	                   the exempt sources' packets to SNATBypassTable.
//	SNATTable:         0.0.0.0/0 into the NAT pipe, whose .0 end (in table
//	                   0) carries the NAT44-ED output feature (pool: the
//	                   uplink's address); cluster CIDRs back to table 0, for
//	                   the replies NAT44-ED un-NATs with this table as their
//	                   lookup table (the table the packet came from).
//	NAT pipe .1:       in SNATBypassTable.
//	SNATBypassTable:   0.0.0.0/0 via the uplink's gateway.
//
// Replies arrive on the uplink, which is kept a NAT frontend (outside) and
// finds their sessions; NAT forwarding is on so that the uplink's traffic
// without a session (external clients, other nodes' pods) passes. Cluster
// destinations never enter the pipes. IPv6 is not translated.

// The VPP tables, tags and addresses of SNAT. The addresses are
// link-local, never seen outside VPP: a pipe end needs one for IPv4 to be
// enabled on it, and cannot borrow vcoil's loopback in another table.
const (
	// SNATTable holds the split pipe's exit and the NAT pipe's entry.
	SNATTable = 118
	// SNATBypassTable routes what leaves the node without (or after) NAT.
	SNATBypassTable = 119
)

var (
	snatSplitTag = formatversion.Tag("vcoil-snat-split")
	snatNATTag   = formatversion.Tag("vcoil-snat-nat")

	SNATSplitIPv4 = netip.MustParsePrefix("169.254.102.1/32")
	SNATNATIPv4   = netip.MustParsePrefix("169.254.102.2/32")
)

// SNATConfig turns on the source NAT of pods' IPv4 traffic to destinations
// outside the cluster, to the uplink's address.
type SNATConfig struct {
	// ClusterCIDRs are the destinations never translated: every pod CIDR,
	// the node networks, the service CIDRs. VPP routes them through the
	// uplink's gateway, as its default route does without SNAT; the
	// node's own blocks and service routes, more specific, keep theirs.
	// IPv6 prefixes are allowed and ignored.
	ClusterCIDRs []netip.Prefix
	// ExemptSources keep their address whatever the destination: pods
	// that translate themselves (egress NAT routers), so that their
	// traffic is not translated twice.
	ExemptSources []netip.Addr
}

// validate checks c against the rest of cfg, naming the field.
func (c *SNATConfig) validate(cfg Config) error {
	if cfg.Uplink == "" {
		return errors.New("SNAT needs Uplink: replies to the uplink's address come back through it")
	}
	if !cfg.UplinkGatewayIPv4.IsValid() {
		return errors.New("SNAT needs UplinkGatewayIPv4: translated traffic leaves through it")
	}
	if len(c.ipv4CIDRs()) == 0 {
		return errors.New("SNAT.ClusterCIDRs has no IPv4 prefix: without them every pod's traffic to other nodes' pods would be translated")
	}
	for _, p := range c.ClusterCIDRs {
		if !p.IsValid() || p.Bits() == 0 {
			return fmt.Errorf("SNAT.ClusterCIDRs: %s is not a cluster CIDR", p)
		}
	}
	for _, a := range c.ExemptSources {
		if !a.Is4() {
			return fmt.Errorf("SNAT.ExemptSources: %s is not an IPv4 address (SNAT is IPv4 only)", a)
		}
	}
	return nil
}

// ipv4CIDRs are the IPv4 cluster CIDRs, masked, without duplicates, in
// address order.
func (c *SNATConfig) ipv4CIDRs() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.ClusterCIDRs {
		if p.IsValid() && p.Addr().Is4() && !slices.Contains(out, p.Masked()) {
			out = append(out, p.Masked())
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// snatPipe is one pipe: the parent interface and its two ends.
type snatPipe struct {
	parent uint32
	ends   [2]uint32
}

// syncSNAT makes SNAT as Config.SNAT says, from the interface dump ifs,
// after the node's interfaces (d.node) exist. Without SNAT it deletes the
// pipes an earlier vcoild made. Every step is idempotent, so that a VPP
// that outlived vcoild is completed, not rebuilt. The caller holds d.mu.
func (d *driver) syncSNAT(ifs []vppInterface) error {
	var tagged []vppInterface
	for _, i := range ifs {
		if i.tag == snatSplitTag || i.tag == snatNATTag {
			tagged = append(tagged, i)
		}
	}
	c := d.cfg.SNAT
	if c == nil {
		for _, i := range tagged {
			if err := vppapi.Call(d.ch, &pipe.PipeDelete{SwIfIndex: index(i.swIfIndex)}, &pipe.PipeDeleteReply{}); err != nil {
				return fmt.Errorf("delete the SNAT pipe %s: %w", i.name, err)
			}
			d.log.Info("deleted a SNAT pipe: SNAT is off", "vppInterface", i.name)
		}
		return nil
	}
	if err := d.ensureNAT(); err != nil {
		return err
	}
	if err := vppapi.Call(d.ch, &nat44_ed.Nat44ForwardingEnableDisable{Enable: true}, &nat44_ed.Nat44ForwardingEnableDisableReply{}); err != nil {
		return fmt.Errorf("enable NAT forwarding for SNAT: %w", err)
	}
	for _, t := range []uint32{SNATTable, SNATBypassTable} {
		if err := vppapi.Call(d.ch, &ip.IPTableAddDel{IsAdd: true, Table: ip.IPTable{TableID: t}}, &ip.IPTableAddDelReply{}); err != nil {
			return fmt.Errorf("add VPP table %d for SNAT: %w", t, err)
		}
	}
	split, nat, err := d.ensureSNATPipes(tagged)
	if err != nil {
		return err
	}
	// The tables before the addresses: VPP refuses to move an addressed
	// interface, so an address means an earlier vcoild bound the table.
	// The NAT pipe's entry stays in table 0: NAT44-ED keys a session's
	// outside half with the first table of its outside interfaces where
	// the destination resolves, and replies arrive on the uplink, in
	// table 0; with the entry in SNATTable, that table could come first
	// (seen on VPP 25.10: replies then missed their sessions).
	for _, b := range []struct {
		sw    uint32
		table uint32
		addr  netip.Prefix
		what  string
	}{
		{split.ends[1], SNATTable, SNATSplitIPv4, "the SNAT split pipe's exit"},
		{nat.ends[1], SNATBypassTable, SNATNATIPv4, "the SNAT NAT pipe's exit"},
	} {
		req := &interfaces.SwInterfaceSetTable{SwIfIndex: index(b.sw), VrfID: b.table}
		if err := vppapi.IgnoreRetval(vppapi.Call(d.ch, req, &interfaces.SwInterfaceSetTableReply{}), api.ADDRESS_FOUND_FOR_INTERFACE); err != nil {
			return fmt.Errorf("put %s in table %d: %w", b.what, b.table, err)
		}
		if b.addr.IsValid() {
			if err := d.ensureAddresses(b.sw, b.what, []netip.Prefix{b.addr}); err != nil {
				return err
			}
		}
	}
	for _, sw := range []uint32{split.parent, split.ends[0], split.ends[1], nat.parent, nat.ends[0], nat.ends[1]} {
		if err := setUp(d.ch, sw, fmt.Sprintf("SNAT pipe interface %d", sw)); err != nil {
			return err
		}
	}

	// NAT on the NAT pipe's entry, to the uplink's address (a normal pool
	// address, not a twice-NAT one: the services renderer keeps it).
	if err := vppapi.IgnoreRetval(vppapi.Call(d.ch, &nat44_ed.Nat44AddDelInterfaceAddr{IsAdd: true, SwIfIndex: index(d.node.uplink)},
		&nat44_ed.Nat44AddDelInterfaceAddrReply{}), api.VALUE_EXIST); err != nil {
		return fmt.Errorf("put the uplink's address in the NAT pool: %w", err)
	}
	if err := vppapi.IgnoreRetval(vppapi.Call(d.ch, &nat44_ed.Nat44EdAddDelOutputInterface{IsAdd: true, SwIfIndex: index(nat.ends[0])},
		&nat44_ed.Nat44EdAddDelOutputInterfaceReply{}), api.VALUE_EXIST); err != nil {
		return fmt.Errorf("NAT44 output feature on the SNAT NAT pipe: %w", err)
	}
	if err := d.syncSNATExemptions(split.ends[1], c.ExemptSources); err != nil {
		return err
	}

	// Routes, the default into the split pipe last, when the rest is
	// ready.
	gw := viaPath(d.node.uplink, d.cfg.UplinkGatewayIPv4)
	any4 := netip.MustParsePrefix("0.0.0.0/0")
	if err := addTableRoute(d.ch, SNATBypassTable, any4, gw); err != nil {
		return err
	}
	if err := addTableRoute(d.ch, SNATTable, any4, attachedPath(nat.ends[0])); err != nil {
		return err
	}
	for _, p := range c.ipv4CIDRs() {
		if err := addTableRoute(d.ch, SNATTable, p, lookupPath(0)); err != nil {
			return err
		}
		if d.serviceNetKnown && slices.Contains(d.serviceCIDRs(), p) {
			// The service network routes it to the node's kernel, after
			// this in a resync: replacing its route here would send
			// service traffic to the gateway meanwhile.
			continue
		}
		if err := addRoute(d.ch, p, gw); err != nil {
			return err
		}
	}
	return addRoute(d.ch, any4, attachedPath(split.ends[0]))
}

// ensureSNATPipes finds the tagged pipes and creates the missing ones.
func (d *driver) ensureSNATPipes(tagged []vppInterface) (split, nat snatPipe, err error) {
	pipes := map[uint32]snatPipe{}
	if len(tagged) > 0 {
		err = vppapi.Dump(d.ch, &pipe.PipeDump{}, func() *pipe.PipeDetails { return &pipe.PipeDetails{} },
			func(m *pipe.PipeDetails) {
				pipes[uint32(m.SwIfIndex)] = snatPipe{parent: uint32(m.SwIfIndex), ends: [2]uint32{uint32(m.PipeSwIfIndex[0]), uint32(m.PipeSwIfIndex[1])}}
			})
		if err != nil {
			return split, nat, fmt.Errorf("list VPP's pipes: %w", err)
		}
	}
	get := func(t string) (snatPipe, error) {
		for _, i := range tagged {
			if p, ok := pipes[i.swIfIndex]; ok && i.tag == t {
				return p, nil
			}
		}
		reply := &pipe.PipeCreateReply{}
		if err := vppapi.Call(d.ch, &pipe.PipeCreate{}, reply); err != nil {
			return snatPipe{}, fmt.Errorf("create the SNAT pipe %q: %w", t, err)
		}
		p := snatPipe{parent: uint32(reply.SwIfIndex), ends: [2]uint32{uint32(reply.PipeSwIfIndex[0]), uint32(reply.PipeSwIfIndex[1])}}
		if err := tag(d.ch, p.parent, t); err != nil {
			return snatPipe{}, err
		}
		d.log.Info("created a SNAT pipe", "tag", t, "swIfIndex", p.parent)
		return p, nil
	}
	if split, err = get(snatSplitTag); err != nil {
		return split, nat, err
	}
	nat, err = get(snatNATTag)
	return split, nat, err
}

// syncSNATExemptions makes the classifier on the split pipe's exit send
// exactly the exempt sources to SNATBypassTable.
func (d *driver) syncSNATExemptions(sw uint32, exempt []netip.Addr) error {
	byIf := &classify.ClassifyTableByInterfaceReply{}
	if err := vppapi.Call(d.ch, &classify.ClassifyTableByInterface{SwIfIndex: index(sw)}, byIf); err != nil {
		return fmt.Errorf("read the SNAT exemption classifier: %w", err)
	}
	table := byIf.IP4TableID
	have := map[netip.Addr]bool{}
	if table == ^uint32(0) {
		reply := &classify.ClassifyAddDelTableReply{}
		req := &classify.ClassifyAddDelTable{IsAdd: true, TableIndex: ^uint32(0), Nbuckets: 32, MemorySize: 1 << 20,
			SkipNVectors: 1, MatchNVectors: 1, NextTableIndex: ^uint32(0), MissNextIndex: ^uint32(0), Mask: exemptMask()}
		if err := vppapi.Call(d.ch, req, reply); err != nil {
			return fmt.Errorf("add the SNAT exemption classifier: %w", err)
		}
		table = reply.NewTableIndex
		in := &classify.InputACLSetInterface{SwIfIndex: index(sw), IP4TableIndex: table, IP6TableIndex: ^uint32(0), L2TableIndex: ^uint32(0), IsAdd: true}
		if err := vppapi.Call(d.ch, in, &classify.InputACLSetInterfaceReply{}); err != nil {
			return fmt.Errorf("attach the SNAT exemption classifier: %w", err)
		}
	} else {
		err := vppapi.Dump(d.ch, &classify.ClassifySessionDump{TableID: table}, func() *classify.ClassifySessionDetails { return &classify.ClassifySessionDetails{} },
			func(m *classify.ClassifySessionDetails) {
				if a, ok := exemptSource(m.Match); ok {
					have[a] = true
				}
			})
		if err != nil {
			return fmt.Errorf("list the SNAT exemptions: %w", err)
		}
	}
	var errs []error
	for a := range have {
		if !slices.Contains(exempt, a) {
			errs = append(errs, exemptSession(d.ch, table, a, false))
		}
	}
	for _, a := range exempt {
		if !have[a] {
			errs = append(errs, exemptSession(d.ch, table, a, true))
		}
	}
	return errors.Join(errs...)
}

// The classifier matches the IPv4 source address, which VPP's input ACL
// sees 26 bytes into the packet (after a 14-byte Ethernet header, even on
// a pipe): one skipped and one matched 16-byte vector.
const exemptSourceOffset = 26

func exemptMask() []byte {
	m := make([]byte, 16)
	copy(m[exemptSourceOffset-16:], []byte{0xff, 0xff, 0xff, 0xff})
	return m
}

func exemptMatch(a netip.Addr) []byte {
	m := make([]byte, 32)
	b := a.As4()
	copy(m[exemptSourceOffset:], b[:])
	return m
}

func exemptSource(match []byte) (netip.Addr, bool) {
	if len(match) < exemptSourceOffset+4 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte(match[exemptSourceOffset : exemptSourceOffset+4])), true
}

// exemptSession adds or removes the classifier session that sends a's
// packets to SNATBypassTable (Metadata is a table ID: VPP finds its index).
func exemptSession(ch channel, table uint32, a netip.Addr, isAdd bool) error {
	req := &classify.ClassifyAddDelSession{IsAdd: isAdd, TableIndex: table, HitNextIndex: ^uint32(0), OpaqueIndex: ^uint32(0),
		Action: classify.CLASSIFY_API_ACTION_SET_IP4_FIB_INDEX, Metadata: SNATBypassTable, Match: exemptMatch(a)}
	if err := vppapi.Call(ch, req, &classify.ClassifyAddDelSessionReply{}); err != nil {
		verb := "add"
		if !isAdd {
			verb = "remove"
		}
		return fmt.Errorf("%s the SNAT exemption of %s: %w", verb, a, err)
	}
	return nil
}

// attachedPath sends what the route matches out of swIfIndex, a
// point-to-point interface (a pipe end), without a next hop.
func attachedPath(swIfIndex uint32) fib_types.FibPath {
	return fib_types.FibPath{SwIfIndex: swIfIndex, Weight: 1, Proto: fib_types.FIB_API_PATH_NH_PROTO_IP4, Type: fib_types.FIB_API_PATH_TYPE_NORMAL}
}

// lookupPath looks the destination up again in table.
func lookupPath(table uint32) fib_types.FibPath {
	return fib_types.FibPath{SwIfIndex: ^uint32(0), TableID: table, Weight: 1, Proto: fib_types.FIB_API_PATH_NH_PROTO_IP4, Type: fib_types.FIB_API_PATH_TYPE_NORMAL}
}

// addTableRoute is addRoute in another table than 0.
func addTableRoute(ch channel, table uint32, dst netip.Prefix, path fib_types.FibPath) error {
	req := &ip.IPRouteAddDel{IsAdd: true, Route: ip.IPRoute{TableID: table, Prefix: vppapi.Prefix(dst), NPaths: 1, Paths: []fib_types.FibPath{path}}}
	if err := vppapi.Call(ch, req, &ip.IPRouteAddDelReply{}); err != nil {
		return fmt.Errorf("add route %s in table %d: %w", dst, table, err)
	}
	return nil
}
