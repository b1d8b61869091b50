package config_test

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnpv1alpha2 "sigs.k8s.io/network-policy-api/apis/v1alpha2"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// TestClusterNetworkPolicyCRDServesBothVersions: the ClusterNetworkPolicy
// CRD of vcoil's manifests, in a real apiserver, stores a v1beta1 policy
// that reads back the same as v1beta1 and as v1alpha2, and refuses what the
// API's validation refuses (a priority out of range, a rule without
// peers), so that vcoild never sees such a policy.
func TestClusterNetworkPolicyCRDServesBothVersions(t *testing.T) {
	env := admissionEnv(t)
	ctx := context.Background()
	deny := cnpv1beta1.ClusterNetworkPolicyRuleActionDeny
	p := &cnpv1beta1.ClusterNetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-metadata"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{
			Tier: cnpv1beta1.AdminTier, Priority: 10,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{
				Name: "metadata", Action: deny,
				To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1beta1.CIDR{"169.254.169.254/32"}}},
			}},
		},
	}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatalf("create a v1beta1 ClusterNetworkPolicy: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, p) })

	var b cnpv1beta1.ClusterNetworkPolicy
	if err := env.Client.Get(ctx, client.ObjectKey{Name: p.Name}, &b); err != nil {
		t.Fatal(err)
	}
	if b.Spec.Tier != cnpv1beta1.AdminTier || b.Spec.Priority != 10 || len(b.Spec.Egress) != 1 ||
		b.Spec.Egress[0].Action != deny || len(b.Spec.Egress[0].To) != 1 || b.Spec.Egress[0].To[0].Networks[0] != "169.254.169.254/32" {
		t.Errorf("v1beta1 read back as %+v", b.Spec)
	}
	var a cnpv1alpha2.ClusterNetworkPolicy
	if err := env.Client.Get(ctx, client.ObjectKey{Name: p.Name}, &a); err != nil {
		t.Fatalf("read as v1alpha2: %v", err)
	}
	if string(a.Spec.Tier) != "Admin" || a.Spec.Priority != 10 || len(a.Spec.Egress) != 1 || string(a.Spec.Egress[0].Action) != "Deny" {
		t.Errorf("v1alpha2 read back as %+v", a.Spec)
	}

	for name, mutate := range map[string]func(*cnpv1beta1.ClusterNetworkPolicy){
		"a priority above 1000": func(q *cnpv1beta1.ClusterNetworkPolicy) { q.Spec.Priority = 1001 },
		"an unknown tier":       func(q *cnpv1beta1.ClusterNetworkPolicy) { q.Spec.Tier = "Developer" },
		"an egress rule without peers": func(q *cnpv1beta1.ClusterNetworkPolicy) {
			q.Spec.Egress[0].To = nil
		},
	} {
		q := p.DeepCopy()
		q.ObjectMeta = metav1.ObjectMeta{Name: "bad"}
		mutate(q)
		err := env.Client.Create(ctx, q)
		if err == nil {
			_ = env.Client.Delete(ctx, q)
			t.Errorf("%s: created, want refused", name)
		} else if !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want an Invalid error", name, err)
		}
	}
}
