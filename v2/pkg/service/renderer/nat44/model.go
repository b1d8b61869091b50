package nat44

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// IP protocol numbers of the mappings. NAT44-ED translates ports of TCP and
// UDP only: any other protocol is looked up with port 0 (its "unknown
// protocol" path), so an SCTP port mapping would never match and SCTP ports
// are left out.
const (
	protoTCP uint8 = 6
	protoUDP uint8 = 17
)

func protoOf(p service.Protocol) (uint8, bool) {
	switch p {
	case service.TCP:
		return protoTCP, true
	case service.UDP:
		return protoUDP, true
	}
	return 0, false
}

// mappingKey is what NAT44-ED looks a static mapping up by (its "o2i" key,
// always in FIB 0): one frontend of one service port.
type mappingKey struct {
	Addr  netip.Addr
	Proto uint8
	Port  uint16
}

func (k mappingKey) String() string {
	p := strconv.Itoa(int(k.Proto))
	switch k.Proto {
	case protoTCP:
		p = "tcp"
	case protoUDP:
		p = "udp"
	}
	return p + "/" + netip.AddrPortFrom(k.Addr, k.Port).String()
}

func compareKeys(a, b mappingKey) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Proto, b.Proto); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// kind is the VPP object a frontend becomes.
type kind uint8

const (
	// kindLB: a load-balancing static mapping (two or more backends).
	kindLB kind = iota + 1
	// kindStatic: a plain static mapping (one backend).
	kindStatic
	// kindReject: a plain static mapping to vpp.RejectSinkIPv4: the
	// frontend has no endpoint in its family, refused by the node's kernel.
	kindReject
	// kindDrop: a plain static mapping to vpp.DropSinkIPv4: the frontend's
	// service has endpoints, but none for this traffic (a Local policy
	// without local endpoints), dropped as kube-proxy drops it.
	kindDrop
)

var kinds = []kind{kindLB, kindStatic, kindReject, kindDrop}

func (k kind) String() string {
	switch k {
	case kindLB:
		return "lb"
	case kindStatic:
		return "static"
	case kindReject:
		return "reject"
	case kindDrop:
		return "drop"
	}
	return "unknown"
}

// local is one backend of a mapping. Probability is 0 in plain static
// mappings (VPP has none there).
type local struct {
	Addr        netip.Addr
	Port        uint16
	Probability uint8
}

func (l local) key() netip.AddrPort { return netip.AddrPortFrom(l.Addr, l.Port) }

func compareLocals(a, b local) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// mapping is one static mapping as the renderer wants it or found it in
// VPP. Everything but Service is compared; Service names the service for
// errors and logs (a dumped mapping only has its tag).
type mapping struct {
	Kind kind
	// Locals are sorted by address and port; one for every kind but kindLB.
	Locals []local
	Flags  nat_types.NatConfigFlags
	// Affinity is the ClientIP affinity in seconds (LB mappings only).
	Affinity uint32
	Tag      string
	Service  service.ID
}

func (m *mapping) equal(o *mapping) bool {
	if m == nil || o == nil {
		return m == o
	}
	return m.Kind == o.Kind && m.Flags == o.Flags && m.Affinity == o.Affinity && m.Tag == o.Tag &&
		slices.Equal(m.Locals, o.Locals)
}

// name is how errors and logs call the mapping's owner: the service when
// known, else the tag.
func (m *mapping) name() string {
	if m.Service != (service.ID{}) {
		return m.Service.String()
	}
	return m.Tag
}

// The flags of mappings. Every mapping is OUT2IN_ONLY: it only DNATs
// traffic to its frontend; without it the backends' own connections would
// be source-NATed to the frontend, and the frontend would have to be in the
// NAT pool. VPP applies TWICE_NAT before SELF_TWICE_NAT (a twice-NATed
// session is source-NATed whoever the client is), and its
// nat44_add_del_lb_static_mapping handler drops SELF_TWICE_NAT when
// TWICE_NAT is set, so a mapping carries at most one of them: what VPP
// then dumps is what the renderer wants, and the diff stays empty.
const (
	// flagsSelf: cluster IPs and eTP=Local external frontends. The client
	// keeps its address, except a backend reaching itself, which is
	// source-NATed to the NAT loopback so that its reply comes back
	// through VPP.
	flagsSelf = nat_types.NAT_IS_OUT2IN_ONLY | nat_types.NAT_IS_SELF_TWICE_NAT
	// flagsTwice: eTP=Cluster external frontends. Every client is
	// source-NATed to the NAT loopback, so that a remote backend's reply
	// comes back through this node's VPP to be translated back.
	flagsTwice = nat_types.NAT_IS_OUT2IN_ONLY | nat_types.NAT_IS_TWICE_NAT
	// flagsSink: the reject and drop sinks. Not twice-NATed: the node's
	// kernel holds the NAT loopback (the source of its own service
	// traffic), so a packet from it would be dropped there as a martian.
	// The dataplane routes the kernel's answers from the reject sink back
	// into VPP (policy routing by that source), where they are translated
	// back; the node's own connections to a frontend without endpoints,
	// which come from the NAT loopback, time out instead of being refused.
	flagsSink = nat_types.NAT_IS_OUT2IN_ONLY
)

// Tags. Every mapping vcoil makes has a tag of kind tagPrefix; the
// renderer never touches a mapping without one. The tag names the service
// ("vcoil-svc@2 ns/name"), or, when that exceeds the 63 bytes VPP keeps,
// a hash of it ("vcoil-svc#@2 <32 hex digits of its SHA-256>"). An LB
// mapping's tag ends with " affinity=<seconds>" when it has ClientIP
// affinity: VPP 25.10 does not return the affinity in its dump
// (nat44_lb_static_mapping_details.affinity stays 0), and the renderer needs
// it to diff after a restart.
//
// "@2" is the tags' format (formatversion.VPPTag). Format 1 tags lack it; a
// mapping an earlier vcoild tagged so is read with its current tag
// (currentTag) and kept: VPP cannot re-tag a mapping, and making it again
// would cut its sessions. A newer format's tag stops the sync.
const (
	tagPrefix      = "vcoil-svc"
	tagMaxLen      = 63
	affinitySuffix = " affinity="
)

func mappingTag(id service.ID, affinity uint32) string {
	suffix := ""
	if affinity > 0 {
		suffix = affinitySuffix + strconv.FormatUint(uint64(affinity), 10)
	}
	tag := formatversion.Tag(tagPrefix, id.String()) + suffix
	if len(tag) <= tagMaxLen {
		return tag
	}
	sum := sha256.Sum256([]byte(id.String()))
	return formatversion.Tag(tagPrefix+"#", hex.EncodeToString(sum[:16])) + suffix
}

// isOurTag says whether a mapping with tag belongs to vcoil's services (of
// any format).
func isOurTag(tag string) bool {
	kind, _, _, ok := formatversion.ParseTag(tag)
	return ok && (kind == tagPrefix || kind == tagPrefix+"#")
}

// currentTag is the current format's spelling of one of the renderer's
// tags of this format or the previous one, so that a mapping an earlier
// vcoild made compares equal to the one wanted.
func currentTag(tag string) string {
	kind, v, rest, ok := formatversion.ParseTag(tag)
	if !ok || v != 1 {
		return tag
	}
	affinity := tagAffinity(tag)
	if i := strings.LastIndex(rest, affinitySuffix); i >= 0 {
		rest = rest[:i]
	}
	switch kind {
	case tagPrefix:
		if ns, name, ok := strings.Cut(rest, "/"); ok {
			return mappingTag(service.ID{Namespace: ns, Name: name}, affinity)
		}
	case tagPrefix + "#":
		suffix := ""
		if affinity > 0 {
			suffix = affinitySuffix + strconv.FormatUint(uint64(affinity), 10)
		}
		return formatversion.Tag(kind, rest) + suffix
	}
	return tag
}

// tagAffinity reads the affinity mappingTag put in tag (0 without).
func tagAffinity(tag string) uint32 {
	i := strings.LastIndex(tag, affinitySuffix)
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseUint(tag[i+len(affinitySuffix):], 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// rendered is one service's mappings.
type rendered struct {
	// mappings are few per service: a slice is cheaper than a map.
	mappings []entry
	// backends are the IPv4 addresses of the service's local endpoints:
	// the pods that must be NAT backends (inside).
	backends []netip.Addr
	// skippedSCTP counts SCTP frontends left out.
	skippedSCTP int
	// skippedIPv6 counts IPv6 frontends (address and port) left out:
	// NAT44-ED translates IPv4 only.
	skippedIPv6 int
	// leftOut counts endpoints left out of LB mappings whose probabilities
	// would not fit VPP's sum.
	leftOut int
	// nodePorts send the node's own clients of the service's node ports
	// to its IPv4 cluster IP (vpp.ServiceNetwork.NodePorts).
	nodePorts []vpp.NodePort
}

type entry struct {
	key mappingKey
	m   *mapping
}

// get returns the service's mapping at k (nil if none).
func (r *rendered) get(k mappingKey) *mapping {
	for i := range r.mappings {
		if r.mappings[i].key == k {
			return r.mappings[i].m
		}
	}
	return nil
}

// render is the renderer's version of Contiv's ServiceToDNAT: one service
// in, its static mappings out. Per IPv4 frontend of each TCP or UDP port:
// each cluster IP with the internal endpoints; each external IP and
// LoadBalancer IP, and the node port on each of this node's IPv4
// NodePortAddresses, with the external endpoints (node ports of other
// nodes are theirs: mappings would otherwise grow with the cluster's size).
//
// Unlike kube-proxy, NAT44 cannot tell a pod client from an outside client
// of an external frontend: an eTP=Local service sends everybody to its
// local endpoints (a pod on a node without one is dropped where kube-proxy
// would use the cluster-wide endpoints).
func render(node *service.Node, s *service.Service, localWeight uint8) *rendered {
	r := &rendered{}
	affinity := uint32(0)
	if s.AffinityTimeout > 0 {
		affinity = uint32(math.Ceil(s.AffinityTimeout.Seconds()))
	}
	t := tags{plain: mappingTag(s.ID, 0), lb: mappingTag(s.ID, affinity)}
	for i := range s.Ports {
		p := &s.Ports[i]
		proto, ok := protoOf(p.Protocol)
		if !ok {
			r.skippedSCTP++
			continue
		}
		for _, e := range p.Endpoints {
			if e.Local && e.Addr.Is4() {
				r.backends = append(r.backends, e.Addr)
			}
		}
		internal, external := s.InternalEndpoints(p), s.ExternalEndpoints(p)
		intLocals, left := locals4(internal, localWeight)
		extLocals, extLeft := intLocals, 0
		if len(external) != len(internal) || (len(external) > 0 && &external[0] != &internal[0]) {
			extLocals, extLeft = locals4(external, localWeight)
		}
		r.leftOut += left + extLeft
		has := p.HasEndpointsFor(netip.IPv4Unspecified())
		put := func(a netip.Addr, port uint16, ls []local, flags nat_types.NatConfigFlags) {
			if !a.Is4() {
				r.skippedIPv6++
				return
			}
			k := mappingKey{a, proto, port}
			if r.get(k) != nil {
				return
			}
			r.mappings = append(r.mappings, entry{k, frontendMapping(s.ID, k, ls, has, flags, affinity, t)})
		}
		extFlags := flagsTwice
		if s.ExternalLocal {
			extFlags = flagsSelf
		}
		for _, a := range s.ClusterIPs {
			put(a, p.Port, intLocals, flagsSelf)
		}
		for _, a := range s.ExternalIPs {
			put(a, p.Port, extLocals, extFlags)
		}
		for _, a := range s.LoadBalancerIPs {
			put(a, p.Port, extLocals, extFlags)
		}
		if p.NodePort != 0 {
			for _, a := range node.NodePortAddresses {
				put(a, p.NodePort, extLocals, extFlags)
			}
			if i := slices.IndexFunc(s.ClusterIPs, netip.Addr.Is4); i >= 0 {
				r.nodePorts = append(r.nodePorts, vpp.NodePort{Protocol: proto, Port: p.NodePort, ClusterIP: s.ClusterIPs[i], ClusterPort: p.Port})
			}
		}
	}
	slices.SortFunc(r.backends, netip.Addr.Compare)
	r.backends = slices.Compact(r.backends)
	return r
}

// tags are a service's tags without and with its affinity.
type tags struct{ plain, lb string }

// locals4 are the IPv4 endpoints of eps as locals of an LB mapping,
// sorted, each once, with their probabilities (see probabilities); the
// second result counts the endpoints left out.
func locals4(eps []service.Endpoint, localWeight uint8) ([]local, int) {
	n := 0
	for i := range eps {
		if eps[i].Addr.Is4() {
			n++
		}
	}
	if n == 0 {
		return nil, 0
	}
	ls := make([]local, 0, n)
	for i := range eps {
		e := &eps[i]
		if !e.Addr.Is4() {
			continue
		}
		w := uint8(1)
		if e.Local {
			w = localWeight
		}
		ls = append(ls, local{Addr: e.Addr, Port: e.Port, Probability: w})
	}
	if !slices.IsSortedFunc(ls, compareLocals) {
		slices.SortFunc(ls, compareLocals)
	}
	// An endpoint listed twice (two slices) is one local; VPP refuses
	// duplicates.
	ls = slices.CompactFunc(ls, func(x, y local) bool { return x.key() == y.key() })
	return probabilities(ls)
}

// maxProbabilitySum is the largest sum of a mapping's probabilities: VPP
// keeps the running sum in a u8 (nat44_lb_addr_port_t.prefix). A larger
// sum wraps: 255+255 became 254 and every connection went to the first
// local; a multiple of 256 became 0 and VPP died of a division by zero at
// the first connection (both seen on VPP 25.10).
const maxProbabilitySum = 255

// probabilities turns the weights in ls (1 for remote backends,
// localWeight for local ones) into VPP's probabilities: twice the weights
// while their sum stays within maxProbabilitySum, else the weights, else
// the weights of the first locals that fit (the others are left out and
// counted).
//
// Even probabilities, because VPP picks the local whose cumulative range
// holds "1 + random % sum", random from an LCG whose low bit alternates,
// and a twice-NATed connection draws once more (for its port): every draw
// of such connections has the same parity, and with probabilities of 1
// every twice-NATed connection went to the same half of the locals (seen on
// VPP 25.10). A local with an even probability holds as many odd as even
// values. The factor depends on the sum only, so that backends coming and
// going change the others' probabilities (which VPP cannot change in place)
// only when the sum crosses the limit.
func probabilities(ls []local) ([]local, int) {
	sum := 0
	for _, l := range ls {
		sum += int(l.Probability)
	}
	switch {
	case 2*sum <= maxProbabilitySum:
		for i := range ls {
			ls[i].Probability *= 2
		}
		return ls, 0
	case sum <= maxProbabilitySum:
		return ls, 0
	}
	kept, sum := ls[:0], 0
	for _, l := range ls {
		if sum+int(l.Probability) <= maxProbabilitySum {
			kept = append(kept, l)
			sum += int(l.Probability)
		}
	}
	return kept, len(ls) - len(kept)
}

// frontendMapping is the mapping of the frontend k whose traffic goes to
// the locals ls (IPv4). has says whether the port has IPv4 endpoints
// anywhere. A sink keeps the frontend's port.
func frontendMapping(id service.ID, k mappingKey, ls []local, has bool, flags nat_types.NatConfigFlags, affinity uint32, t tags) *mapping {
	switch len(ls) {
	case 0:
		// No endpoint at all in the family: refused. Endpoints exist, but
		// none for this traffic: dropped.
		m := &mapping{Kind: kindReject, Flags: flagsSink, Service: id, Tag: t.plain}
		sink := vpp.RejectSinkIPv4
		if has {
			m.Kind, sink = kindDrop, vpp.DropSinkIPv4
		}
		m.Locals = []local{{Addr: sink, Port: k.Port}}
		return m
	case 1:
		return &mapping{Kind: kindStatic, Flags: flags, Service: id, Tag: t.plain,
			Locals: []local{{Addr: ls[0].Addr, Port: ls[0].Port}}}
	}
	return &mapping{Kind: kindLB, Flags: flags, Affinity: affinity, Service: id, Tag: t.lb, Locals: ls}
}
