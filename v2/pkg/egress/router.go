package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// RouterConfig configures the router side of one Egress, in a router pod.
type RouterConfig struct {
	Egress types.NamespacedName
	// PodIPs are the router pod's addresses (one per family).
	PodIPs       []netip.Addr
	Destinations []netip.Prefix
	// NetnsPath is the router pod's namespace; "" is the process's own.
	NetnsPath string
	// FoU makes the router accept FoU tunnels too (when FoUAvailable() is
	// nil); VXLAN is always accepted.
	FoU bool
}

// Router is the router side of one Egress: VXLAN receivers (one per
// family of the router's addresses), optionally FoU receivers, and per
// peer (client pod) what sends the replies back: for VXLAN an FDB entry
// (ClientMAC -> peer address), a neighbour (peer address -> ClientMAC) and
// a route in constants.EgressTable; for FoU a tunnel device per peer
// address and a route in constants.EgressFoUTable. A connection mark set
// where a flow comes in picks the table of its replies. Traffic from the
// tunnels to the destinations is forwarded and masqueraded behind the
// router's address, nothing else is forwarded. Tunnel packets (UDP to the
// VXLAN and FoU ports) are accepted only from the peers' addresses: the
// tunnel devices have no remote and would decapsulate anyone's.
//
// Its methods may be called from several goroutines.
type Router struct {
	cfg RouterConfig
	log logr.Logger

	mu     sync.Mutex
	k      *kernel // open from Setup on
	nft    nft.Table
	podIPs []netip.Addr
	ready  bool
	dests  []netip.Prefix
	// pods are the peers by id; seq orders them so that, of two pods
	// holding one address, the later one's entries win.
	pods map[string]peerPod
	seq  uint64
	// installed are the peers' kernel entries as last written, by key.
	installed map[string]peerEntry
}

type peerPod struct {
	ips []netip.Addr
	seq uint64
}

// NewRouter returns the router of cfg.Egress; Setup prepares the namespace.
func NewRouter(cfg RouterConfig, log logr.Logger) *Router {
	return &Router{cfg: cfg, log: log, podIPs: sortAddrs(cfg.PodIPs), dests: cfg.Destinations,
		pods: map[string]peerPod{}, installed: map[string]peerEntry{}}
}

// Setup prepares the router's namespace: forwarding, the tunnel
// receivers, the reply rules, the nftables table, the destinations, and the
// peers added so far. It starts from scratch, deleting what an earlier
// router process left in the namespace (a restarted container keeps its
// pod's namespace): replies of the peers are lost until they are added
// again. Calling it again rebuilds everything.
func (r *Router) Setup(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.setup(ctx); err != nil {
		return fmt.Errorf("set up egress router of %s: %w", r.cfg.Egress, err)
	}
	r.log.Info("egress router set up", "egress", r.cfg.Egress, "podIPs", r.podIPs, "fou", r.cfg.FoU,
		"vni", VNI(r.cfg.Egress), "destinations", r.dests, "peers", len(r.pods))
	return nil
}

func (r *Router) setup(ctx context.Context) error {
	r.ready = false
	if r.cfg.Egress.Name == "" || r.cfg.Egress.Namespace == "" {
		return invalid("the Egress's namespace and name are required")
	}
	if err := checkPodIPs(r.podIPs); err != nil {
		return err
	}
	dests, err := checkDestinations("Egress "+r.cfg.Egress.String(), r.dests)
	if err != nil {
		return err
	}
	if r.k == nil {
		k, err := openKernel(r.cfg.NetnsPath)
		if err != nil {
			return err
		}
		r.k = k
	}
	k := r.k
	if r.nft, err = k.nftTable(); err != nil {
		return err
	}
	// A newer vcoil's router left this namespace: change nothing.
	if err := k.checkNFTFormat(ctx); err != nil {
		return err
	}
	uplink, err := k.linkOf(r.podIPs[0])
	if err != nil {
		return err
	}
	mtu := uplink.Attrs().MTU
	_, has4 := addrOf(r.podIPs, true)
	_, has6 := addrOf(r.podIPs, false)
	// The router pod's namespace is the router's own: it forwards only
	// what nftables lets through, and reverse path filtering, which
	// cannot see the peers' routes (packet mark only), must be off (see
	// rpOff).
	sysctls := []kernelns.Sysctl{{Key: "net/ipv4/ip_forward", Value: "1"}, {Key: "net/ipv4/conf/all/rp_filter", Value: "0"}}
	if has6 {
		sysctls = append(sysctls, kernelns.Sysctl{Key: "net/ipv6/conf/all/forwarding", Value: "1"})
	}
	if err := k.SetSysctls(sysctls...); err != nil {
		return err
	}

	// Start from scratch.
	if err := k.syncRules(nil, false); err != nil {
		return err
	}
	links, err := k.ourLinks()
	if err != nil {
		return err
	}
	for _, l := range links {
		if err := k.deleteLink(l); err != nil {
			return err
		}
	}
	for _, t := range []int{constants.EgressTable, constants.EgressFoUTable} {
		if err := k.syncTable(t, nil); err != nil {
			return err
		}
	}
	if err := k.deleteNFTable(ctx); err != nil {
		return err
	}
	r.installed = map[string]peerEntry{}

	vni := VNI(r.cfg.Egress)
	for _, a := range r.podIPs {
		name, overhead := routerVXLAN4, vxlanOverhead4
		if a.Is6() {
			name, overhead = routerVXLAN6, vxlanOverhead6
		}
		la := netlink.NewLinkAttrs()
		la.Name = name
		la.MTU = mtu - overhead
		la.HardwareAddr = RouterMAC(vni)
		if _, err := k.addLink(&netlink.Vxlan{LinkAttrs: la, VxlanId: int(vni), SrcAddr: a.AsSlice(), Port: vxlanPort, Learning: false}, routerAlias, rpOff); err != nil {
			return err
		}
	}
	if r.cfg.FoU {
		var fams []int
		for _, a := range r.podIPs {
			fams = append(fams, familyOf(a))
			la := netlink.NewLinkAttrs()
			la.Name = routerFoU4
			var l netlink.Link
			if a.Is4() {
				la.MTU = mtu - fouOverhead4
				l = &netlink.Iptun{LinkAttrs: la, Local: a.AsSlice(), EncapType: tunnelEncapFoU, EncapDport: fouPort, EncapSport: fouPort, PMtuDisc: 1}
			} else {
				la.Name = routerFoU6
				la.MTU = mtu - fouOverhead6
				l = &netlink.Ip6tnl{LinkAttrs: la, Local: a.AsSlice(), Proto: unix.IPPROTO_IPV6, Flags: ip6TnlIgnEncapLimit,
					EncapType: tunnelEncapFoU, EncapDport: fouPort, EncapSport: fouPort}
			}
			if _, err := k.addLink(l, routerAlias, rpOff); err != nil {
				return err
			}
		}
		if err := k.syncFoUPorts(fams); err != nil {
			return err
		}
	} else if err := k.syncFoUPorts(nil); err != nil {
		return err // close what an earlier router with FoU opened
	}
	if err := k.addRouterRules(has4, has6, r.cfg.FoU); err != nil {
		return err
	}
	if err := r.writeNFT(ctx, dests); err != nil {
		return err
	}
	r.dests = dests
	r.ready = true
	return r.syncPeers(ctx)
}

// addRouterRules adds, per family: the router's own packets (the tunnels'
// outer packets, which inherit a reply's mark) to main, and replies marked
// by nftables to the table of their encapsulation.
func (k *kernel) addRouterRules(has4, has6, fou bool) error {
	for _, f := range []struct {
		on     bool
		family int
	}{{has4, netlink.FAMILY_V4}, {has6, netlink.FAMILY_V6}} {
		if !f.on {
			continue
		}
		rules := []*netlink.Rule{}
		lo := netlink.NewRule()
		lo.Family, lo.Priority, lo.Table, lo.IifName = f.family, constants.EgressExcludeRulePriority, unix.RT_TABLE_MAIN, "lo"
		rules = append(rules, lo)
		marks := []struct{ mark, table int }{{constants.EgressVXLANMark, constants.EgressTable}}
		if fou {
			marks = append(marks, struct{ mark, table int }{constants.EgressFoUMark, constants.EgressFoUTable})
		}
		for _, m := range marks {
			nr := netlink.NewRule()
			mask := uint32(constants.EgressMarkMask)
			nr.Family, nr.Priority, nr.Table, nr.Mark, nr.Mask = f.family, constants.EgressRulePriority, m.table, uint32(m.mark), &mask
			rules = append(rules, nr)
		}
		for _, nr := range rules {
			if err := k.NL.RuleAdd(nr); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("add %s rule priority %d table %d in %s: %w", familyName(f.family), nr.Priority, nr.Table, k.Path, err)
			}
		}
	}
	return nil
}

// The router's sets of peer addresses (elements written over netlink,
// one per address a peer pod holds) and the counter of the tunnel packets
// it refused for coming from elsewhere.
const (
	clientSet4           = "clients4"
	clientSet6           = "clients6"
	unknownClientCounter = "unknown-clients"
)

// routerLayouts declares the peer sets for nft.Table.ApplyElements.
var routerLayouts = nft.FixedLayouts(map[string]nft.Layout{
	clientSet4: {Key: []nft.Field{nft.IPv4Addr}},
	clientSet6: {Key: []nft.Field{nft.IPv6Addr}},
})

// The router's nftables rules. The marks: a flow's first packet from a
// tunnel records the encapsulation in the connection mark; its replies
// copy it to the packet mark, which the rules route by.
var (
	routerMarkRules = []string{
		fmt.Sprintf(`iifname "%s" ct state new ct mark set %#x`, routerVXLANPat, constants.EgressVXLANMark),
		fmt.Sprintf(`iifname "%s" ct state new ct mark set %#x`, routerFoUPat, constants.EgressFoUMark),
		fmt.Sprintf(`ct direction reply meta mark set ct mark and %#x`, constants.EgressMarkMask),
	}
	routerForwardRules = []string{
		"ct state invalid drop",
		"tcp flags syn / syn,rst tcp option maxseg size set rt mtu",
		"ct state established,related accept",
		`iifname "` + allLinksPat + `" ip daddr @dests4 accept`,
		`iifname "` + allLinksPat + `" ip6 daddr @dests6 accept`,
	}
	// The tunnel devices decapsulate whatever reaches their UDP port,
	// and the kernel delivers the datagrams to the tunnels' sockets after
	// the input hook: only the peers' addresses get through. The outer
	// source is the client pod's own address, also through the Service's
	// DNAT (pods' traffic to a ClusterIP is not masqueraded), and pods
	// cannot send with another pod's address (vcoild's source
	// validation). FoU's port is refused too when the router has no FoU
	// receivers: nothing listens there then.
	routerInputRules = []string{
		fmt.Sprintf(`udp dport { %d, %d } ip saddr != @%s counter name %q drop`, vxlanPort, fouPort, clientSet4, unknownClientCounter),
		fmt.Sprintf(`udp dport { %d, %d } ip6 saddr != @%s counter name %q drop`, vxlanPort, fouPort, clientSet6, unknownClientCounter),
	}
	// Postrouting knows no input interface: the connection mark says
	// that a flow came from a tunnel.
	routerNATRules = []string{
		fmt.Sprintf(`ct mark and %#x != 0 ip daddr @dests4 masquerade`, constants.EgressMarkMask),
		fmt.Sprintf(`ct mark and %#x != 0 ip6 daddr @dests6 masquerade`, constants.EgressMarkMask),
	}
)

// writeNFT writes the router's table whole (Setup deleted it first). Its
// layout may change without a new format version as long as only routers
// read it: a router of either layout replaces the other's at Setup, and
// vcoild reads only its format set.
func (r *Router) writeNFT(ctx context.Context, dests []netip.Prefix) error {
	tx := r.nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(nft.NewFormatSet(nftKind, formatversion.KernelTable))
	tx.Add(&knftables.Set{Name: "dests4", Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	tx.Add(&knftables.Set{Name: "dests6", Type: "ipv6_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	tx.Add(&knftables.Set{Name: clientSet4, Type: "ipv4_addr"})
	tx.Add(&knftables.Set{Name: clientSet6, Type: "ipv6_addr"})
	tx.Add(&knftables.Counter{Name: unknownClientCounter, Comment: knftables.PtrTo("tunnel packets from addresses that are no client")})
	chains := []struct {
		name     string
		typ      knftables.BaseChainType
		hook     knftables.BaseChainHook
		priority knftables.BaseChainPriority
		policy   *knftables.BaseChainPolicy
		rules    []string
	}{
		{"prerouting", knftables.FilterType, knftables.PreroutingHook, knftables.ManglePriority, nil, routerMarkRules},
		{"input", knftables.FilterType, knftables.InputHook, knftables.FilterPriority, nil, routerInputRules},
		{"forward", knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority, knftables.PtrTo(knftables.DropPolicy), routerForwardRules},
		{"postrouting", knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority, nil, routerNATRules},
	}
	for _, c := range chains {
		tx.Add(&knftables.Chain{Name: c.name, Type: &c.typ, Hook: &c.hook, Priority: &c.priority, Policy: c.policy})
		for _, rule := range c.rules {
			tx.Add(&knftables.Rule{Chain: c.name, Rule: rule})
		}
	}
	addDestElements(tx, dests)
	if err := r.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables table %s in %s: %w", constants.EgressNFTable, r.k.Path, err)
	}
	return nil
}

func addDestElements(tx *knftables.Transaction, dests []netip.Prefix) {
	for _, d := range dests {
		set := "dests4"
		if d.Addr().Is6() {
			set = "dests6"
		}
		tx.Add(&knftables.Element{Set: set, Key: []string{d.String()}})
	}
}

// SetDestinations replaces the networks the router forwards to (and
// masquerades for). Before Setup it only records them.
func (r *Router) SetDestinations(ctx context.Context, d []netip.Prefix) error {
	dests, err := checkDestinations("Egress "+r.cfg.Egress.String(), d)
	if err != nil {
		return fmt.Errorf("set destinations of egress router of %s: %w", r.cfg.Egress, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ready {
		r.dests = dests
		return nil
	}
	tx := r.nft.NewTransaction()
	tx.Flush(&knftables.Set{Name: "dests4"})
	tx.Flush(&knftables.Set{Name: "dests6"})
	addDestElements(tx, dests)
	if err := r.nft.Run(ctx, tx); err != nil {
		return fmt.Errorf("set destinations %v of egress router of %s in %s: %w", dests, r.cfg.Egress, r.k.Path, err)
	}
	r.dests = dests
	r.log.Info("egress destinations set", "egress", r.cfg.Egress, "destinations", dests)
	return nil
}

// AddPeer makes the client pod id (its UID) with addresses ips a peer.
// Adding an id again with other addresses replaces them.
func (r *Router) AddPeer(ctx context.Context, id string, ips []netip.Addr) error {
	if err := checkPodIPs(ips); err != nil {
		return fmt.Errorf("add peer %s to egress router of %s: %w", id, r.cfg.Egress, err)
	}
	ips = sortAddrs(ips)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.vxlanLinkFor(ips[0]); !ok {
		return fmt.Errorf("add peer %s to egress router of %s: %w", id, r.cfg.Egress,
			invalid("the peer's address %s is %s but the router has no %s address", ips[0], familyName(familyOf(ips[0])), familyName(familyOf(ips[0]))))
	}
	if p, ok := r.pods[id]; !ok || !slices.Equal(p.ips, ips) {
		r.seq++
		r.pods[id] = peerPod{ips: ips, seq: r.seq}
	}
	if err := r.syncPeers(ctx); err != nil {
		return fmt.Errorf("add peer %s %v to egress router of %s: %w", id, ips, r.cfg.Egress, err)
	}
	return nil
}

// RemovePeer forgets the client pod id. An address that another pod still
// holds keeps its entries.
func (r *Router) RemovePeer(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, id)
	if err := r.syncPeers(ctx); err != nil {
		return fmt.Errorf("remove peer %s from egress router of %s: %w", id, r.cfg.Egress, err)
	}
	return nil
}

// Peers returns every peer address with the number of pods holding it.
func (r *Router) Peers() map[netip.Addr]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[netip.Addr]int{}
	for _, p := range r.pods {
		for _, a := range p.ips {
			out[a]++
		}
	}
	return out
}

// Close releases the router's namespace; the kernel state stays.
func (r *Router) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.k != nil {
		r.k.Close()
		r.k = nil
	}
	r.ready = false
}

func (r *Router) vxlanLinkFor(a netip.Addr) (string, bool) {
	if _, ok := addrOf(r.podIPs, a.Is4()); !ok {
		return "", false
	}
	if a.Is4() {
		return routerVXLAN4, true
	}
	return routerVXLAN6, true
}

// peerEntry is one kernel object of the peers.
type peerEntry struct {
	kind  string // entryFoULink, entryFDB, entryNeigh, entryRoute, entryClient (the order of creation)
	link  string
	ip    netip.Addr // the peer address (FDB: its VXLAN remote)
	mac   net.HardwareAddr
	table int
}

const (
	entryFoULink = "1-foulink"
	entryFDB     = "2-fdb"
	entryNeigh   = "3-neigh"
	entryRoute   = "4-route"
	// entryClient admits the address's tunnel packets (an element of
	// clientSet4 or clientSet6). It comes last and goes first, so that
	// the router takes a peer's traffic only once it can answer it.
	entryClient = "5-client"
)

// key identifies the kernel object the entry writes; two pods may want
// different values for one key (a reused address).
func (e peerEntry) key() string {
	switch e.kind {
	case entryFDB:
		return fmt.Sprintf("%s %s %s", e.kind, e.link, e.mac)
	case entryRoute:
		return fmt.Sprintf("%s %d %s", e.kind, e.table, e.ip)
	case entryClient:
		return fmt.Sprintf("%s %s", e.kind, e.ip)
	default:
		return fmt.Sprintf("%s %s %s", e.kind, e.link, e.ip)
	}
}

func (e peerEntry) String() string {
	return fmt.Sprintf("%s %s %s %s %d", e.kind, e.link, e.ip, e.mac, e.table)
}

// wantedPeers computes every peer entry from the pods; of two pods
// wanting one key, the later added wins.
func (r *Router) wantedPeers() map[string]peerEntry {
	ids := make([]string, 0, len(r.pods))
	for id := range r.pods {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int { return cmp.Compare(r.pods[a].seq, r.pods[b].seq) })
	out := map[string]peerEntry{}
	add := func(e peerEntry) { out[e.key()] = e }
	for _, id := range ids {
		ips := r.pods[id].ips
		link, ok := r.vxlanLinkFor(ips[0])
		if !ok {
			continue
		}
		mac := ClientMAC(ips)
		for _, a := range ips {
			add(peerEntry{kind: entryClient, ip: a})
		}
		add(peerEntry{kind: entryFDB, link: link, ip: ips[0], mac: mac})
		for _, a := range ips {
			add(peerEntry{kind: entryNeigh, link: link, ip: a, mac: mac})
			add(peerEntry{kind: entryRoute, link: link, ip: a, table: constants.EgressTable})
		}
		if !r.cfg.FoU {
			continue
		}
		for _, a := range ips {
			if _, ok := addrOf(r.podIPs, a.Is4()); !ok {
				continue
			}
			name := routerPeerLinkName(a)
			add(peerEntry{kind: entryFoULink, link: name, ip: a})
			add(peerEntry{kind: entryRoute, link: name, ip: a, table: constants.EgressFoUTable})
		}
	}
	return out
}

// syncPeers writes the difference between the wanted and the installed
// entries: removals in reverse order of creation, then additions. An entry
// that fails stays out of installed, so the next call retries it. The
// admissions (entryClient) go in one netlink batch each way.
func (r *Router) syncPeers(ctx context.Context) error {
	if !r.ready {
		return nil
	}
	want := r.wantedPeers()
	var del, add, admit, revoke []peerEntry
	for key, e := range r.installed {
		if w, ok := want[key]; !ok || w.String() != e.String() {
			if e.kind == entryClient {
				revoke = append(revoke, e)
				continue
			}
			del = append(del, e)
		}
	}
	for key, w := range want {
		if e, ok := r.installed[key]; !ok || e.String() != w.String() {
			if w.kind == entryClient {
				admit = append(admit, w)
				continue
			}
			add = append(add, w)
		}
	}
	slices.SortFunc(del, func(a, b peerEntry) int { return -cmp.Compare(a.kind, b.kind) })
	slices.SortFunc(add, func(a, b peerEntry) int { return cmp.Compare(a.kind, b.kind) })
	var errs []error
	if err := r.k.revokeClients(ctx, r.nft, revoke); err != nil {
		errs = append(errs, err)
	} else {
		for _, e := range revoke {
			delete(r.installed, e.key())
		}
	}
	for _, e := range del {
		// A changed entry is rewritten in place (replace); only FoU links
		// and entries no longer wanted are deleted.
		if w, ok := want[e.key()]; ok && w.kind != entryFoULink {
			continue
		}
		if err := r.k.deletePeerEntry(e); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(r.installed, e.key())
	}
	for _, e := range add {
		if err := r.k.addPeerEntry(e, r.podIPs); err != nil {
			errs = append(errs, err)
			continue
		}
		r.installed[e.key()] = e
	}
	if err := r.k.admitClients(ctx, r.nft, admit); err != nil {
		errs = append(errs, err)
	} else {
		for _, e := range admit {
			r.installed[e.key()] = e
		}
	}
	return errors.Join(errs...)
}

// clientOps are the element changes of entryClient entries, grouped by
// set so that each set takes one netlink message.
func clientOps(es []peerEntry, del bool) []nft.ElementOp {
	ops := make([]nft.ElementOp, 0, len(es))
	for _, e := range es {
		set := clientSet4
		if e.ip.Is6() {
			set = clientSet6
		}
		ops = append(ops, nft.ElementOp{Delete: del, Set: set, Key: []string{e.ip.String()}})
	}
	slices.SortFunc(ops, func(a, b nft.ElementOp) int { return cmp.Compare(a.Set, b.Set) })
	return ops
}

// admitClients adds the peers' addresses to the client sets; adding an
// address that is there already is no error.
func (k *kernel) admitClients(ctx context.Context, t nft.Table, es []peerEntry) error {
	if len(es) == 0 {
		return nil
	}
	// In batches that fit a netlink message: adding is idempotent, so a
	// failure part way leaves nothing a retry cannot finish.
	for part := range slices.Chunk(es, nft.MaxApplyOps) {
		if err := t.ApplyElements(ctx, clientOps(part, false)); err != nil {
			return fmt.Errorf("admit the tunnel packets of %d peer addresses in %s: %w", len(es), k.Path, err)
		}
	}
	return nil
}

// revokeClients deletes the addresses from the client sets. Deleting an
// element that is not there fails the whole batch: then the addresses
// still present are deleted alone.
func (k *kernel) revokeClients(ctx context.Context, t nft.Table, es []peerEntry) error {
	if len(es) == 0 {
		return nil
	}
	var err error
	for part := range slices.Chunk(es, nft.MaxApplyOps) {
		if err = t.ApplyElements(ctx, clientOps(part, true)); err != nil {
			break
		}
	}
	if err == nil {
		return nil
	}
	present := map[netip.Addr]bool{}
	for _, set := range []string{clientSet4, clientSet6} {
		elems, lerr := t.Elements(ctx, set)
		if lerr != nil {
			return fmt.Errorf("revoke the tunnel packets of %d peer addresses in %s: %w (and list set %s: %v)", len(es), k.Path, err, set, lerr)
		}
		for _, el := range elems {
			if a, perr := netip.ParseAddr(el.Key[0]); perr == nil {
				present[a] = true
			}
		}
	}
	var left []peerEntry
	for _, e := range es {
		if present[e.ip] {
			left = append(left, e)
		}
	}
	if len(left) == 0 {
		return nil
	}
	for part := range slices.Chunk(left, nft.MaxApplyOps) {
		if err := t.ApplyElements(ctx, clientOps(part, true)); err != nil {
			return fmt.Errorf("revoke the tunnel packets of %d peer addresses in %s: %w", len(left), k.Path, err)
		}
	}
	return nil
}

// UnknownClientDrops is the number of tunnel packets the router refused
// since its Setup for coming from an address that is no peer's.
func (r *Router) UnknownClientDrops(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ready {
		return 0, fmt.Errorf("egress router of %s: not set up", r.cfg.Egress)
	}
	cs, err := r.nft.Counters(ctx)
	if err != nil {
		return 0, fmt.Errorf("egress router of %s in %s: %w", r.cfg.Egress, r.k.Path, err)
	}
	for _, c := range cs {
		if c.Name == unknownClientCounter {
			return c.Packets, nil
		}
	}
	return 0, fmt.Errorf("egress router of %s in %s: no counter %s in nftables table %s", r.cfg.Egress, r.k.Path, unknownClientCounter, constants.EgressNFTable)
}

func (k *kernel) linkIndex(name string) (int, error) {
	l, err := k.NL.LinkByName(name)
	if err != nil {
		return 0, fmt.Errorf("link %s in %s: %w", name, k.Path, err)
	}
	return l.Attrs().Index, nil
}

func (k *kernel) peerNeigh(e peerEntry, idx int) *netlink.Neigh {
	if e.kind == entryFDB {
		return &netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
			State: netlink.NUD_PERMANENT | netlink.NUD_NOARP, IP: e.ip.AsSlice(), HardwareAddr: e.mac}
	}
	return &netlink.Neigh{LinkIndex: idx, Family: familyOf(e.ip), State: netlink.NUD_PERMANENT, IP: e.ip.AsSlice(), HardwareAddr: e.mac}
}

func (k *kernel) peerRoute(e peerEntry, idx int) *netlink.Route {
	return &netlink.Route{LinkIndex: idx, Dst: ipNet(hostPrefix(e.ip)), Table: e.table, Scope: netlink.SCOPE_LINK, Family: familyOf(e.ip)}
}

func (k *kernel) addPeerEntry(e peerEntry, podIPs []netip.Addr) error {
	if e.kind == entryFoULink {
		local, _ := addrOf(podIPs, e.ip.Is4())
		la := netlink.NewLinkAttrs()
		la.Name = e.link
		var l netlink.Link
		if e.ip.Is4() {
			l = &netlink.Iptun{LinkAttrs: la, Local: local.AsSlice(), Remote: e.ip.AsSlice(), EncapType: tunnelEncapFoU,
				EncapDport: fouPort, EncapSport: fouPort, PMtuDisc: 1}
		} else {
			l = &netlink.Ip6tnl{LinkAttrs: la, Local: local.AsSlice(), Remote: e.ip.AsSlice(), Proto: unix.IPPROTO_IPV6,
				Flags: ip6TnlIgnEncapLimit, EncapType: tunnelEncapFoU, EncapDport: fouPort, EncapSport: fouPort}
		}
		// The MTU follows the fallback receiver of the family.
		fb := routerFoU4
		if e.ip.Is6() {
			fb = routerFoU6
		}
		if f, err := k.NL.LinkByName(fb); err == nil {
			la.MTU = f.Attrs().MTU
			l.Attrs().MTU = la.MTU
		}
		if old, err := k.NL.LinkByName(e.link); err == nil {
			_ = k.deleteLink(old)
		}
		_, err := k.addLink(l, routerAlias, rpOff)
		return err
	}
	idx, err := k.linkIndex(e.link)
	if err != nil {
		return err
	}
	switch e.kind {
	case entryFDB, entryNeigh:
		if err := k.NL.NeighSet(k.peerNeigh(e, idx)); err != nil {
			return fmt.Errorf("add %s %s lladdr %s on %s in %s: %w", strings.TrimPrefix(e.kind, "2-"), e.ip, e.mac, e.link, k.Path, err)
		}
	case entryRoute:
		if err := k.NL.RouteReplace(k.peerRoute(e, idx)); err != nil {
			return fmt.Errorf("add route %s dev %s table %d in %s: %w", e.ip, e.link, e.table, k.Path, err)
		}
	}
	return nil
}

func (k *kernel) deletePeerEntry(e peerEntry) error {
	l, err := k.NL.LinkByName(e.link)
	if ignoreGone(err) == nil && err != nil {
		return nil // its link is gone, and the entry with it
	}
	if err != nil {
		return fmt.Errorf("link %s in %s: %w", e.link, k.Path, err)
	}
	switch e.kind {
	case entryFoULink:
		return k.deleteLink(l)
	case entryFDB, entryNeigh:
		if err := ignoreGone(k.NL.NeighDel(k.peerNeigh(e, l.Attrs().Index))); err != nil {
			return fmt.Errorf("delete neighbour %s lladdr %s on %s in %s: %w", e.ip, e.mac, e.link, k.Path, err)
		}
	case entryRoute:
		if err := ignoreGone(k.NL.RouteDel(k.peerRoute(e, l.Attrs().Index))); err != nil {
			return fmt.Errorf("delete route %s dev %s table %d in %s: %w", e.ip, e.link, e.table, k.Path, err)
		}
	}
	return nil
}
