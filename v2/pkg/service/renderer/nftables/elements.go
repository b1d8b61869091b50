package nftables

import "github.com/vcoil/vcoil/v2/pkg/nft"

// The layouts of the table's sets and maps, by which package nft encodes
// and decodes their elements over netlink; a set of another name is not
// read.

var (
	frontendFields = map[string][]nft.Field{
		"4": {nft.IPv4Addr, nft.Proto, nft.Port},
		"6": {nft.IPv6Addr, nft.Proto, nft.Port},
	}
	endpointFields = map[string][]nft.Field{
		"4": {nft.IPv4Addr, nft.Port},
		"6": {nft.IPv6Addr, nft.Port},
	}
	addrField     = map[string]nft.Field{"4": nft.IPv4Addr, "6": nft.IPv6Addr}
	intervalField = map[string]nft.Field{"4": nft.IPv4Interval, "6": nft.IPv6Interval}
	verdictFields = []nft.Field{nft.Verdict}
)

// layoutOf is the layout of the set or map name, false for a name the
// renderer does not declare (an nft.Layouts).
func layoutOf(name string) (nft.Layout, bool) {
	if isAffinityMap(name) {
		fam := name[len(mapAffinityPrefix) : len(mapAffinityPrefix)+1]
		key := append([]nft.Field{addrField[fam]}, frontendFields[fam]...)
		return nft.Layout{Key: key, Value: endpointFields[fam]}, true
	}
	set, fam, _, ok := parseSetName(name)
	if !ok {
		return nft.Layout{}, false
	}
	frontend := frontendFields[fam]
	switch set {
	case setServices, setExternalLocal, setAffinityFrontends:
		return nft.Layout{Key: frontend, Value: verdictFields}, true
	case setBackends, setBackendsLocal:
		return nft.Layout{Key: frontend, Value: endpointFields[fam]}, true
	case setNoEndpoints, setFirewall:
		return nft.Layout{Key: frontend}, true
	case setFirewallAllow:
		return nft.Layout{Key: append(frontend[:3:3], intervalField[fam])}, true
	case setHairpin:
		return nft.Layout{Key: []nft.Field{addrField[fam], addrField[fam]}}, true
	}
	return nft.Layout{}, false
}
