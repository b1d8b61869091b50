package cnicontract

import (
	"fmt"
	"net"

	"github.com/containernetworking/cni/pkg/types"
	types040 "github.com/containernetworking/cni/pkg/types/040"
	types100 "github.com/containernetworking/cni/pkg/types/100"
)

// CheckResult refuses what the spec does not allow in a result and the
// library accepts anyway: null entries, IPs and routes without an address,
// and IPs that point at an interface the result does not list. The
// library's version conversions assume well-formed results and panic on a
// null entry; a result without an address is written back as "<nil>" and
// cannot be read again. A nil result (no prevResult) passes.
func CheckResult(r types.Result) error {
	switch r := r.(type) {
	case nil:
		return nil
	case *types100.Result:
		for i, intf := range r.Interfaces {
			if intf == nil {
				return fmt.Errorf("interfaces[%d] is null", i)
			}
		}
		for i, ip := range r.IPs {
			if ip == nil {
				return fmt.Errorf("ips[%d] is null", i)
			}
			if err := checkIP(i, ip.Address, ip.Interface, len(r.Interfaces)); err != nil {
				return err
			}
		}
		return checkRoutes(r.Routes)
	case *types040.Result:
		for i, intf := range r.Interfaces {
			if intf == nil {
				return fmt.Errorf("interfaces[%d] is null", i)
			}
		}
		for i, ip := range r.IPs {
			if ip == nil {
				return fmt.Errorf("ips[%d] is null", i)
			}
			if err := checkIP(i, ip.Address, ip.Interface, len(r.Interfaces)); err != nil {
				return err
			}
		}
		return checkRoutes(r.Routes)
	}
	return fmt.Errorf("result of type %T", r)
}

func checkIP(i int, address net.IPNet, intf *int, interfaces int) error {
	if address.IP == nil || address.Mask == nil {
		return fmt.Errorf("ips[%d].address is missing", i)
	}
	if intf != nil && (*intf < 0 || *intf >= interfaces) {
		return fmt.Errorf("ips[%d].interface %d: no such interface", i, *intf)
	}
	return nil
}

func checkRoutes(routes []*types.Route) error {
	for i, rt := range routes {
		if rt == nil {
			return fmt.Errorf("routes[%d] is null", i)
		}
		if rt.Dst.IP == nil || rt.Dst.Mask == nil {
			return fmt.Errorf("routes[%d].dst is missing", i)
		}
	}
	return nil
}
