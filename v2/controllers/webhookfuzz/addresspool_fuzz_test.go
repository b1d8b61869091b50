// Package webhookfuzz fuzzes the AddressPool and Egress webhooks of package
// controllers through their exported Default and Validate methods. It is a
// package of its own because the controllers package's tests start a
// kube-apiserver in TestMain, which every fuzz worker process would run.
package webhookfuzz

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/controllers"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
	"github.com/vcoil/vcoil/v2/pkg/lbipam"
)

// storedPools is the webhook's view of the pools already in the cluster: a
// Pods pool, a LoadBalancer pool, and one stored before the webhook ran
// that does not parse (never an overlap).
var storedPools = []vcoilv2.AddressPool{
	{ObjectMeta: metav1.ObjectMeta{Name: "existing"}, Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsagePods, BlockSizeBits: 5,
		Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.90.0.0/16"), IPv6: ptr.To("fd00:90::/112")}}}},
	{ObjectMeta: metav1.ObjectMeta{Name: "lb"}, Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsageLoadBalancer, BlockSizeBits: 5,
		Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("198.51.100.0/26"), IPv6: ptr.To("fd00:51::/120")}}}},
	{ObjectMeta: metav1.ObjectMeta{Name: "broken"}, Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsagePods, BlockSizeBits: 5,
		Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("not a subnet")}}}},
}

// poolLister answers the webhook's List of AddressPools with storedPools.
type poolLister struct{}

func (poolLister) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return errors.New("the AddressPool webhook reads no single object")
}

func (poolLister) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	l, ok := list.(*vcoilv2.AddressPoolList)
	if !ok {
		return fmt.Errorf("list of %T: only AddressPools", list)
	}
	l.Items = nil
	for i := range storedPools {
		l.Items = append(l.Items, *storedPools[i].DeepCopy())
	}
	return nil
}

// Which fields of the fuzzed pool are set (the bits of present).
const (
	aIPv4 = 1 << iota
	aIPv6
	bIPv4
	bIPv6
	withB      // a second subnet entry
	noSubnets  // spec.subnets absent
	emptyUsage // usage unset, as in an object stored before the field
)

// FuzzAddressPoolWebhook builds AddressPools from fuzzed fields (name,
// usage, blockSizeBits, two subnet entries of up to two families) and runs
// them through the webhook as the apiserver does: Default, then
// ValidateCreate, against storedPools. Neither may panic. A refusal is an
// Invalid error naming spec fields. A pool it accepts is usable: a Pods
// pool by ipam (its first and last blocks parse back from their text, and
// give an address, as node subnets for the pool named default), a
// LoadBalancer pool by lbipam (an address of each of its families); its
// subnets overlap neither each other nor a stored pool, and a pool whose
// subnets do is refused. Defaulting never changes the verdict and is
// idempotent, and an update that keeps the spec always passes.
func FuzzAddressPoolWebhook(f *testing.F) {
	type seed struct {
		name, usage        string
		bits               int32
		present            uint8
		v4a, v6a, v4b, v6b string
	}
	for _, s := range []seed{
		// Accepted pools, single and dual-stack, Pods and LoadBalancer.
		{"p", "Pods", 5, aIPv4 | aIPv6, "10.2.0.0/16", "fd01:203:405:607::/112", "", ""},
		{"default", "", 2, aIPv4, "10.64.0.0/24", "", "", ""},
		{"default", "Pods", 2, aIPv6, "", "fd00:10:64::/120", "", ""},
		{"free", "LoadBalancer", 5, aIPv4 | bIPv6 | withB, "203.0.113.7/32", "", "", "fd00:53::/64"},
		{"free", "LoadBalancer", 0, aIPv4 | aIPv6, "203.0.113.16/28", "fd00:54::/120", "", ""},
		{"p", "Pods", 0, aIPv4, "203.0.113.9/32", "", "", ""},
		{"p", "Pods", 16, aIPv6, "", "fd00:1::/112", "", ""},
		// TestWebhookRejectsInvalidPoolsNamingTheField.
		{"a", "Pods", 5, aIPv4, "10.0.0.0/33", "", "", ""},
		{"a", "Pods", 5, aIPv4, "fd00::/112", "", "", ""},
		{"a", "Pods", 5, aIPv6, "", "10.0.0.0/16", "", ""},
		{"a", "Pods", 5, aIPv4, "10.1.0.1/16", "", "", ""},
		{"a", "Pods", 5, 0, "", "", "", ""},
		{"a", "Pods", 5, aIPv4, "10.1.0.0/28", "", "", ""},
		{"a", "Pods", 5, aIPv4 | aIPv6, "10.1.0.0/16", "fd00:1::/64", "", ""},
		{"a", "Pods", 5, aIPv4 | bIPv6 | withB, "10.1.0.0/16", "", "", "fd00:1::/112"},
		{"a", "Pods", 5, aIPv4 | bIPv4 | withB, "10.1.0.0/16", "", "10.1.4.0/24", ""},
		{"a", "Pods", 5, aIPv4, "10.90.128.0/20", "", "", ""},
		{"a", "Pods", 5, aIPv6, "", "fd00:90::/120", "", ""},
		{"default", "Pods", 1, aIPv4, "10.1.0.0/16", "", "", ""},
		{"a", "Pods", 0, aIPv6, "", "fd00:1::/48", "", ""},
		{"a", "Pods", 17, aIPv4, "10.0.0.0/8", "", "", ""},
		{"a", "Pods", 5, noSubnets, "", "", "", ""},
		// TestWebhookKeepsLoadBalancerAndPodPoolsApart.
		{"a", "LoadBalancer", 5, aIPv4, "10.90.1.0/24", "", "", ""},
		{"a", "Pods", 2, aIPv4, "198.51.100.32/27", "", "", ""},
		{"a", "Pods", 2, aIPv6, "", "fd00:51::/124", "", ""},
		{"a", "LoadBalancer", 5, aIPv4, "198.51.100.63/32", "", "", ""},
		{"default", "LoadBalancer", 5, aIPv4, "203.0.113.0/28", "", "", ""},
		{"a", "LoadBalancer", 5, aIPv4, "203.0.113.1/28", "", "", ""},
		{"a", "LoadBalancer", 5, aIPv6 | bIPv4 | bIPv6 | withB, "", "fd00:52::/120", "203.0.113.0/28", "fd00:52::80/121"},
		{"a", "LoadBalancer", 5, 0, "", "", "", ""},
		{"a", "Nodes", 5, aIPv4, "203.0.113.0/28", "", "", ""},
		// Canonical text: another spelling of the same subnet, an old pool
		// without usage, the same pool as the stored one.
		{"p", "", 5, aIPv4 | aIPv6, "10.92.0.0/16", "FD00:0092:0000::/112", "", ""},
		{"existing", "Pods", 5, aIPv4 | aIPv6, "10.90.0.0/16", "fd00:90::/112", "", ""},
		// Empty strings, spaces, zones, mapped and embedded IPv4, huge and
		// negative sizes, names with spaces and slashes.
		{"a", "Pods", 5, aIPv4 | aIPv6, "", "", "", ""},
		{"a b", "Pods", 5, aIPv4, " 10.1.0.0/16", "", "", ""},
		{"a/b", "Pods", 5, aIPv6, "", "fe80::%eth0/64", "", ""},
		{"a", "Pods", 5, aIPv6, "", "::ffff:10.1.0.0/112", "", ""},
		{"a", "Pods", 5, aIPv6, "", "::10.1.0.0/112", "", ""},
		{"a", "Pods", 5, aIPv4, "10.1.0.0/016", "", "", ""},
		{"a", "Pods", -1, aIPv4, "10.1.0.0/16", "", "", ""},
		{"a", "Pods", 2147483647, aIPv4, "10.1.0.0/16", "", "", ""},
		{"a", "Pods", -2147483648, aIPv4, "0.0.0.0/0", "", "", ""},
		{"a", "LoadBalancer", 5, aIPv4 | aIPv6, "0.0.0.0/0", "::/0", "", ""},
		{"", "", 0, aIPv6, "", "::/0", "", ""},
	} {
		f.Add(s.name, s.usage, s.bits, s.present, s.v4a, s.v6a, s.v4b, s.v6b)
	}

	w := &controllers.AddressPoolWebhook{Client: poolLister{}}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, name, usage string, bits int32, present uint8, v4a, v6a, v4b, v6b string) {
		pool := &vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.PoolUsage(usage), BlockSizeBits: bits}}
		if present&emptyUsage != 0 {
			pool.Spec.Usage = ""
		}
		if present&noSubnets == 0 {
			pool.Spec.Subnets = []vcoilv2.SubnetSet{subnetSet(present&aIPv4 != 0, v4a, present&aIPv6 != 0, v6a)}
			if present&withB != 0 {
				pool.Spec.Subnets = append(pool.Spec.Subnets, subnetSet(present&bIPv4 != 0, v4b, present&bIPv6 != 0, v6b))
			}
		}

		_, rawErr := w.ValidateCreate(ctx, pool.DeepCopy())
		defaulted := pool.DeepCopy()
		if err := w.Default(ctx, defaulted); err != nil {
			t.Fatalf("Default: %v", err)
		}
		twice := defaulted.DeepCopy()
		if err := w.Default(ctx, twice); err != nil || !reflect.DeepEqual(twice, defaulted) {
			t.Fatalf("Default is not idempotent (%v):\n%+v\n%+v", err, defaulted.Spec, twice.Spec)
		}
		if defaulted.Spec.Usage == "" {
			t.Fatal("Default left the usage empty")
		}
		_, err := w.ValidateCreate(ctx, defaulted)
		if (rawErr == nil) != (err == nil) {
			t.Fatalf("Default changed the verdict: %v before, %v after\n%+v\n%+v", rawErr, err, pool.Spec, defaulted.Spec)
		}
		if _, uerr := w.ValidateUpdate(ctx, defaulted.DeepCopy(), defaulted); uerr != nil {
			t.Fatalf("an update that keeps the spec was refused: %v", uerr)
		}

		mustRefuse := poolMustBeRefused(defaulted)
		if err != nil {
			checkInvalid(t, err, "spec")
			return
		}
		if mustRefuse != "" {
			t.Fatalf("accepted a pool that %s: %+v", mustRefuse, spec(defaulted))
		}
		checkUsable(t, defaulted)
	})
}

func subnetSet(has4 bool, v4 string, has6 bool, v6 string) vcoilv2.SubnetSet {
	var s vcoilv2.SubnetSet
	if has4 {
		s.IPv4 = ptr.To(v4)
	}
	if has6 {
		s.IPv6 = ptr.To(v6)
	}
	return s
}

func subnetText(s vcoilv2.SubnetSet) string {
	return fmt.Sprintf("{ipv4 %q ipv6 %q}", ptr.Deref(s.IPv4, "<none>"), ptr.Deref(s.IPv6, "<none>"))
}

// spec prints a pool's spec with its subnets' text.
func spec(p *vcoilv2.AddressPool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name %q usage %q blockSizeBits %d subnets", p.Name, p.Spec.Usage, p.Spec.BlockSizeBits)
	for _, s := range p.Spec.Subnets {
		b.WriteString(" " + subnetText(s))
	}
	return b.String()
}

// subnetOf parses a subnet by the API's rules, on its own: exactly the
// text of a network of the field's family in CIDR notation.
func subnetOf(text *string, ipv6 bool) (netip.Prefix, bool) {
	if text == nil {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(*text)
	if err != nil || p.Addr().Is4In6() || p.Addr().Is6() != ipv6 || p != p.Masked() {
		return netip.Prefix{}, false
	}
	return p, true
}

// poolMustBeRefused says why the webhook must refuse p, or "" when it need
// not: rules checked here apart from the webhook's code.
func poolMustBeRefused(p *vcoilv2.AddressPool) string {
	if len(p.Spec.Subnets) == 0 {
		return "has no subnets"
	}
	var mine []netip.Prefix
	for i, s := range p.Spec.Subnets {
		if s.IPv4 == nil && s.IPv6 == nil {
			return fmt.Sprintf("has an empty subnets[%d]", i)
		}
		for _, f := range []struct {
			text *string
			v6   bool
		}{{s.IPv4, false}, {s.IPv6, true}} {
			if f.text == nil {
				continue
			}
			pfx, ok := subnetOf(f.text, f.v6)
			if !ok {
				return fmt.Sprintf("has subnets[%d] %q, not a subnet of its family", i, *f.text)
			}
			for _, o := range mine {
				if o.Overlaps(pfx) {
					return fmt.Sprintf("has overlapping subnets %s and %s", o, pfx)
				}
			}
			mine = append(mine, pfx)
		}
	}
	for _, o := range storedPools {
		if o.Name == p.Name {
			continue
		}
		for _, s := range o.Spec.Subnets {
			q4, ok4 := subnetOf(s.IPv4, false)
			q6, ok6 := subnetOf(s.IPv6, true)
			for _, m := range mine {
				if (ok4 && m.Overlaps(q4)) || (ok6 && m.Overlaps(q6)) {
					return fmt.Sprintf("overlaps %s of the stored pool %s", subnetText(s), o.Name)
				}
			}
		}
	}
	if p.Name == vcoilv2.DefaultPool && (p.Spec.IsLoadBalancer() || p.Spec.BlockSizeBits < ipam.MinNodeSubnetBits) {
		return "is named default but cannot give node subnets"
	}
	if !p.Spec.IsLoadBalancer() && (p.Spec.BlockSizeBits < 0 || p.Spec.BlockSizeBits > ipam.MaxBlockSizeBits) {
		return "has blocks of an impossible size"
	}
	return ""
}

// checkInvalid checks that err is an Invalid error whose every cause names
// a field under one of prefixes.
func checkInvalid(t *testing.T, err error, prefixes ...string) {
	t.Helper()
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) {
		t.Fatalf("refusal %v is not Invalid", err)
	}
	causes := status.Status().Details.Causes
	if len(causes) == 0 {
		t.Fatalf("refusal %v has no causes", err)
	}
	for _, c := range causes {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(c.Field, p) }) || c.Message == "" {
			t.Fatalf("refusal %v: cause %+v does not name a field under %q", err, c, prefixes)
		}
	}
}

// checkUsable checks that an accepted pool works in the code that gives its
// addresses.
func checkUsable(t *testing.T, p *vcoilv2.AddressPool) {
	t.Helper()
	specs := make([]ipam.SubnetSpec, len(p.Spec.Subnets))
	var subnets []netip.Prefix
	for i, s := range p.Spec.Subnets {
		specs[i] = ipam.SubnetSpec{IPv4: s.IPv4, IPv6: s.IPv6}
		if pfx, ok := subnetOf(s.IPv4, false); ok {
			subnets = append(subnets, pfx)
		}
		if pfx, ok := subnetOf(s.IPv6, true); ok {
			subnets = append(subnets, pfx)
		}
	}
	inPool := func(a netip.Addr) bool {
		for _, s := range subnets {
			if s.Contains(a) {
				return true
			}
		}
		return false
	}

	if p.Spec.IsLoadBalancer() {
		lb, err := lbipam.ParsePool(specs)
		if err != nil {
			t.Fatalf("accepted LoadBalancer pool does not parse: %v (%s)", err, spec(p))
		}
		if lb.Size() < 1 {
			t.Fatalf("accepted LoadBalancer pool gives no address (%s)", spec(p))
		}
		for _, fam := range []lbipam.Family{lbipam.IPv4, lbipam.IPv6} {
			if !lb.Has(fam) {
				continue
			}
			a, err := lb.FirstFree(fam, nil)
			if err != nil || !inPool(a) || !lb.Contains(a) {
				t.Fatalf("accepted LoadBalancer pool gives %s %v (%v) (%s)", fam, a, err, spec(p))
			}
		}
		return
	}

	pool, errs := ipam.ParsePool(int(p.Spec.BlockSizeBits), specs)
	if errs != nil {
		t.Fatalf("accepted pool does not parse: %v (%s)", errs, spec(p))
	}
	n := pool.NumBlocks()
	if n < 1 || n > ipam.MaxBlocks {
		t.Fatalf("accepted pool has %d blocks (%s)", n, spec(p))
	}
	nodeSubnet := p.Name == vcoilv2.DefaultPool
	for _, idx := range []int64{0, n - 1} {
		b, err := pool.Block(idx)
		if err != nil {
			t.Fatalf("block %d of %d: %v (%s)", idx, n, err, spec(p))
		}
		// An AddressBlock holds the block as text, which vcoild parses.
		var v4, v6 string
		if b.IPv4.IsValid() {
			v4 = b.IPv4.String()
		}
		if b.IPv6.IsValid() {
			v6 = b.IPv6.String()
		}
		back, err := ipam.ParseBlock(v4, v6)
		if err != nil || back != b || b.SizeBits() != int(p.Spec.BlockSizeBits) {
			t.Fatalf("block %d (%s) reads back as %s (%v) (%s)", idx, b, back, err, spec(p))
		}
		alloc := ipam.NewNodeAllocator()
		if err := alloc.AddBlock(p.Name, "b", idx, b, nodeSubnet); err != nil {
			t.Fatalf("block %d (%s), node subnet %v: %v (%s)", idx, b, nodeSubnet, err, spec(p))
		}
		got, err := alloc.Allocate(p.Name)
		if err != nil {
			t.Fatalf("block %d (%s), node subnet %v, gives no address: %v (%s)", idx, b, nodeSubnet, err, spec(p))
		}
		for _, a := range []netip.Addr{got.IPv4, got.IPv6} {
			if a.IsValid() && (!inPool(a) || !(b.IPv4.Contains(a) || b.IPv6.Contains(a))) {
				t.Fatalf("block %d (%s) gave %s, outside it or the pool (%s)", idx, b, a, spec(p))
			}
		}
		if got.IPv4.IsValid() != b.IPv4.IsValid() || got.IPv6.IsValid() != b.IPv6.IsValid() {
			t.Fatalf("block %d (%s) gave %+v, not one address of each of its families (%s)", idx, b, got, spec(p))
		}
	}
}
