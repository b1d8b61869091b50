package nftables

import (
	"strconv"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// elementLayout is the layout of the elements of the renderer's set or map
// name (nft.Layouts): how they are encoded over netlink, and read back.
func elementLayout(name string) (nft.Layout, bool) {
	addr, interval := nft.IPv4Addr, nft.IPv4Interval
	if strings.HasSuffix(name, "6") {
		addr, interval = nft.IPv6Addr, nft.IPv6Interval
	} else if !strings.HasSuffix(name, "4") {
		return nft.Layout{}, false
	}
	switch name {
	case selfSets[v4], selfSets[v6]:
		return nft.Layout{Key: []nft.Field{addr, addr}}, true
	case srcSets[v4], srcSets[v6]:
		return nft.Layout{Key: []nft.Field{interval}}, true
	case deniedSets[renderer.Ingress][v4], deniedSets[renderer.Ingress][v6], deniedSets[renderer.Egress][v4], deniedSets[renderer.Egress][v6]:
		return nft.Layout{Key: []nft.Field{addr}}, true
	}
	for _, names := range slotMaps {
		for _, n := range names {
			if n == name {
				return nft.Layout{Key: []nft.Field{addr}, Value: []nft.Field{nft.Verdict}}, true
			}
		}
	}
	g, suffix, ok := strings.Cut(name, "-")
	k, _, isGroup := parseGroupName(g)
	if !ok || !isGroup {
		return nft.Layout{}, false
	}
	if k != kindNetworkPolicy {
		// A tier group's sets are its runs': "<index><verdict>-".
		run, rest, ok := strings.Cut(suffix, "-")
		if !ok || len(run) < 2 || !strings.Contains(verdictLetters, run[len(run)-1:]) {
			return nft.Layout{}, false
		}
		if _, err := strconv.Atoi(run[:len(run)-1]); err != nil {
			return nft.Layout{}, false
		}
		suffix = rest
	}
	switch {
	case suffix == "hp4" || suffix == "hp6":
		return nft.Layout{Key: []nft.Field{addr, nft.Proto, nft.Port}}, true
	case suffix == "h4" || suffix == "h6":
		return nft.Layout{Key: []nft.Field{addr}}, true
	case suffix == "n4" || suffix == "n6" || strings.HasPrefix(suffix, "s"):
		return nft.Layout{Key: []nft.Field{interval}}, true
	}
	return nft.Layout{}, false
}

// layoutType is the type nft gives a set or map of layout l: its key's,
// then its value's.
func layoutType(l nft.Layout) string {
	names := func(fields []nft.Field) string {
		var parts []string
		for _, f := range fields {
			parts = append(parts, map[nft.Field]string{
				nft.IPv4Addr: "ipv4_addr", nft.IPv6Addr: "ipv6_addr", nft.IPv4Interval: "ipv4_addr", nft.IPv6Interval: "ipv6_addr",
				nft.Proto: "inet_proto", nft.Port: "inet_service", nft.Verdict: "verdict",
			}[f])
		}
		return strings.Join(parts, " . ")
	}
	return names(l.Key) + names(l.Value)
}

// isInterval is true for the layout of an interval set.
func isInterval(l nft.Layout) bool {
	last := l.Key[len(l.Key)-1]
	return last == nft.IPv4Interval || last == nft.IPv6Interval
}
