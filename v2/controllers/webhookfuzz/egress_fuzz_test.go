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

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/controllers"
	"github.com/vcoil/vcoil/v2/pkg/egress"
	"github.com/vcoil/vcoil/v2/pkg/egress/routerwatch"
)

// Which optional fields of the fuzzed Egress are set (the bits of flags).
const (
	fouAuto = 1 << iota
	withReplicas
	withTimeout
	hostNetwork
	egressImage // the egress container's image, which vcoil sets
	recreateWithRollingUpdate
	pdbMin
	pdbMax
)

// FuzzEgressWebhook builds Egresses from fuzzed fields (name, destinations
// separated by "|", encapsulation, session affinity and its timeout,
// replicas, the PodDisruptionBudget's bounds, strategy and template) and
// runs them through the webhook as the apiserver does: Default, then
// ValidateCreate. Neither may panic. A refusal is an Invalid error naming
// fields. An Egress it accepts has a Service name, at most 64 destinations
// that are networks in canonical form and do not overlap, and works: its
// client pods' configuration (dual-stack pod and Service, either
// encapsulation the node may choose) passes egress.ClientConfig.Validate,
// and its routers parse its destinations to the same networks. Defaulting
// never changes the verdict of an Egress that sets its encapsulation and
// session affinity, and is idempotent, and an update is judged as a creation.
func FuzzEgressWebhook(f *testing.F) {
	type seed struct {
		name, dests, encap, affinity string
		flags                        uint8
		replicas, timeout            int32
		minText, maxText             string
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.0.0/16", i)
	}
	for _, s := range []seed{
		// Accepted Egresses.
		{"nat", "203.0.113.0/24", "", "", 0, 0, 0, "", ""},
		{"nat", "FD00:0::/64|203.0.113.0/24", "auto", "ClientIP", withReplicas | withTimeout | pdbMax, 3, 10800, "", "50%"},
		{"nat", "0.0.0.0/0|::/0", "fou", "None", fouAuto | withReplicas, 0, 0, "", ""},
		{"kept", "203.0.113.0/24", "vxlan", "None", withReplicas | pdbMin, 0, 0, "1", ""},
		// TestEgressWebhookRejectsInvalidEgressesNamingTheField.
		{"nat", "", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "203.0.113.0/24|example.com", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "10.1.2.3/24", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "2001:db8::1/64", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "::ffff:203.0.113.0/120", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "10.0.0.0/8|203.0.113.0/24|10.20.0.0/16", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", strings.Join(many, "|"), "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "gre", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "vxlan", "ClientIP", fouAuto, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "auto", "None", withTimeout, 0, 60, "", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", withTimeout, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", withTimeout, 0, 86401, "", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", pdbMin | pdbMax, 0, 0, "1", "1"},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", pdbMax, 0, 0, "", "half"},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", withReplicas, -1, 0, "", ""},
		{"1nat", "203.0.113.0/24", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", egressImage, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", hostNetwork, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", recreateWithRollingUpdate, 0, 0, "", ""},
		// Empty strings, spaces, zones, slashes, case, huge numbers.
		{"", "", "", "", 0, 0, 0, "", ""},
		{"n a t", " 203.0.113.0/24", "Auto", "clientip", 0, 0, 0, "", ""},
		{"a/b", "fe80::%eth0/64|203.0.113.0/24|", "fou ", "None", 0, 0, 0, "", ""},
		{"nat", "203.0.113.0/24|203.0.113.0/24", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "::1.2.3.0/120|1.2.3.0/24", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "203.0.113.0/024", "auto", "ClientIP", 0, 0, 0, "", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", withReplicas | withTimeout | pdbMin, 2147483647, -2147483648, "101%", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", pdbMin, 0, 0, "-1", ""},
		{"nat", "203.0.113.0/24", "auto", "ClientIP", pdbMax, 0, 0, "99999999999", ""},
		{strings.Repeat("n", 64), "203.0.113.0/24", "auto", "ClientIP", 0, 0, 0, "", ""},
	} {
		f.Add(s.name, s.dests, s.encap, s.affinity, s.flags, s.replicas, s.timeout, s.minText, s.maxText)
	}

	w := &controllers.EgressWebhook{}
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, name, dests, encap, affinity string, flags uint8, replicas, timeout int32, minText, maxText string) {
		eg := &vcoilv2.Egress{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: vcoilv2.EgressSpec{Encapsulation: vcoilv2.Encapsulation(encap), SessionAffinity: corev1.ServiceAffinity(affinity),
				FouSourcePortAuto: flags&fouAuto != 0}}
		if dests != "" {
			eg.Spec.Destinations = strings.Split(dests, "|")
		}
		if flags&withReplicas != 0 {
			eg.Spec.Replicas = ptr.To(replicas)
		}
		if flags&withTimeout != 0 {
			eg.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(timeout)}}
		}
		if flags&(pdbMin|pdbMax) != 0 {
			eg.Spec.PodDisruptionBudget = &vcoilv2.EgressPDBSpec{}
			if flags&pdbMin != 0 {
				eg.Spec.PodDisruptionBudget.MinAvailable = ptr.To(intstr.Parse(minText))
			}
			if flags&pdbMax != 0 {
				eg.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To(intstr.Parse(maxText))
			}
		}
		if flags&(hostNetwork|egressImage) != 0 {
			eg.Spec.Template = &vcoilv2.EgressPodTemplate{Spec: corev1.PodSpec{HostNetwork: flags&hostNetwork != 0,
				Containers: []corev1.Container{{Name: "sidecar", Image: "x"}}}}
			if flags&egressImage != 0 {
				eg.Spec.Template.Spec.Containers = append(eg.Spec.Template.Spec.Containers, corev1.Container{Name: vcoilv2.EgressContainer, Image: "evil:1"})
			}
		}
		if flags&recreateWithRollingUpdate != 0 {
			eg.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1))}}
		}

		_, rawErr := w.ValidateCreate(ctx, eg.DeepCopy())
		defaulted := eg.DeepCopy()
		if err := w.Default(ctx, defaulted); err != nil {
			t.Fatalf("Default: %v", err)
		}
		twice := defaulted.DeepCopy()
		if err := w.Default(ctx, twice); err != nil || !reflect.DeepEqual(twice, defaulted) {
			t.Fatalf("Default is not idempotent (%v):\n%+v\n%+v", err, defaulted.Spec, twice.Spec)
		}
		_, err := w.ValidateCreate(ctx, defaulted)
		if encap != "" && affinity != "" && (rawErr == nil) != (err == nil) {
			t.Fatalf("Default changed the verdict: %v before, %v after\n%+v\n%+v", rawErr, err, eg.Spec, defaulted.Spec)
		}
		if _, uerr := w.ValidateUpdate(ctx, eg, defaulted); fmt.Sprint(uerr) != fmt.Sprint(err) {
			t.Fatalf("an update is judged %v, a creation %v", uerr, err)
		}

		mustRefuse := egressMustBeRefused(defaulted)
		if err != nil {
			checkInvalid(t, err, "spec", "metadata.name")
			return
		}
		if mustRefuse != "" {
			t.Fatalf("accepted an Egress that %s: %q %+v", mustRefuse, defaulted.Name, defaulted.Spec)
		}
		checkEgressWorks(t, defaulted)
	})
}

// egressMustBeRefused says why the webhook must refuse eg, or "" when it
// need not: rules checked here apart from the webhook's code.
func egressMustBeRefused(eg *vcoilv2.Egress) string {
	if msgs := validation.IsDNS1035Label(eg.Name); len(msgs) > 0 {
		return "has a name no Service may have: " + strings.Join(msgs, "; ")
	}
	ds := eg.Spec.Destinations
	if len(ds) == 0 || len(ds) > 64 {
		return fmt.Sprintf("has %d destinations", len(ds))
	}
	var nets []netip.Prefix
	for _, d := range ds {
		p, err := netip.ParsePrefix(d)
		if err != nil || p != p.Masked() || p.Addr().Is4In6() {
			return fmt.Sprintf("has destination %q, not a network in canonical form", d)
		}
		for _, o := range nets {
			if o.Overlaps(p) {
				return fmt.Sprintf("has overlapping destinations %s and %s", o, p)
			}
		}
		nets = append(nets, p)
	}
	switch eg.Spec.Encapsulation {
	case vcoilv2.EncapsulationAuto, vcoilv2.EncapsulationFoU, vcoilv2.EncapsulationVXLAN:
	default:
		return fmt.Sprintf("has encapsulation %q", eg.Spec.Encapsulation)
	}
	if eg.Spec.FouSourcePortAuto && eg.Spec.Encapsulation == vcoilv2.EncapsulationVXLAN {
		return "asks VXLAN for a FoU source port"
	}
	if r := eg.Spec.Replicas; r != nil && *r < 0 {
		return fmt.Sprintf("has %d replicas", *r)
	}
	a := eg.Spec.SessionAffinity
	if a != corev1.ServiceAffinityClientIP && a != corev1.ServiceAffinityNone {
		return fmt.Sprintf("has session affinity %q", a)
	}
	if c := eg.Spec.SessionAffinityConfig; c != nil {
		if a != corev1.ServiceAffinityClientIP {
			return "has an affinity timeout without ClientIP affinity"
		}
		if c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil && (*c.ClientIP.TimeoutSeconds < 1 || *c.ClientIP.TimeoutSeconds > 86400) {
			return fmt.Sprintf("has an affinity timeout of %d s", *c.ClientIP.TimeoutSeconds)
		}
	}
	if pdb := eg.Spec.PodDisruptionBudget; pdb != nil {
		if pdb.MinAvailable != nil && pdb.MaxUnavailable != nil {
			return "has both PodDisruptionBudget bounds"
		}
		for _, b := range []*intstr.IntOrString{pdb.MinAvailable, pdb.MaxUnavailable} {
			if b == nil {
				continue
			}
			n, err := intstr.GetScaledValueFromIntOrPercent(b, 100, true)
			if err != nil || n < 0 || (b.Type == intstr.String && n > 100) {
				return fmt.Sprintf("has the PodDisruptionBudget bound %q", b.String())
			}
		}
	}
	if s := eg.Spec.Strategy; s != nil && s.Type == appsv1.RecreateDeploymentStrategyType && s.RollingUpdate != nil {
		return "has rolling update parameters with Recreate"
	}
	if t := eg.Spec.Template; t != nil {
		if t.Spec.HostNetwork {
			return "runs its routers in the node's network"
		}
		for _, c := range t.Spec.Containers {
			if c.Name == vcoilv2.EgressContainer && (c.Image != "" || len(c.Command) > 0 || len(c.Args) > 0) {
				return "sets what vcoil sets in the egress container"
			}
		}
	}
	return ""
}

// checkEgressWorks checks that an accepted Egress works for the client pods
// and the routers that use it.
func checkEgressWorks(t *testing.T, eg *vcoilv2.Egress) {
	t.Helper()
	ref := types.NamespacedName{Namespace: eg.Namespace, Name: eg.Name}
	var dests []netip.Prefix
	for _, d := range eg.Spec.Destinations {
		p, err := netip.ParsePrefix(d)
		if err != nil {
			t.Fatalf("accepted destination %q does not parse: %v", d, err)
		}
		dests = append(dests, p.Masked())
	}
	routed, err := routerwatch.ParseDestinations(eg.Spec.Destinations)
	if err != nil || !slices.Equal(routed, dests) {
		t.Fatalf("the routers read destinations %v (%v), want %v", routed, err, dests)
	}
	pod := []netip.Addr{netip.MustParseAddr("10.64.0.5"), netip.MustParseAddr("fd00:10:64::5")}
	svc := []netip.Addr{netip.MustParseAddr("10.96.0.50"), netip.MustParseAddr("fd00:10:96::50")}
	// The cluster's networks; destinations that cover them are allowed
	// (the client routes the cluster's networks around the tunnel).
	excluded := []netip.Prefix{netip.MustParsePrefix("10.64.0.0/16"), netip.MustParsePrefix("10.96.0.0/16"),
		netip.MustParsePrefix("fd00:10:64::/112"), netip.MustParsePrefix("fd00:10:96::/112")}
	for _, fouErr := range []error{nil, errors.New("no fou module")} {
		kind, err := egress.Choose(eg.Spec.Encapsulation, fouErr)
		if err != nil {
			if fouErr != nil && eg.Spec.Encapsulation == vcoilv2.EncapsulationFoU {
				continue // a node without FoU reports the Egress, as it should
			}
			t.Fatalf("accepted encapsulation %q: %v", eg.Spec.Encapsulation, err)
		}
		cfg := egress.ClientConfig{PodIPs: pod, Excluded: excluded, Egresses: []egress.ClientEgress{{
			Egress: ref, Kind: kind, ServiceIPs: svc, Destinations: dests, FoUSourcePortAuto: eg.Spec.FouSourcePortAuto}}}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("accepted Egress %+v: its client configuration (%s) is invalid: %v", eg.Spec, kind, err)
		}
	}
}
