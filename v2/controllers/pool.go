package controllers

import (
	"fmt"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// parsePool turns an AddressPool's spec into ipam's model. The webhook keeps
// invalid specs out; this still fails cleanly when it was bypassed.
func parsePool(pool *vcoilv2.AddressPool) (ipam.Pool, error) {
	p, errs := parsePoolSpec(pool)
	if errs != nil {
		return ipam.Pool{}, fmt.Errorf("address pool %q is invalid: spec.%w", pool.Name, errs[0])
	}
	return p, nil
}

// parsePoolSpec validates a pool's spec with ipam, keeping every problem.
func parsePoolSpec(pool *vcoilv2.AddressPool) (ipam.Pool, []*ipam.FieldError) {
	specs := make([]ipam.SubnetSpec, len(pool.Spec.Subnets))
	for i, s := range pool.Spec.Subnets {
		specs[i] = ipam.SubnetSpec{IPv4: s.IPv4, IPv6: s.IPv6}
	}
	return ipam.ParsePool(int(pool.Spec.BlockSizeBits), specs)
}
