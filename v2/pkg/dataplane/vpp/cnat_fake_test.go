package vpp

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/cnat"
	"go.fd.io/govpp/binapi/feature"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// fakeCnat models what SetCnatPods configures in VPP 25.10's cnat plugin
// and feature arcs.
type fakeCnat struct {
	policy   cnat.CnatSnatPolicies
	ip4, ip6 netip.Addr
	// pods is cnat's bitmap of pod interfaces; features each interface's
	// enabled cnat nodes.
	pods     map[uint32]bool
	features map[uint32]map[string]bool
	// twiceNAT is NAT44-ED's twice-NAT pool.
	twiceNAT []netip.Addr
}

func (f *fakeVPP) handleCnat(msg api.Message) (api.Message, int32, bool) {
	if f.cnat == nil {
		f.cnat = &fakeCnat{pods: map[uint32]bool{}, features: map[uint32]map[string]bool{}}
	}
	c := f.cnat
	switch m := msg.(type) {
	case *cnat.CnatSetSnatPolicy:
		c.policy = m.Policy
		return &cnat.CnatSetSnatPolicyReply{}, 0, true
	case *cnat.CnatSetSnatAddresses:
		c.ip4, c.ip6 = netip.AddrFrom4(m.SnatIP4), netip.AddrFrom16(m.SnatIP6)
		return &cnat.CnatSetSnatAddressesReply{}, 0, true
	case *cnat.CnatSnatPolicyAddDelIf:
		// cnat_snat_policy_add_del_if sets a bit: no error either way.
		c.pods[uint32(m.SwIfIndex)] = m.IsAdd == 1
		return &cnat.CnatSnatPolicyAddDelIfReply{}, 0, true
	case *nat44_ed.Nat44AddDelAddressRange:
		if !f.nat {
			return &nat44_ed.Nat44AddDelAddressRangeReply{}, int32(api.UNSUPPORTED), true
		}
		a := netip.AddrFrom4(m.FirstIPAddress)
		if m.IsAdd && slices.Contains(c.twiceNAT, a) {
			return &nat44_ed.Nat44AddDelAddressRangeReply{}, int32(api.VALUE_EXIST), true
		}
		if m.IsAdd && m.Flags == nat_types.NAT_IS_TWICE_NAT {
			c.twiceNAT = append(c.twiceNAT, a)
		}
		return &nat44_ed.Nat44AddDelAddressRangeReply{}, 0, true
	case *feature.FeatureEnableDisable:
		if _, ok := f.ifs[uint32(m.SwIfIndex)]; !ok {
			return &feature.FeatureEnableDisableReply{}, int32(api.INVALID_SW_IF_INDEX), true
		}
		if c.features[uint32(m.SwIfIndex)] == nil {
			c.features[uint32(m.SwIfIndex)] = map[string]bool{}
		}
		c.features[uint32(m.SwIfIndex)][m.ArcName+"/"+m.FeatureName] = m.Enable
		return &feature.FeatureEnableDisableReply{}, 0, true
	}
	return nil, 0, false
}

func cnatMsgString(msg api.Message) (string, bool) {
	switch m := msg.(type) {
	case *cnat.CnatSetSnatPolicy:
		return fmt.Sprintf("cnat_set_snat_policy %d", m.Policy), true
	case *cnat.CnatSetSnatAddresses:
		return fmt.Sprintf("cnat_set_snat_addresses %s %s", netip.AddrFrom4(m.SnatIP4), netip.AddrFrom16(m.SnatIP6)), true
	case *cnat.CnatSnatPolicyAddDelIf:
		return fmt.Sprintf("cnat_snat_policy_add_del_if %d add=%d table=%d", m.SwIfIndex, m.IsAdd, m.Table), true
	case *nat44_ed.Nat44AddDelAddressRange:
		return fmt.Sprintf("nat44_add_del_address_range add=%v %s flags=%d", m.IsAdd, netip.AddrFrom4(m.FirstIPAddress), m.Flags), true
	case *feature.FeatureEnableDisable:
		return fmt.Sprintf("feature_enable_disable %d %s %s %v", m.SwIfIndex, m.ArcName, m.FeatureName, m.Enable), true
	}
	return "", false
}

// enabledCnat lists the cnat nodes enabled on sw, sorted.
func (c *fakeCnat) enabled(sw uint32) []string {
	var out []string
	for f, on := range c.features[sw] {
		if on {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

var allCnatFeatures = []string{"ip4-output/cnat-output-ip4", "ip4-unicast/cnat-input-ip4", "ip6-output/cnat-output-ip6", "ip6-unicast/cnat-input-ip6"}

// SetCnatPods sets cnat's k8s SNAT policy with the NAT loopbacks and gives
// wired pods, and pods wired later, cnat's pod bit and features; a DEL
// takes them away; a restarted VPP gets them all again.
func TestSetCnatPodsConfiguresEveryPodNowAndLater(t *testing.T) {
	h := start(t, testConfig())
	<-h.d.Resynced()
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	swA := h.d.pods[podA.PodKey].swIfIndex
	h.vpp.take()
	snat := CnatSNAT{IPv4: netip.MustParseAddr("10.100.0.15"), IPv6: netip.MustParseAddr("fd00:100::f")}
	if err := h.d.SetCnatPods(ctx(t), snat); err != nil {
		t.Fatal(err)
	}
	a := fmt.Sprint(swA)
	wantLines(t, "SetCnatPods", h.vpp.take(), []string{
		"cnat_set_snat_policy 2",
		"cnat_set_snat_addresses 10.100.0.15 fd00:100::f",
		"cnat_snat_policy_add_del_if " + a + " add=1 table=2",
		"feature_enable_disable " + a + " ip4-unicast cnat-input-ip4 true",
		"feature_enable_disable " + a + " ip4-output cnat-output-ip4 true",
		"feature_enable_disable " + a + " ip6-unicast cnat-input-ip6 true",
		"feature_enable_disable " + a + " ip6-output cnat-output-ip6 true",
	})
	if err := h.d.SetCnatPods(ctx(t), snat); err != nil {
		t.Fatal(err)
	}
	if sent := h.vpp.take(); len(sent) != 0 {
		t.Errorf("SetCnatPods again with what VPP holds sent %v", sent)
	}
	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	swB := h.d.pods[podB.PodKey].swIfIndex
	check := func(when string, sw uint32, want []string, pod bool) {
		t.Helper()
		h.vpp.mu.Lock()
		defer h.vpp.mu.Unlock()
		if got := h.vpp.cnat.enabled(sw); !slices.Equal(got, want) || h.vpp.cnat.pods[sw] != pod {
			t.Errorf("%s: interface %d has cnat features %v, pod bit %v; want %v, %v", when, sw, got, h.vpp.cnat.pods[sw], want, pod)
		}
	}
	check("pod B wired after SetCnatPods", swB, allCnatFeatures, true)
	h.vpp.mu.Lock()
	if h.vpp.nat || len(h.vpp.natFeat[swA]) != 0 {
		t.Errorf("without hostPorts the cnat renderer's pods have NAT44 (enabled %v, pod A's features %v)", h.vpp.nat, h.vpp.natFeat[swA])
	}
	h.vpp.mu.Unlock()
	if err := h.d.TeardownPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	check("pod B deleted", swB, nil, false)

	h.vpp.restart()
	select {
	case <-h.d.Resynced():
	case <-time.After(5 * time.Second):
		t.Fatal("nothing on Resynced after the restart")
	}
	swA = h.d.pods[podA.PodKey].swIfIndex
	check("pod A after VPP's restart", swA, allCnatFeatures, true)
	h.vpp.mu.Lock()
	if c := h.vpp.cnat; c.policy != cnat.CNAT_POLICY_K8S || c.ip4 != snat.IPv4 || c.ip6 != snat.IPv6 {
		t.Errorf("after VPP's restart cnat's SNAT is %d %s %s", c.policy, c.ip4, c.ip6)
	}
	h.vpp.mu.Unlock()

	if err := h.d.SetCnatPods(ctx(t), CnatSNAT{IPv4: snat.IPv6}); err == nil {
		t.Error("an IPv6 address as the IPv4 NAT loopback was accepted")
	}
}

// With the cnat renderer, hostPorts (NAT44 static mappings) make every pod
// a NAT44 frontend while a pod of the node has one, NAT44-ED with NAT
// forwarding and the NAT loopback in its twice-NAT pool; when the last
// such pod goes, the other pods lose the role.
func TestCnatPodsAreNAT44FrontendsWhileHostPortsExist(t *testing.T) {
	h := start(t, hostPortConfig(), func(h *harness) { h.vpp.restart(withAddressedUplink) })
	<-h.d.Resynced()
	snat := CnatSNAT{IPv4: netip.MustParseAddr("10.100.0.15")}
	if err := h.d.SetCnatPods(ctx(t), snat); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	swB := h.d.pods[podB.PodKey].swIfIndex
	outside := func(sw uint32) bool {
		h.vpp.mu.Lock()
		defer h.vpp.mu.Unlock()
		return h.vpp.natFeat[sw][nat_types.NAT_IS_NONE]
	}
	if outside(swB) {
		t.Fatal("pod B is a NAT44 frontend before any hostPort")
	}
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	if !outside(swB) {
		t.Error("pod B is no NAT44 frontend while pod A has hostPorts")
	}
	h.vpp.mu.Lock()
	if !h.vpp.nat || !h.vpp.snat.forwarding || !slices.Equal(h.vpp.cnat.twiceNAT, []netip.Addr{snat.IPv4}) {
		t.Errorf("with a hostPort: NAT44-ED enabled %v, forwarding %v, twice-NAT pool %v; want both, and the NAT loopback (a pod reaching its own hostPort)",
			h.vpp.nat, h.vpp.snat.forwarding, h.vpp.cnat.twiceNAT)
	}
	h.vpp.mu.Unlock()
	if err := h.d.TeardownPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	if outside(swB) {
		t.Error("pod B is still a NAT44 frontend after the last hostPort went")
	}
}

// A node switched from the NAT44 service renderer to cnat: an earlier
// vcoild's renderer made every pod a NAT44 frontend (and backends inside
// too); after the restart with cnat, SetCnatPods reads those roles from
// VPP and takes them away, so that NAT44-ED leaves the pods' traffic.
func TestCnatTakesAwayTheNAT44RolesOfAnEarlierRenderer(t *testing.T) {
	cfg := testConfig()
	h := start(t, cfg)
	<-h.d.Resynced()
	pods := []dataplane.Pod{podA, podB}
	for _, p := range pods {
		if _, err := h.d.SetupPod(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.d.SetPodNATRoles(ctx(t), []netip.Addr{podB.IPv4}); err != nil {
		t.Fatal(err)
	}
	swA, swB := h.d.pods[podA.PodKey].swIfIndex, h.d.pods[podB.PodKey].swIfIndex
	roles := func(sw uint32) map[nat_types.NatConfigFlags]bool {
		h.vpp.mu.Lock()
		defer h.vpp.mu.Unlock()
		return maps.Clone(h.vpp.natFeat[sw])
	}
	if r := roles(swB); !r[nat_types.NAT_IS_NONE] || !r[nat_types.NAT_IS_INSIDE] {
		t.Fatalf("the NAT44 renderer's backend pod has NAT44 features %v", r)
	}
	if err := h.restart(t, cfg, pods); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetCnatPods(ctx(t), CnatSNAT{IPv4: netip.MustParseAddr("10.100.0.15")}); err != nil {
		t.Fatal(err)
	}
	for _, sw := range []uint32{swA, swB} {
		for f, on := range roles(sw) {
			if on {
				t.Errorf("interface %d keeps NAT44 feature %d after the switch to cnat", sw, f)
			}
		}
		h.vpp.mu.Lock()
		if got := h.vpp.cnat.enabled(sw); !slices.Equal(got, allCnatFeatures) {
			t.Errorf("interface %d has cnat features %v, want %v", sw, got, allCnatFeatures)
		}
		h.vpp.mu.Unlock()
	}
}
