package controllers

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// These tests go through the apiserver, which calls the webhooks served by
// the package's webhook manager: what a user of kubectl would see.

func poolObject(name string, bits int32, subnets ...vcoilv2.SubnetSet) *vcoilv2.AddressPool {
	return &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: bits, Subnets: subnets},
	}
}

func v6(cidr string) vcoilv2.SubnetSet { return vcoilv2.SubnetSet{IPv6: ptr.To(cidr)} }

// wantInvalid checks that err is an Invalid error whose message names field
// and contains reason.
func wantInvalid(t *testing.T, err error, field, reason string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted; want a rejection of %s", field)
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error %v is not Invalid", err)
	}
	if !strings.Contains(err.Error(), field+":") || !strings.Contains(err.Error(), reason) {
		t.Fatalf("error %q does not name %s with %q", err, field, reason)
	}
}

func TestWebhookRejectsInvalidPoolsNamingTheField(t *testing.T) {
	cleanAPIServer(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, poolObject("existing", 5, dual("10.90.0.0/16", "fd00:90::/112"))); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		pool   *vcoilv2.AddressPool
		field  string
		reason string
	}{
		{"a CIDR that does not parse", poolObject("a", 5, v4("10.0.0.0/33")), "spec.subnets[0].ipv4", "is not an IPv4 subnet in CIDR notation"},
		{"an IPv6 subnet in the ipv4 field", poolObject("a", 5, v4("fd00::/112")), "spec.subnets[0].ipv4", "is not an IPv4 subnet"},
		{"an IPv4 subnet in the ipv6 field", poolObject("a", 5, v6("10.0.0.0/16")), "spec.subnets[0].ipv6", "is not an IPv6 subnet"},
		{"host bits set", poolObject("a", 5, v4("10.1.0.1/16")), "spec.subnets[0].ipv4", "has host bits set; the subnet is 10.1.0.0/16"},
		{"an entry without any subnet", poolObject("a", 5, vcoilv2.SubnetSet{}), "spec.subnets[0]", "needs ipv4, ipv6 or both"},
		{"a block larger than the subnet", poolObject("a", 5, v4("10.1.0.0/28")), "spec.subnets[0].ipv4", "fewer than one block of 2^5"},
		{"a dual-stack pair of different sizes", poolObject("a", 5, dual("10.1.0.0/16", "fd00:1::/64")), "spec.subnets[0]", "same number of host bits"},
		{"entries of different families", poolObject("a", 5, v4("10.1.0.0/16"), v6("fd00:1::/112")), "spec.subnets[1]", "same address families"},
		{"entries that overlap each other", poolObject("a", 5, v4("10.1.0.0/16"), v4("10.1.4.0/24")), "spec.subnets[1].ipv4", "overlaps ipv4 of subnets[0]"},
		{"an overlap with another pool", poolObject("a", 5, v4("10.90.128.0/20")), "spec.subnets[0].ipv4", `overlaps 10.90.0.0/16 of address pool "existing"`},
		{"an IPv6 overlap with another pool", poolObject("a", 5, v6("fd00:90::/120")), "spec.subnets[0].ipv6", `overlaps fd00:90::/112 of address pool "existing"`},
		{"a default pool with blocks too small for node subnets", poolObject("default", 1, v4("10.1.0.0/16")), "spec.blockSizeBits", "need blocks of at least 4 addresses"},
		{"too many blocks", poolObject("a", 0, v6("fd00:1::/48")), "spec.subnets[0]", "more than 2^62 blocks"},
		{"blockSizeBits above 16 (schema)", poolObject("a", 17, v4("10.0.0.0/8")), "spec.blockSizeBits", "less than or equal to 16"},
		{"no subnets (schema)", poolObject("a", 5), "spec.subnets", "Required value"},
		{"an empty list of subnets (schema)", poolObject("a", 5, []vcoilv2.SubnetSet{}...), "spec.subnets", "should have at least 1 items"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantInvalid(t, env.Client.Create(ctx, tc.pool), tc.field, tc.reason)
		})
	}
}

func TestWebhookKeepsCarvedBlocksInsideThePool(t *testing.T) {
	cleanAPIServer(t)
	ctx := context.Background()
	pool := poolObject("p", 5, v4("10.91.0.0/24"), v4("10.91.1.0/24"))
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	update := func(mutate func(p *vcoilv2.AddressPool)) error {
		p := &vcoilv2.AddressPool{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "p"}, p); err != nil {
			t.Fatal(err)
		}
		mutate(p)
		return env.Client.Update(ctx, p)
	}
	t.Run("blockSizeBits is immutable", func(t *testing.T) {
		wantInvalid(t, update(func(p *vcoilv2.AddressPool) { p.Spec.BlockSizeBits = 6 }), "spec.blockSizeBits", "is immutable")
	})
	t.Run("subnets cannot shrink", func(t *testing.T) {
		wantInvalid(t, update(func(p *vcoilv2.AddressPool) { p.Spec.Subnets = p.Spec.Subnets[:1] }), "spec.subnets", "cannot shrink from 2 to 1 entries")
	})
	t.Run("existing entries cannot change", func(t *testing.T) {
		wantInvalid(t, update(func(p *vcoilv2.AddressPool) { p.Spec.Subnets[1] = v4("10.91.2.0/24") }), "spec.subnets[1]", "existing entries cannot change")
	})
	t.Run("entries may be appended", func(t *testing.T) {
		if err := update(func(p *vcoilv2.AddressPool) { p.Spec.Subnets = append(p.Spec.Subnets, v4("10.91.2.0/24")) }); err != nil {
			t.Fatalf("append: %v", err)
		}
	})
	t.Run("appended entries are validated", func(t *testing.T) {
		wantInvalid(t, update(func(p *vcoilv2.AddressPool) { p.Spec.Subnets = append(p.Spec.Subnets, v4("10.91.0.128/25")) }),
			"spec.subnets[3].ipv4", "overlaps ipv4 of subnets[0]")
	})
	t.Run("metadata changes are not checked again", func(t *testing.T) {
		if err := update(func(p *vcoilv2.AddressPool) { p.Labels = map[string]string{"team": "net"} }); err != nil {
			t.Fatalf("label update: %v", err)
		}
	})
}

func TestWebhookDefaultsPools(t *testing.T) {
	cleanAPIServer(t)
	ctx := context.Background()
	// The mutating webhook writes subnets in canonical text.
	p := poolObject("p", 5, dual("10.92.0.0/16", "FD00:0092:0000::/112"))
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	got := &vcoilv2.AddressPool{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "p"}, got); err != nil {
		t.Fatal(err)
	}
	if *got.Spec.Subnets[0].IPv6 != "fd00:92::/112" {
		t.Errorf("ipv6 = %q, want fd00:92::/112", *got.Spec.Subnets[0].IPv6)
	}
	// Writing the same subnet in another spelling is not a change.
	got.Spec.Subnets[0].IPv6 = ptr.To("fd00:0092::/112")
	if err := env.Client.Update(ctx, got); err != nil {
		t.Fatalf("update with the same subnet spelled differently: %v", err)
	}

	// The Go type always sends blockSizeBits; a manifest without it gets
	// the schema's default.
	raw := []byte(`{"apiVersion":"vcoil.io/v2","kind":"AddressPool","metadata":{"name":"q"},"spec":{"subnets":[{"ipv4":"10.93.0.0/16"}]}}`)
	q := &vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "q"}}
	if err := env.Client.Patch(ctx, q, client.RawPatch("application/apply-patch+yaml", raw), client.FieldOwner("test"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	if q.Spec.BlockSizeBits != 5 {
		t.Errorf("blockSizeBits = %d, want the default 5", q.Spec.BlockSizeBits)
	}
}
