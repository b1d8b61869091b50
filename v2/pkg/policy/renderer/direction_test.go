package renderer

import (
	"net/netip"
	"strings"
	"testing"
)

// A pod's Ingress is what the vswitch sends to the pod, its Egress what the
// vswitch receives from the pod. The shape of the rule lists agrees: the pod
// is the destination of the traffic its Ingress list filters, so that list
// cannot name a destination; it is the source of its Egress traffic, so that
// list cannot name a source.
func TestOnVSwitchTurnsThePodsDirectionsIntoTheVSwitchs(t *testing.T) {
	peer := netip.MustParsePrefix("10.0.0.2/32")
	cases := []struct {
		pod     Direction
		vswitch VSwitchDirection
		name    string
		// podEnd names the pod's end of the traffic, as the vswitch sees
		// it in that direction.
		podEnd string
	}{
		{Ingress, VSwitchEgress, "vswitch egress", "destination"},
		{Egress, VSwitchIngress, "vswitch ingress", "source"},
	}
	for _, tc := range cases {
		t.Run(tc.pod.String(), func(t *testing.T) {
			if got := OnVSwitch(tc.pod); got != tc.vswitch {
				t.Fatalf("OnVSwitch(%s) = %s, want %s", tc.pod, got, tc.vswitch)
			}
			if got := OnVSwitch(tc.pod).String(); got != tc.name {
				t.Fatalf("OnVSwitch(%s).String() = %q, want %q", tc.pod, got, tc.name)
			}
			naming := Rule{Action: ActionPermit, Protocol: ProtocolTCP, SrcPort: AnyPort, DstPort: SinglePort(80)}
			if tc.podEnd == "destination" {
				naming.DstNetwork = peer
			} else {
				naming.SrcNetwork = peer
			}
			err := ValidateRuleList(tc.pod, []Rule{naming, DenyAll})
			if want := "the " + tc.podEnd + " of traffic"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("a %s list naming a %s: ValidateRuleList = %v, want an error containing %q", tc.pod, tc.podEnd, err, want)
			}
		})
	}
}

func TestDirectionsPrintAsKubernetesPolicyTypes(t *testing.T) {
	if Ingress.String() != "ingress" || Egress.String() != "egress" {
		t.Fatalf("Ingress and Egress print as %q and %q", Ingress, Egress)
	}
}
