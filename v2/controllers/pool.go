package controllers

import (
	"fmt"
	"net/netip"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// parsePool turns a Pods pool's spec into ipam's model. The webhook keeps
// invalid specs out; this still fails cleanly when it was bypassed.
// LoadBalancer pools are not carved into blocks and never come here.
func parsePool(pool *vcoilv2.AddressPool) (ipam.Pool, error) {
	p, errs := parsePoolSpec(pool)
	if errs != nil {
		return ipam.Pool{}, fmt.Errorf("address pool %q is invalid: spec.%w", pool.Name, errs[0])
	}
	return p, nil
}

// parsePoolSpec validates a Pods pool's spec with ipam, keeping every problem.
func parsePoolSpec(pool *vcoilv2.AddressPool) (ipam.Pool, []*ipam.FieldError) {
	specs := make([]ipam.SubnetSpec, len(pool.Spec.Subnets))
	for i, s := range pool.Spec.Subnets {
		specs[i] = ipam.SubnetSpec{IPv4: s.IPv4, IPv6: s.IPv6}
	}
	return ipam.ParsePool(int(pool.Spec.BlockSizeBits), specs)
}

// poolSubnets validates a pool's spec by the rules of its usage and returns
// its subnets, which is all the overlap check across pools needs.
func poolSubnets(pool *vcoilv2.AddressPool) ([]ipam.SubnetSet, []*ipam.FieldError) {
	if pool.Spec.IsLoadBalancer() {
		return parseLoadBalancerSpec(pool)
	}
	p, errs := parsePoolSpec(pool)
	return p.Subnets, errs
}

// parseLoadBalancerSpec validates a LoadBalancer pool's subnets. Its
// addresses are given one at a time and per family, so the rules that make
// blocks fit and pair up (blockSizeBits, equal host bits in a dual-stack
// entry, the same families in every entry, the block count) do not apply:
// each entry needs a subnet, every subnet must parse in canonical form, and
// no two may overlap.
func parseLoadBalancerSpec(pool *vcoilv2.AddressPool) ([]ipam.SubnetSet, []*ipam.FieldError) {
	var errs []*ipam.FieldError
	fail := func(field, format string, args ...any) {
		errs = append(errs, &ipam.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(pool.Spec.Subnets) == 0 {
		fail("subnets", "at least one subnet is required")
	}
	sets := make([]ipam.SubnetSet, 0, len(pool.Spec.Subnets))
	for i, s := range pool.Spec.Subnets {
		field := fmt.Sprintf("subnets[%d]", i)
		if s.IPv4 == nil && s.IPv6 == nil {
			fail(field, "needs ipv4, ipv6 or both")
			continue
		}
		var set ipam.SubnetSet
		ok := true
		parse := func(family string, text *string, ipv6 bool) netip.Prefix {
			if text == nil {
				return netip.Prefix{}
			}
			p, err := ipam.ParsePrefix(*text, ipv6)
			if err != nil {
				fail(field+"."+family, "%v", err)
				ok = false
			}
			return p
		}
		set.IPv4 = parse("ipv4", s.IPv4, false)
		set.IPv6 = parse("ipv6", s.IPv6, true)
		if !ok {
			continue
		}
		for j, other := range sets {
			if set.IPv4.IsValid() && other.IPv4.IsValid() && set.IPv4.Overlaps(other.IPv4) {
				fail(field+".ipv4", "overlaps ipv4 of subnets[%d] (%s)", j, other.IPv4)
			}
			if set.IPv6.IsValid() && other.IPv6.IsValid() && set.IPv6.Overlaps(other.IPv6) {
				fail(field+".ipv6", "overlaps ipv6 of subnets[%d] (%s)", j, other.IPv6)
			}
		}
		sets = append(sets, set)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return sets, nil
}

// usageOf is a pool's usage, Pods when the field is empty (an object stored
// before the field existed).
func usageOf(pool *vcoilv2.AddressPool) vcoilv2.PoolUsage {
	if pool.Spec.Usage == "" {
		return vcoilv2.UsagePods
	}
	return pool.Spec.Usage
}
