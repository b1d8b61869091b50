package controllers

import (
	"context"
	"fmt"
	"net/netip"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// maxEgressDestinations bounds spec.destinations (as the schema does): every
// destination is a route in every client pod and router.
const maxEgressDestinations = 64

// maxClientIPAffinitySeconds is the apiserver's bound of a Service's
// ClientIP affinity timeout (one day).
const maxClientIPAffinitySeconds = 86400

// EgressWebhook defaults and validates Egresses. Every rejection names the
// field and the reason. It reads no other object: an Egress is valid or not
// on its own.
type EgressWebhook struct{}

// +kubebuilder:webhook:path=/mutate-vcoil-io-v2-egress,mutating=true,failurePolicy=fail,sideEffects=None,groups=vcoil.io,resources=egresses,verbs=create;update,versions=v2,name=megress.vcoil.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-vcoil-io-v2-egress,mutating=false,failurePolicy=fail,sideEffects=None,groups=vcoil.io,resources=egresses,verbs=create;update,versions=v2,name=vegress.vcoil.io,admissionReviewVersions=v1

// SetupWithManager registers both webhooks with the manager's webhook server.
func (w *EgressWebhook) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &vcoilv2.Egress{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default fills what the schema defaults too (for objects written without
// it): encapsulation auto, session affinity ClientIP, one replica. It writes
// destinations in canonical text ("fd00::/64", not "FD00:0::/64") so that
// equal networks compare equal; text that does not parse, or that has host
// bits, is left for validation to reject.
func (w *EgressWebhook) Default(_ context.Context, eg *vcoilv2.Egress) error {
	if eg.Spec.Encapsulation == "" {
		eg.Spec.Encapsulation = vcoilv2.EncapsulationAuto
	}
	if eg.Spec.SessionAffinity == "" {
		eg.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	if eg.Spec.Replicas == nil {
		eg.Spec.Replicas = ptr.To[int32](1)
	}
	for i, d := range eg.Spec.Destinations {
		if p, err := netip.ParsePrefix(d); err == nil && p == p.Masked() {
			eg.Spec.Destinations[i] = p.String()
		}
	}
	return nil
}

// ValidateCreate checks a new Egress.
func (w *EgressWebhook) ValidateCreate(_ context.Context, eg *vcoilv2.Egress) (admission.Warnings, error) {
	return nil, invalidEgress(eg, validateEgress(eg))
}

// ValidateUpdate checks the Egress as it would become; every field may
// change (the routers and clients follow).
func (w *EgressWebhook) ValidateUpdate(_ context.Context, _, eg *vcoilv2.Egress) (admission.Warnings, error) {
	return nil, invalidEgress(eg, validateEgress(eg))
}

// ValidateDelete allows every deletion.
func (w *EgressWebhook) ValidateDelete(context.Context, *vcoilv2.Egress) (admission.Warnings, error) {
	return nil, nil
}

func validateEgress(eg *vcoilv2.Egress) field.ErrorList {
	var errs field.ErrorList
	// The name is the Service's, which must be a DNS-1035 label.
	for _, msg := range validation.IsDNS1035Label(eg.Name) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), eg.Name, msg+" (it names the routers' Service)"))
	}
	spec := field.NewPath("spec")
	errs = append(errs, validateDestinations(spec.Child("destinations"), eg.Spec.Destinations)...)

	switch eg.Spec.Encapsulation {
	case vcoilv2.EncapsulationAuto, vcoilv2.EncapsulationFoU, vcoilv2.EncapsulationVXLAN:
	default:
		errs = append(errs, field.NotSupported(spec.Child("encapsulation"), eg.Spec.Encapsulation,
			[]vcoilv2.Encapsulation{vcoilv2.EncapsulationAuto, vcoilv2.EncapsulationFoU, vcoilv2.EncapsulationVXLAN}))
	}
	if eg.Spec.FouSourcePortAuto && eg.Spec.Encapsulation == vcoilv2.EncapsulationVXLAN {
		errs = append(errs, field.Invalid(spec.Child("fouSourcePortAuto"), true,
			"only for the fou or auto encapsulation: VXLAN always picks its source port per flow"))
	}

	if r := eg.Spec.Replicas; r != nil && *r < 0 {
		errs = append(errs, field.Invalid(spec.Child("replicas"), *r, "must be 0 or more"))
	}

	switch eg.Spec.SessionAffinity {
	case corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone:
	default:
		errs = append(errs, field.NotSupported(spec.Child("sessionAffinity"), eg.Spec.SessionAffinity,
			[]corev1.ServiceAffinity{corev1.ServiceAffinityClientIP, corev1.ServiceAffinityNone}))
	}
	if c := eg.Spec.SessionAffinityConfig; c != nil {
		p := spec.Child("sessionAffinityConfig")
		if eg.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("only with sessionAffinity ClientIP (it is %s)", eg.Spec.SessionAffinity)))
		} else if c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			if t := *c.ClientIP.TimeoutSeconds; t < 1 || t > maxClientIPAffinitySeconds {
				errs = append(errs, field.Invalid(p.Child("clientIP", "timeoutSeconds"), t,
					fmt.Sprintf("must be from 1 to %d seconds", maxClientIPAffinitySeconds)))
			}
		}
	}

	if pdb := eg.Spec.PodDisruptionBudget; pdb != nil {
		p := spec.Child("podDisruptionBudget")
		if pdb.MinAvailable != nil && pdb.MaxUnavailable != nil {
			errs = append(errs, field.Invalid(p, "minAvailable and maxUnavailable", "set minAvailable or maxUnavailable, not both"))
		}
		errs = append(errs, validateIntOrPercent(p.Child("minAvailable"), pdb.MinAvailable)...)
		errs = append(errs, validateIntOrPercent(p.Child("maxUnavailable"), pdb.MaxUnavailable)...)
	}

	if s := eg.Spec.Strategy; s != nil && s.Type == appsv1.RecreateDeploymentStrategyType && s.RollingUpdate != nil {
		errs = append(errs, field.Forbidden(spec.Child("strategy", "rollingUpdate"), "may not be set when the type is Recreate"))
	}

	if t := eg.Spec.Template; t != nil {
		ps := spec.Child("template", "spec")
		if t.Spec.HostNetwork {
			errs = append(errs, field.Forbidden(ps.Child("hostNetwork"),
				"routers change sysctls and nftables of their network namespace and must not run in the node's"))
		}
		for i, c := range t.Spec.Containers {
			if c.Name != vcoilv2.EgressContainer {
				continue
			}
			cp := ps.Child("containers").Index(i)
			const why = "vcoil sets the egress container's %s (the image is vcoil-controller's --egress-image)"
			if c.Image != "" {
				errs = append(errs, field.Forbidden(cp.Child("image"), fmt.Sprintf(why, "image")))
			}
			if len(c.Command) > 0 {
				errs = append(errs, field.Forbidden(cp.Child("command"), fmt.Sprintf(why, "command")))
			}
			if len(c.Args) > 0 {
				errs = append(errs, field.Forbidden(cp.Child("args"), fmt.Sprintf(why, "args")))
			}
		}
	}
	return errs
}

// validateDestinations checks that every destination is a network in
// canonical form and that no two overlap (a packet's tunnel would depend on
// the order of routes).
func validateDestinations(p *field.Path, dests []string) field.ErrorList {
	if len(dests) == 0 {
		return field.ErrorList{field.Required(p, "at least one network (CIDR) to reach through the routers")}
	}
	var errs field.ErrorList
	if len(dests) > maxEgressDestinations {
		errs = append(errs, field.TooMany(p, len(dests), maxEgressDestinations))
	}
	parsed := make([]netip.Prefix, len(dests))
	for i, d := range dests {
		pref, err := netip.ParsePrefix(d)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p.Index(i), d, "is not a network in CIDR notation (such as 203.0.113.0/24 or 2001:db8::/32)"))
			continue
		case pref.Addr().Is4In6():
			errs = append(errs, field.Invalid(p.Index(i), d, fmt.Sprintf("is an IPv4-mapped IPv6 network; write it as IPv4 (%s)",
				netip.PrefixFrom(pref.Addr().Unmap(), max(pref.Bits()-96, 0)).Masked())))
			continue
		case pref != pref.Masked():
			errs = append(errs, field.Invalid(p.Index(i), d, fmt.Sprintf("has host bits set; the network is %s", pref.Masked())))
			continue
		}
		parsed[i] = pref
		for j := 0; j < i; j++ {
			if parsed[j].IsValid() && parsed[j].Overlaps(pref) {
				errs = append(errs, field.Invalid(p.Index(i), d, fmt.Sprintf("overlaps destinations[%d] (%s)", j, parsed[j])))
			}
		}
	}
	return errs
}

// validateIntOrPercent checks a PodDisruptionBudget bound: a count of 0 or
// more, or a percentage from 0% to 100%.
func validateIntOrPercent(p *field.Path, v *intstr.IntOrString) field.ErrorList {
	if v == nil {
		return nil
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, 100, true)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(p, v.String(), "must be a number or a percentage such as 50%")}
	case n < 0 || (v.Type == intstr.String && n > 100):
		return field.ErrorList{field.Invalid(p, v.String(), "must be 0 or more (a percentage at most 100%)")}
	}
	return nil
}

func invalidEgress(eg *vcoilv2.Egress, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(vcoilv2.GroupVersion.WithKind("Egress").GroupKind(), eg.Name, errs)
}
