package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

func TestChooseResolvesTheEncapsulationAgainstTheKernel(t *testing.T) {
	noFoU := errors.New("FoU tunnels need the kernel modules fou, ipip and ip6_tunnel; missing: fou")
	for _, tc := range []struct {
		name    string
		want    vcoilv2.Encapsulation
		fouErr  error
		kind    Kind
		wantErr string
	}{
		{"auto is fou where the kernel has it", vcoilv2.EncapsulationAuto, nil, KindFoU, ""},
		{"auto is vxlan where the kernel lacks fou", vcoilv2.EncapsulationAuto, noFoU, KindVXLAN, ""},
		{"unset is auto", "", noFoU, KindVXLAN, ""},
		{"fou where the kernel has it", vcoilv2.EncapsulationFoU, nil, KindFoU, ""},
		{"fou where the kernel lacks it is an error naming the module", vcoilv2.EncapsulationFoU, noFoU, "", "missing: fou"},
		{"vxlan whatever the kernel", vcoilv2.EncapsulationVXLAN, noFoU, KindVXLAN, ""},
		{"an unknown encapsulation is an error", "gre", nil, "", `unknown encapsulation "gre"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Choose(tc.want, tc.fouErr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Choose(%q) = %q, %v; want an error with %q", tc.want, got, err, tc.wantErr)
				}
				if tc.fouErr != nil && !errors.Is(err, tc.fouErr) {
					t.Fatalf("Choose(%q): %v does not wrap the kernel's error", tc.want, err)
				}
				return
			}
			if err != nil || got != tc.kind {
				t.Fatalf("Choose(%q) = %q, %v; want %q", tc.want, got, err, tc.kind)
			}
		})
	}
}

func TestVNIIsAStableNonZero24BitHashOfTheEgress(t *testing.T) {
	a := types.NamespacedName{Namespace: "egns", Name: "nat"}
	if VNI(a) != VNI(types.NamespacedName{Namespace: "egns", Name: "nat"}) {
		t.Fatal("VNI differs for the same Egress")
	}
	// The namespace and the name are both part of it, and not merely
	// concatenated.
	if VNI(a) == VNI(types.NamespacedName{Namespace: "egn", Name: "snat"}) {
		t.Fatal("VNI of egns/nat equals that of egn/snat")
	}
	seen := map[uint32]string{}
	for i := range 2000 {
		e := types.NamespacedName{Namespace: fmt.Sprintf("ns%d", i%7), Name: fmt.Sprintf("egress-%d", i)}
		v := VNI(e)
		if v == 0 || v >= 1<<24 {
			t.Fatalf("VNI(%s) = %d, want 1..2^24-1", e, v)
		}
		seen[v] = e.String()
	}
	// 2,000 values in 2^24: a collision or two would be bad luck, more a
	// bad hash.
	if len(seen) < 1995 {
		t.Fatalf("%d distinct VNIs for 2000 Egresses", len(seen))
	}
}

func TestMACsAreLocallyAdministeredUnicastAndDistinct(t *testing.T) {
	v4 := ClientMAC([]netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5")})
	if got := v4.String(); got != "0a:58:0a:01:00:05" {
		t.Errorf("ClientMAC of 10.1.0.5 = %s, want 0a:58:0a:01:00:05", got)
	}
	v6 := ClientMAC([]netip.Addr{netip.MustParseAddr("fd00::5")})
	v6b := ClientMAC([]netip.Addr{netip.MustParseAddr("fd00::6")})
	if v6.String() == v6b.String() {
		t.Errorf("ClientMAC of fd00::5 and fd00::6 are both %s", v6)
	}
	if ClientMAC([]netip.Addr{netip.MustParseAddr("fd00::5")}).String() != v6.String() {
		t.Error("ClientMAC of an IPv6 address is not stable")
	}
	r := RouterMAC(VNI(types.NamespacedName{Namespace: "egns", Name: "nat"}))
	for _, m := range [][]byte{v4, v6, v6b, r} {
		if m[0]&0x02 == 0 || m[0]&0x01 != 0 {
			t.Errorf("MAC %x is not locally administered unicast", m)
		}
	}
	if r[1] == v4[1] || r[1] == v6[1] {
		t.Errorf("router MAC %s shares its prefix with client MACs %s, %s", r, v4, v6)
	}
	if RouterMAC(1).String() == RouterMAC(2).String() {
		t.Error("RouterMAC does not depend on the VNI")
	}
}

func TestFoUAvailableNamesWhatIsMissing(t *testing.T) {
	err := FoUAvailable()
	if err == nil {
		t.Skip("this kernel has FoU; nothing to name")
	}
	if !strings.Contains(err.Error(), "missing: ") {
		t.Fatalf("FoUAvailable: %v, want the missing modules named", err)
	}
	for _, m := range strings.Split(strings.TrimPrefix(err.Error()[strings.Index(err.Error(), "missing: "):], "missing: "), ", ") {
		switch m {
		case "fou", "ipip", "ip6_tunnel":
		default:
			t.Errorf("FoUAvailable names %q, not a module FoU needs", m)
		}
	}
}
