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

func lbPoolObject(name string, subnets ...vcoilv2.SubnetSet) *vcoilv2.AddressPool {
	p := poolObject(name, 5, subnets...) // 5: the schema default, meaningless here
	p.Spec.Usage = vcoilv2.UsageLoadBalancer
	return p
}

func TestWebhookKeepsLoadBalancerAndPodPoolsApart(t *testing.T) {
	cleanAPIServer(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, poolObject("pods", 5, dual("10.94.0.0/16", "fd00:94::/112"))); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, lbPoolObject("lb", dual("198.51.100.0/26", "fd00:51::/120"))); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		pool   *vcoilv2.AddressPool
		field  string
		reason string
	}{
		{"a LoadBalancer pool overlapping a Pods pool", lbPoolObject("a", v4("10.94.1.0/24")),
			"spec.subnets[0].ipv4", `overlaps 10.94.0.0/16 of address pool "pods" (usage Pods)`},
		{"a Pods pool overlapping a LoadBalancer pool", poolObject("a", 2, v4("198.51.100.32/27")),
			"spec.subnets[0].ipv4", `overlaps 198.51.100.0/26 of address pool "lb" (usage LoadBalancer)`},
		{"a Pods pool overlapping a LoadBalancer pool in IPv6", poolObject("a", 2, v6("fd00:51::/124")),
			"spec.subnets[0].ipv6", `overlaps fd00:51::/120 of address pool "lb" (usage LoadBalancer)`},
		{"two LoadBalancer pools that overlap", lbPoolObject("a", v4("198.51.100.63/32")),
			"spec.subnets[0].ipv4", `overlaps 198.51.100.0/26 of address pool "lb" (usage LoadBalancer)`},
		{"a LoadBalancer pool named default", lbPoolObject("default", v4("203.0.113.0/28")),
			"spec.usage", `the pool named "default" gives pods and node subnets their addresses: its usage must be Pods`},
		{"a LoadBalancer subnet with host bits set", lbPoolObject("a", v4("203.0.113.1/28")),
			"spec.subnets[0].ipv4", "has host bits set; the subnet is 203.0.113.0/28"},
		{"LoadBalancer entries that overlap each other", lbPoolObject("a", v6("fd00:52::/120"), dual("203.0.113.0/28", "fd00:52::80/121")),
			"spec.subnets[1].ipv6", "overlaps ipv6 of subnets[0] (fd00:52::/120)"},
		{"a LoadBalancer entry without any subnet", lbPoolObject("a", vcoilv2.SubnetSet{}),
			"spec.subnets[0]", "needs ipv4, ipv6 or both"},
		{"an unknown usage (schema)", func() *vcoilv2.AddressPool {
			p := poolObject("a", 5, v4("203.0.113.0/28"))
			p.Spec.Usage = "Nodes"
			return p
		}(), "spec.usage", "Unsupported value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantInvalid(t, env.Client.Create(ctx, tc.pool), tc.field, tc.reason)
		})
	}

	t.Run("a LoadBalancer pool ignores the rules of blocks", func(t *testing.T) {
		// Single addresses, a /32 smaller than a block of the default
		// blockSizeBits, entries of different families, and a dual-stack
		// entry whose families differ in size.
		p := lbPoolObject("free", v4("203.0.113.7/32"), v6("fd00:53::/64"), dual("203.0.113.16/28", "fd00:54::/120"))
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatalf("create: %v", err)
		}
		got := &vcoilv2.AddressPool{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "free"}, got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Usage != vcoilv2.UsageLoadBalancer || got.Spec.BlockSizeBits != 5 {
			t.Fatalf("stored spec = %+v", got.Spec)
		}
	})
	t.Run("a Pods pool that overlaps nothing is accepted next to them", func(t *testing.T) {
		if err := env.Client.Create(ctx, poolObject("more-pods", 5, v4("10.95.0.0/24"))); err != nil {
			t.Fatalf("create: %v", err)
		}
	})
}

func TestWebhookKeepsThePoolUsage(t *testing.T) {
	cleanAPIServer(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, poolObject("pods", 5, v4("10.96.0.0/24"))); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, lbPoolObject("lb", v4("198.51.100.64/28"))); err != nil {
		t.Fatal(err)
	}
	update := func(name string, mutate func(p *vcoilv2.AddressPool)) error {
		p := &vcoilv2.AddressPool{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, p); err != nil {
			t.Fatal(err)
		}
		mutate(p)
		return env.Client.Update(ctx, p)
	}
	t.Run("a pool without usage is a Pods pool", func(t *testing.T) {
		p, err := getPool(t, "pods")
		if err != nil || p.Spec.Usage != vcoilv2.UsagePods {
			t.Fatalf("usage = %q (%v), want Pods", p.Spec.Usage, err)
		}
	})
	t.Run("a Pods pool cannot become a LoadBalancer pool", func(t *testing.T) {
		wantInvalid(t, update("pods", func(p *vcoilv2.AddressPool) { p.Spec.Usage = vcoilv2.UsageLoadBalancer }),
			"spec.usage", "is immutable (was Pods, now LoadBalancer)")
	})
	t.Run("a LoadBalancer pool cannot become a Pods pool", func(t *testing.T) {
		wantInvalid(t, update("lb", func(p *vcoilv2.AddressPool) { p.Spec.Usage = vcoilv2.UsagePods }),
			"spec.usage", "is immutable (was LoadBalancer, now Pods)")
	})
	t.Run("a LoadBalancer pool's blockSizeBits may change: it means nothing there", func(t *testing.T) {
		if err := update("lb", func(p *vcoilv2.AddressPool) { p.Spec.BlockSizeBits = 0 }); err != nil {
			t.Fatalf("update: %v", err)
		}
	})
	t.Run("a LoadBalancer pool's subnets may only be appended", func(t *testing.T) {
		wantInvalid(t, update("lb", func(p *vcoilv2.AddressPool) { p.Spec.Subnets[0] = v4("198.51.100.80/28") }),
			"spec.subnets[0]", "existing entries cannot change")
		if err := update("lb", func(p *vcoilv2.AddressPool) { p.Spec.Subnets = append(p.Spec.Subnets, v6("fd00:55::/120")) }); err != nil {
			t.Fatalf("append: %v", err)
		}
	})

	// An object stored before the field existed has no usage; the webhook
	// reads it as Pods. The apiserver (schema default, mutating webhook)
	// never lets such an old object through, so call the validator itself.
	w := &AddressPoolWebhook{Client: env.Client}
	stored := poolObject("pods", 5, v4("10.96.0.0/24"))
	t.Run("an old pool without usage may be written as Pods", func(t *testing.T) {
		now := stored.DeepCopy()
		now.Spec.Usage = vcoilv2.UsagePods
		if _, err := w.ValidateUpdate(ctx, stored, now); err != nil {
			t.Fatalf("update: %v", err)
		}
	})
	t.Run("an old pool without usage cannot become a LoadBalancer pool", func(t *testing.T) {
		now := stored.DeepCopy()
		now.Spec.Usage = vcoilv2.UsageLoadBalancer
		_, err := w.ValidateUpdate(ctx, stored, now)
		wantInvalid(t, err, "spec.usage", "is immutable (was Pods, now LoadBalancer)")
	})
}
