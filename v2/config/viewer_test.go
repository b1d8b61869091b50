package config_test

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/vcoil/vcoil/v2/internal/testenv"
)

// The viewer's RBAC gives kubectl-vcoil's users reads of what the verbs
// show and a port-forward to vcoild's pods in vcoil's namespace only.
func TestViewerRBACRenders(t *testing.T) {
	m, err := testenv.Render("viewer")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 {
		t.Errorf("viewer renders %d objects, want the ClusterRole and the Role", len(m))
	}
	cr := &rbacv1.ClusterRole{}
	decode(t, m, "ClusterRole", "vcoil-viewer", cr)
	allows := func(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
		return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
		})
	}
	for _, want := range []struct{ group, resource string }{
		{"vcoil.io", "addresspools"}, {"vcoil.io", "addressblocks"}, {"", "pods"}, {"", "services"}, {"", "nodes"},
	} {
		for _, verb := range []string{"get", "list"} {
			if !allows(cr.Rules, want.group, want.resource, verb) {
				t.Errorf("ClusterRole vcoil-viewer does not allow %s on %s/%s", verb, want.group, want.resource)
			}
		}
	}
	for _, r := range cr.Rules {
		for _, v := range r.Verbs {
			if !slices.Contains([]string{"get", "list", "watch"}, v) {
				t.Errorf("ClusterRole vcoil-viewer allows %s on %v: it must only read", v, r.Resources)
			}
		}
		if slices.Contains(r.Resources, "pods/portforward") || slices.Contains(r.Resources, "*") {
			t.Errorf("ClusterRole vcoil-viewer allows %v cluster-wide", r.Resources)
		}
	}
	role := &rbacv1.Role{}
	decode(t, m, "Role", "vcoil-viewer", role)
	if role.Namespace != "kube-system" {
		t.Errorf("Role vcoil-viewer is in namespace %q, want kube-system (vcoild's)", role.Namespace)
	}
	for _, verb := range []string{"get", "create"} {
		if !allows(role.Rules, "", "pods/portforward", verb) {
			t.Errorf("Role vcoil-viewer does not allow %s on pods/portforward", verb)
		}
	}
	if !allows(role.Rules, "", "pods", "list") {
		t.Error("Role vcoil-viewer does not allow listing the vcoild pods")
	}
}
