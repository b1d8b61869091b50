package controllers

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// These tests go through the apiserver, which calls the webhooks served by
// the package's webhook manager (no reconciler runs).

func TestEgressWebhookRejectsInvalidEgressesNamingTheField(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	with := func(mutate func(*vcoilv2.Egress)) *vcoilv2.Egress {
		eg := egressObject(ns, "nat", "203.0.113.0/24")
		mutate(eg)
		return eg
	}
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprintf("10.%d.0.0/16", i)
	}
	egressContainer := func(c corev1.Container) func(*vcoilv2.Egress) {
		return func(e *vcoilv2.Egress) {
			c.Name = vcoilv2.EgressContainer
			e.Spec.Template = &vcoilv2.EgressPodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Image: "x"}, c}}}
		}
	}
	cases := []struct {
		name   string
		eg     *vcoilv2.Egress
		field  string
		reason string
	}{
		{"no destinations", with(func(e *vcoilv2.Egress) { e.Spec.Destinations = nil }),
			"spec.destinations", "Required value"},
		{"a destination that is not a CIDR", with(func(e *vcoilv2.Egress) { e.Spec.Destinations = []string{"203.0.113.0/24", "example.com"} }),
			"spec.destinations[1]", "is not a network in CIDR notation"},
		{"a host address with a prefix length", with(func(e *vcoilv2.Egress) { e.Spec.Destinations = []string{"10.1.2.3/24"} }),
			"spec.destinations[0]", "has host bits set; the network is 10.1.2.0/24"},
		{"an IPv6 host address with a prefix length", with(func(e *vcoilv2.Egress) { e.Spec.Destinations = []string{"2001:db8::1/64"} }),
			"spec.destinations[0]", "has host bits set; the network is 2001:db8::/64"},
		{"an IPv4-mapped IPv6 network", with(func(e *vcoilv2.Egress) { e.Spec.Destinations = []string{"::ffff:203.0.113.0/120"} }),
			"spec.destinations[0]", "write it as IPv4 (203.0.113.0/24)"},
		{"overlapping destinations", with(func(e *vcoilv2.Egress) {
			e.Spec.Destinations = []string{"10.0.0.0/8", "203.0.113.0/24", "10.20.0.0/16"}
		}),
			"spec.destinations[2]", "overlaps destinations[0] (10.0.0.0/8)"},
		{"more than 64 destinations", with(func(e *vcoilv2.Egress) { e.Spec.Destinations = many }),
			"spec.destinations", "must have at most 64 items"},
		{"an unknown encapsulation", with(func(e *vcoilv2.Egress) { e.Spec.Encapsulation = "gre" }),
			"spec.encapsulation", `Unsupported value: "gre"`},
		{"fouSourcePortAuto with vxlan", with(func(e *vcoilv2.Egress) {
			e.Spec.Encapsulation = vcoilv2.EncapsulationVXLAN
			e.Spec.FouSourcePortAuto = true
		}), "spec.fouSourcePortAuto", "only for the fou or auto encapsulation"},
		{"sessionAffinityConfig without ClientIP affinity", with(func(e *vcoilv2.Egress) {
			e.Spec.SessionAffinity = corev1.ServiceAffinityNone
			e.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](60)}}
		}), "spec.sessionAffinityConfig", "only with sessionAffinity ClientIP (it is None)"},
		{"a zero affinity timeout", with(func(e *vcoilv2.Egress) {
			e.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](0)}}
		}), "spec.sessionAffinityConfig.clientIP.timeoutSeconds", "must be from 1 to 86400 seconds"},
		{"an affinity timeout over a day", with(func(e *vcoilv2.Egress) {
			e.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](86401)}}
		}), "spec.sessionAffinityConfig.clientIP.timeoutSeconds", "must be from 1 to 86400 seconds"},
		{"a PDB with both bounds", with(func(e *vcoilv2.Egress) {
			e.Spec.PodDisruptionBudget = &vcoilv2.EgressPDBSpec{MinAvailable: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}
		}), "spec.podDisruptionBudget", "set minAvailable or maxUnavailable, not both"},
		{"a PDB bound that is not a percentage", with(func(e *vcoilv2.Egress) {
			e.Spec.PodDisruptionBudget = &vcoilv2.EgressPDBSpec{MaxUnavailable: ptr.To(intstr.FromString("half"))}
		}), "spec.podDisruptionBudget.maxUnavailable", "must be a number or a percentage"},
		{"negative replicas (schema)", with(func(e *vcoilv2.Egress) { e.Spec.Replicas = ptr.To[int32](-1) }),
			"spec.replicas", "should be greater than or equal to 0"},
		{"a name that is no DNS-1035 label", egressObject(ns, "1nat", "203.0.113.0/24"),
			"metadata.name", "it names the routers' Service"},
		{"the egress container's image", with(egressContainer(corev1.Container{Image: "evil:1"})),
			"spec.template.spec.containers[1].image", "vcoil sets the egress container's image"},
		{"the egress container's command", with(egressContainer(corev1.Container{Command: []string{"/bin/sh"}})),
			"spec.template.spec.containers[1].command", "vcoil sets the egress container's command"},
		{"the egress container's args", with(egressContainer(corev1.Container{Args: []string{"-v"}})),
			"spec.template.spec.containers[1].args", "vcoil sets the egress container's args"},
		{"routers in the host network", with(func(e *vcoilv2.Egress) {
			e.Spec.Template = &vcoilv2.EgressPodTemplate{Spec: corev1.PodSpec{HostNetwork: true}}
		}), "spec.template.spec.hostNetwork", "must not run in the node's"},
		{"Recreate with rolling update parameters", with(func(e *vcoilv2.Egress) {
			e.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromInt32(1))}}
		}), "spec.strategy.rollingUpdate", "may not be set when the type is Recreate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantInvalid(t, env.Client.Create(ctx, tc.eg), tc.field, tc.reason)
		})
	}

	t.Run("updates are validated too", func(t *testing.T) {
		eg := createEgress(t, egressObject(ns, "valid", "203.0.113.0/24"))
		t.Cleanup(func() { _ = env.Client.Delete(ctx, eg) })
		eg.Spec.Destinations = append(eg.Spec.Destinations, "203.0.113.128/25")
		wantInvalid(t, env.Client.Update(ctx, eg), "spec.destinations[1]", "overlaps destinations[0] (203.0.113.0/24)")
	})
}

func TestEgressWebhookDefaultsEgresses(t *testing.T) {
	ctx := context.Background()
	ns := testNamespace(t)
	eg := egressObject(ns, "nat", "FD00:0::/64", "203.0.113.0/24")
	// What kubectl would send without the schema's defaults: the webhook
	// alone fills them here (the schema does too, before it).
	if err := env.Client.Create(ctx, eg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, eg) })
	got := &vcoilv2.Egress{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(eg), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Encapsulation != vcoilv2.EncapsulationAuto || got.Spec.SessionAffinity != corev1.ServiceAffinityClientIP ||
		ptr.Deref(got.Spec.Replicas, -1) != 1 {
		t.Errorf("defaults: encapsulation %q, session affinity %q, replicas %v", got.Spec.Encapsulation, got.Spec.SessionAffinity, got.Spec.Replicas)
	}
	if want := []string{"fd00::/64", "203.0.113.0/24"}; fmt.Sprint(got.Spec.Destinations) != fmt.Sprint(want) {
		t.Errorf("destinations %v, want canonical %v", got.Spec.Destinations, want)
	}

	// Explicit values are kept, zero replicas among them.
	kept := egressObject(ns, "kept", "203.0.113.0/24")
	kept.Spec.Encapsulation = vcoilv2.EncapsulationVXLAN
	kept.Spec.SessionAffinity = corev1.ServiceAffinityNone
	kept.Spec.Replicas = ptr.To[int32](0)
	if err := env.Client.Create(ctx, kept); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, kept) })
	if kept.Spec.Encapsulation != vcoilv2.EncapsulationVXLAN || kept.Spec.SessionAffinity != corev1.ServiceAffinityNone || ptr.Deref(kept.Spec.Replicas, -1) != 0 {
		t.Errorf("explicit values changed: %+v", kept.Spec)
	}
}

// The defaulter on its own, for objects that reach it without the schema's
// defaults (the apiserver always applies them first).
func TestEgressDefaulterFillsWhatIsMissing(t *testing.T) {
	eg := &vcoilv2.Egress{ObjectMeta: metav1.ObjectMeta{Name: "nat"}, Spec: vcoilv2.EgressSpec{Destinations: []string{"10.1.2.3/24", "2001:DB8::/32"}}}
	if err := (&EgressWebhook{}).Default(context.Background(), eg); err != nil {
		t.Fatal(err)
	}
	if eg.Spec.Encapsulation != vcoilv2.EncapsulationAuto || eg.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || ptr.Deref(eg.Spec.Replicas, -1) != 1 {
		t.Errorf("defaults: %+v", eg.Spec)
	}
	// Host bits are left for validation to report as written.
	if want := []string{"10.1.2.3/24", "2001:db8::/32"}; fmt.Sprint(eg.Spec.Destinations) != fmt.Sprint(want) {
		t.Errorf("destinations %v, want %v", eg.Spec.Destinations, want)
	}
}
