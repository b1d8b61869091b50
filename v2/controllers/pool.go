package controllers

import (
	"fmt"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
	"github.com/vcoil/vcoil/v2/pkg/lbipam"
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
	return ipam.ParsePool(int(pool.Spec.BlockSizeBits), subnetSpecs(pool))
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

// parseLoadBalancerSpec validates a LoadBalancer pool's subnets by
// lbipam's rules, keeping every problem.
func parseLoadBalancerSpec(pool *vcoilv2.AddressPool) ([]ipam.SubnetSet, []*ipam.FieldError) {
	return lbipam.ValidatePool(subnetSpecs(pool))
}

// subnetSpecs is the pool's subnet entries as ipam reads them.
func subnetSpecs(pool *vcoilv2.AddressPool) []ipam.SubnetSpec {
	specs := make([]ipam.SubnetSpec, len(pool.Spec.Subnets))
	for i, s := range pool.Spec.Subnets {
		specs[i] = ipam.SubnetSpec{IPv4: s.IPv4, IPv6: s.IPv6}
	}
	return specs
}

// usageOf is a pool's usage, Pods when the field is empty (an object stored
// before the field existed).
func usageOf(pool *vcoilv2.AddressPool) vcoilv2.PoolUsage {
	if pool.Spec.Usage == "" {
		return vcoilv2.UsagePods
	}
	return pool.Spec.Usage
}
