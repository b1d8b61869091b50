package egress

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"
)

// ClientEgress is one Egress as a client pod uses it.
type ClientEgress struct {
	Egress types.NamespacedName
	Kind   Kind
	// ServiceIPs are the Egress Service's ClusterIPs (one per family), the
	// remote ends of the pod's tunnels. VXLAN uses the first (IPv4 first)
	// for both inner families; FoU one tunnel per family.
	ServiceIPs   []netip.Addr
	Destinations []netip.Prefix
	// FoUSourcePortAuto picks the FoU source port per flow instead of the
	// FoU port; VXLAN always picks it per flow.
	FoUSourcePortAuto bool
}

// ClientConfig is the complete egress configuration of one client pod.
type ClientConfig struct {
	// PodIPs are the pod's addresses (IPv4 first when both).
	PodIPs []netip.Addr
	// Egresses are the complete set: ApplyClient removes vcoil's egress
	// objects that are not in it.
	Egresses []ClientEgress
	// Excluded are the cluster's networks (pod pools, service CIDRs, node
	// networks): never tunnelled, whatever the destinations say.
	Excluded []netip.Prefix
}

// Validate checks cfg and says what is wrong, naming the Egress: an error
// wraps ErrInvalidConfig.
func (cfg ClientConfig) Validate() error {
	_, err := planClient(cfg, 1500)
	return err
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// checkPodIPs accepts at most one address per family.
func checkPodIPs(ips []netip.Addr) error {
	if len(ips) == 0 {
		return invalid("no pod addresses")
	}
	var v4, v6 int
	for _, a := range ips {
		switch {
		case !a.IsValid() || a.Zone() != "" || a.Is4In6():
			return invalid("pod address %v is not a plain IPv4 or IPv6 address", a)
		case a.Is4():
			v4++
		default:
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		return invalid("pod addresses %v: at most one per family", ips)
	}
	return nil
}

// sortAddrs returns a copy of ips with IPv4 first.
func sortAddrs(ips []netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	slices.SortStableFunc(out, func(a, b netip.Addr) int {
		return cmp.Compare(a.BitLen(), b.BitLen())
	})
	return out
}

func addrOf(ips []netip.Addr, v4 bool) (netip.Addr, bool) {
	for _, a := range ips {
		if a.Is4() == v4 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// checkDestinations validates the destinations of one Egress and returns
// them masked and sorted.
func checkDestinations(who string, dests []netip.Prefix) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(dests))
	for _, d := range dests {
		if !d.IsValid() || d.Addr().Zone() != "" || d.Addr().Is4In6() {
			return nil, invalid("%s: destination %v is not a plain IPv4 or IPv6 prefix", who, d)
		}
		out = append(out, d.Masked())
	}
	slices.SortFunc(out, comparePrefixes)
	for i := 1; i < len(out); i++ {
		if out[i-1].Overlaps(out[i]) {
			return nil, invalid("%s: destinations %v and %v overlap", who, out[i-1], out[i])
		}
	}
	return out, nil
}

func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}
