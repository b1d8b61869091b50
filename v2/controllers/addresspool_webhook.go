package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// AddressPoolWebhook defaults and validates AddressPools. Every rejection names
// the field and the reason.
//
// spec.usage is immutable: a pool's addresses are given to pods (as blocks)
// or to Services, and switching would strand what was given. The pool named
// "default" gives node subnets and must be a Pods pool. No two pools overlap,
// whatever their usages, so that an address is never both a pod's and a
// Service's. A LoadBalancer pool gives single addresses per family, so
// spec.blockSizeBits is ignored for it (neither checked nor immutable, and its
// schema default is accepted), and so are the rules that exist for blocks:
// equal host bits in a dual-stack entry and the same families in every entry.
//
// Overlap with other pools is checked against the manager's cache; two pools
// created in the same instant can both pass, as with any admission check that
// reads other objects.
type AddressPoolWebhook struct {
	Client client.Reader
}

// +kubebuilder:webhook:path=/mutate-vcoil-io-v2-addresspool,mutating=true,failurePolicy=fail,sideEffects=None,groups=vcoil.io,resources=addresspools,verbs=create;update,versions=v2,name=maddresspool.vcoil.io,admissionReviewVersions=v1
// +kubebuilder:webhook:path=/validate-vcoil-io-v2-addresspool,mutating=false,failurePolicy=fail,sideEffects=None,groups=vcoil.io,resources=addresspools,verbs=create;update,versions=v2,name=vaddresspool.vcoil.io,admissionReviewVersions=v1

// SetupWithManager registers both webhooks with the manager's webhook server.
func (w *AddressPoolWebhook) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewWebhookManagedBy(mgr, &vcoilv2.AddressPool{}).
		WithDefaulter(w).
		WithValidator(w).
		Complete()
}

// Default writes subnets in canonical text (an IPv6 address as
// "fd01:203::", not "FD01:0203::"), so that equal subnets compare equal on
// later updates. Text that does not parse is left for validation to reject.
//
// An empty usage becomes Pods, what it meant before the field existed (the
// schema default does the same; this covers an object written without it).
func (w *AddressPoolWebhook) Default(_ context.Context, pool *vcoilv2.AddressPool) error {
	if pool.Spec.Usage == "" {
		pool.Spec.Usage = vcoilv2.UsagePods
	}
	for i := range pool.Spec.Subnets {
		for _, s := range []*string{pool.Spec.Subnets[i].IPv4, pool.Spec.Subnets[i].IPv6} {
			if s == nil {
				continue
			}
			if p, err := netip.ParsePrefix(*s); err == nil && p.Addr().Zone() == "" {
				*s = p.String()
			}
		}
	}
	return nil
}

// ValidateCreate checks a new pool on its own and against the other pools.
func (w *AddressPoolWebhook) ValidateCreate(ctx context.Context, pool *vcoilv2.AddressPool) (admission.Warnings, error) {
	errs, err := w.validate(ctx, pool)
	if err != nil {
		return nil, err
	}
	return nil, invalid(pool, errs)
}

// ValidateUpdate also keeps the usage, blockSizeBits (of a Pods pool) and the
// existing subnet entries as they are: blocks already carved, and addresses
// already given to Services, must stay inside the pool. Updates that leave the
// spec alone (finalizers, labels) always pass.
func (w *AddressPoolWebhook) ValidateUpdate(ctx context.Context, old, pool *vcoilv2.AddressPool) (admission.Warnings, error) {
	if equality.Semantic.DeepEqual(old.Spec, pool.Spec) {
		return nil, nil
	}
	spec := field.NewPath("spec")
	var errs field.ErrorList
	if was, is := usageOf(old), usageOf(pool); was != is {
		errs = append(errs, field.Forbidden(spec.Child("usage"),
			fmt.Sprintf("is immutable (was %s, now %s): the pool's addresses may already be given; create another pool instead", was, is)))
	}
	if !pool.Spec.IsLoadBalancer() && pool.Spec.BlockSizeBits != old.Spec.BlockSizeBits {
		errs = append(errs, field.Forbidden(spec.Child("blockSizeBits"),
			fmt.Sprintf("is immutable: blocks of 2^%d addresses are already carved", old.Spec.BlockSizeBits)))
	}
	if len(pool.Spec.Subnets) < len(old.Spec.Subnets) {
		errs = append(errs, field.Forbidden(spec.Child("subnets"),
			fmt.Sprintf("cannot shrink from %d to %d entries: entries may only be appended", len(old.Spec.Subnets), len(pool.Spec.Subnets))))
	}
	for i := 0; i < min(len(old.Spec.Subnets), len(pool.Spec.Subnets)); i++ {
		if !equality.Semantic.DeepEqual(old.Spec.Subnets[i], pool.Spec.Subnets[i]) {
			errs = append(errs, field.Forbidden(spec.Child("subnets").Index(i),
				fmt.Sprintf("existing entries cannot change (was %s): entries may only be appended", subnetText(old.Spec.Subnets[i]))))
		}
	}
	more, err := w.validate(ctx, pool)
	if err != nil {
		return nil, err
	}
	return nil, invalid(pool, append(errs, more...))
}

// ValidateDelete allows every deletion: the finalizer keeps the pool until
// its blocks are gone.
func (w *AddressPoolWebhook) ValidateDelete(context.Context, *vcoilv2.AddressPool) (admission.Warnings, error) {
	return nil, nil
}

var fieldIndex = regexp.MustCompile(`^subnets\[(\d+)\](?:\.(ipv4|ipv6))?$`)

func (w *AddressPoolWebhook) validate(ctx context.Context, pool *vcoilv2.AddressPool) (field.ErrorList, error) {
	spec := field.NewPath("spec")
	var errs field.ErrorList
	subnets, perrs := poolSubnets(pool)
	for _, e := range perrs {
		errs = append(errs, fieldError(spec, pool, e))
	}
	switch {
	case pool.Name == vcoilv2.DefaultPool && pool.Spec.IsLoadBalancer():
		errs = append(errs, field.Invalid(spec.Child("usage"), pool.Spec.Usage,
			fmt.Sprintf("the pool named %q gives pods and node subnets their addresses: its usage must be %s",
				vcoilv2.DefaultPool, vcoilv2.UsagePods)))
	case pool.Name == vcoilv2.DefaultPool && pool.Spec.BlockSizeBits < ipam.MinNodeSubnetBits:
		errs = append(errs, field.Invalid(spec.Child("blockSizeBits"), pool.Spec.BlockSizeBits,
			fmt.Sprintf("the pool named %q gives node subnets, which need blocks of at least %d addresses (blockSizeBits >= %d)",
				vcoilv2.DefaultPool, 1<<ipam.MinNodeSubnetBits, ipam.MinNodeSubnetBits)))
	}
	if len(perrs) > 0 {
		return errs, nil
	}

	others := &vcoilv2.AddressPoolList{}
	if err := w.Client.List(ctx, others); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("list address pools to check overlaps: %w", err))
	}
	for i := range others.Items {
		o := &others.Items[i]
		if o.Name == pool.Name {
			continue
		}
		theirs, oerrs := poolSubnets(o)
		if oerrs != nil {
			continue
		}
		// Pool.Overlaps looks at the subnets only, which is what both
		// usages share.
		mine, other := ipam.Pool{Subnets: subnets}, ipam.Pool{Subnets: theirs}
		if idx, fam, with, hit := mine.Overlaps(other); hit {
			errs = append(errs, field.Invalid(spec.Child("subnets").Index(idx).Child(fam), subnetValue(pool, idx, fam),
				fmt.Sprintf("overlaps %s of address pool %q (usage %s): no two pools may share addresses", with, o.Name, usageOf(o))))
		}
	}
	return errs, nil
}

// fieldError turns an ipam error into a field error under spec, carrying the
// offending value where there is one.
func fieldError(spec *field.Path, pool *vcoilv2.AddressPool, e *ipam.FieldError) *field.Error {
	switch {
	case e.Field == "blockSizeBits":
		return field.Invalid(spec.Child("blockSizeBits"), pool.Spec.BlockSizeBits, e.Reason)
	case e.Field == "subnets":
		return field.Required(spec.Child("subnets"), e.Reason)
	}
	m := fieldIndex.FindStringSubmatch(e.Field)
	if m == nil {
		return field.Invalid(spec.Child(e.Field), nil, e.Reason)
	}
	i, _ := strconv.Atoi(m[1])
	p := spec.Child("subnets").Index(i)
	if m[2] == "" {
		return field.Invalid(p, subnetText(pool.Spec.Subnets[i]), e.Reason)
	}
	return field.Invalid(p.Child(m[2]), subnetValue(pool, i, m[2]), e.Reason)
}

func subnetValue(pool *vcoilv2.AddressPool, i int, family string) string {
	s := pool.Spec.Subnets[i].IPv4
	if family == "ipv6" {
		s = pool.Spec.Subnets[i].IPv6
	}
	if s == nil {
		return ""
	}
	return *s
}

func subnetText(s vcoilv2.SubnetSet) string {
	v4, v6 := "-", "-"
	if s.IPv4 != nil {
		v4 = *s.IPv4
	}
	if s.IPv6 != nil {
		v6 = *s.IPv6
	}
	return fmt.Sprintf("ipv4 %s, ipv6 %s", v4, v6)
}

func invalid(pool *vcoilv2.AddressPool, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(vcoilv2.GroupVersion.WithKind("AddressPool").GroupKind(), pool.Name, errs)
}
