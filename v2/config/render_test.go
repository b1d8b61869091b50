// The tests render every kustomization of the package.
package config_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// decode finds the rendered object of kind and name and decodes it into out.
func decode(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	if err := testenv.Find(objs, kind, name, out); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultOverlayRenders(t *testing.T) {
	m, err := testenv.Render("default")
	if err != nil {
		t.Fatal(err)
	}

	for _, name := range []string{"addresspools.vcoil.io", "addressblocks.vcoil.io", "blockrequests.vcoil.io"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		decode(t, m, "CustomResourceDefinition", name, crd)
		if crd.Spec.Scope != apiextensionsv1.ClusterScoped || crd.Spec.Group != "vcoil.io" || crd.Spec.Versions[0].Name != "v2" {
			t.Errorf("CRD %s: scope %s group %s version %s", name, crd.Spec.Scope, crd.Spec.Group, crd.Spec.Versions[0].Name)
		}
		if len(crd.Spec.Versions[0].AdditionalPrinterColumns) < 3 {
			t.Errorf("CRD %s has no printer columns", name)
		}
	}

	dep := &appsv1.Deployment{}
	decode(t, m, "Deployment", "vcoil-controller", dep)
	if dep.Namespace != "kube-system" || *dep.Spec.Replicas != 2 || dep.Spec.Template.Spec.ServiceAccountName != "vcoil-controller" {
		t.Errorf("deployment: namespace %s replicas %d service account %s", dep.Namespace, *dep.Spec.Replicas, dep.Spec.Template.Spec.ServiceAccountName)
	}
	args := strings.Join(dep.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--leader-elect") {
		t.Errorf("deployment args %q lack --leader-elect", args)
	}

	ds := &appsv1.DaemonSet{}
	decode(t, m, "DaemonSet", "vcoil-daemon", ds)
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.ServiceAccountName != "vcoil-daemon" || len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("daemonset: hostNetwork %v, service account %s, %d init containers", spec.HostNetwork, spec.ServiceAccountName, len(spec.InitContainers))
	}
	vcoild := spec.Containers[0]
	if vcoild.SecurityContext == nil || vcoild.SecurityContext.Privileged == nil || !*vcoild.SecurityContext.Privileged {
		t.Error("vcoild is not privileged")
	}
	if len(vcoild.Env) == 0 || vcoild.Env[0].Name != "NODE_NAME" || vcoild.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("vcoild env = %+v, want NODE_NAME from spec.nodeName", vcoild.Env)
	}
	if got := strings.Join(spec.InitContainers[0].Command, " "); got != "/vcoild install-cni" {
		t.Errorf("init container runs %q", got)
	}
	mounts := map[string]string{}
	for _, m := range vcoild.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for _, p := range []string{"/run", "/var/lib/vcoil", "/var/run/netns"} {
		if mounts[p] == "" {
			t.Errorf("vcoild does not mount %s", p)
		}
	}
	dcr := &rbacv1.ClusterRole{}
	decode(t, m, "ClusterRole", "vcoil-daemon", dcr)

	// The names vcoil-controller patches and reads must be the rendered ones.
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	decode(t, m, "MutatingWebhookConfiguration", constants.MutatingWebhookConfig, mwc)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	decode(t, m, "ValidatingWebhookConfiguration", constants.ValidatingWebhookConfig, vwc)
	for _, svc := range []*admissionregistrationv1.ServiceReference{mwc.Webhooks[0].ClientConfig.Service, vwc.Webhooks[0].ClientConfig.Service} {
		if svc.Name != constants.WebhookService || svc.Namespace != "kube-system" {
			t.Errorf("webhook service = %s/%s, want kube-system/%s", svc.Namespace, svc.Name, constants.WebhookService)
		}
	}
	svc := &corev1.Service{}
	decode(t, m, "Service", constants.WebhookService, svc)
	if svc.Spec.Selector["app.kubernetes.io/name"] != dep.Spec.Template.Labels["app.kubernetes.io/name"] {
		t.Errorf("webhook service selects %v, deployment pods are labelled %v", svc.Spec.Selector, dep.Spec.Template.Labels)
	}

	// Least privilege: no wildcards, and the namespaced objects it writes
	// are limited to their names.
	cr := &rbacv1.ClusterRole{}
	decode(t, m, "ClusterRole", "vcoil-controller", cr)
	role := &rbacv1.Role{}
	decode(t, m, "Role", "vcoil-controller", role)
	for _, rule := range append(append(cr.Rules, role.Rules...), dcr.Rules...) {
		for _, list := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs} {
			if slices.Contains(list, "*") {
				t.Errorf("wildcard in rule %+v", rule)
			}
		}
		if slices.Contains(rule.Resources, "secrets") && slices.Contains(rule.Verbs, "get") &&
			!slices.Equal(rule.ResourceNames, []string{constants.WebhookCertSecret}) {
			t.Errorf("secrets readable beyond %s: %+v", constants.WebhookCertSecret, rule)
		}
		if slices.Contains(rule.Resources, "leases") && slices.Contains(rule.Verbs, "update") &&
			!slices.Equal(rule.ResourceNames, []string{constants.ControllerLeaderElectionID}) {
			t.Errorf("leases writable beyond %s: %+v", constants.ControllerLeaderElectionID, rule)
		}
		if slices.Contains(rule.Resources, "validatingwebhookconfigurations") &&
			!slices.Equal(rule.ResourceNames, []string{constants.MutatingWebhookConfig, constants.ValidatingWebhookConfig}) {
			t.Errorf("webhook configurations writable beyond vcoil's: %+v", rule)
		}
	}
	if role.Namespace != "kube-system" {
		t.Errorf("role namespace = %s", role.Namespace)
	}

	// The routers' role has the name vcoil-controller binds (and may bind:
	// it holds bind on that name, not the role's rights).
	egressRole := &rbacv1.ClusterRole{}
	decode(t, m, "ClusterRole", constants.EgressClusterRole, egressRole)
	if len(egressRole.Rules) != 2 {
		t.Errorf("ClusterRole %s has %d rules, want pods and egresses (read only)", egressRole.Name, len(egressRole.Rules))
	}
	for _, rule := range egressRole.Rules {
		if !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
			t.Errorf("ClusterRole %s may do more than read: %+v", egressRole.Name, rule)
		}
	}
	canBind := false
	for _, rule := range cr.Rules {
		if slices.Contains(rule.Resources, "clusterroles") && slices.Contains(rule.Verbs, "bind") &&
			slices.Equal(rule.ResourceNames, []string{constants.EgressClusterRole}) {
			canBind = true
		}
		if slices.Contains(rule.Resources, "pods") {
			t.Errorf("vcoil-controller holds rights on pods: %+v", rule)
		}
	}
	if !canBind {
		t.Errorf("vcoil-controller cannot bind ClusterRole %s", constants.EgressClusterRole)
	}
}

// On VPP nodes the conflist gives vcoil the portMappings capability instead
// of chaining portmap: install-cni runs with --dataplane=vpp where vcoild
// does, and only there.
func TestVPPOverlaysWriteAConflistWhereVcoilServesHostPorts(t *testing.T) {
	for _, tc := range []struct {
		overlay string
		daemons map[string]string // DaemonSet: the dataplane of its install-cni
	}{
		{"overlays/vpp", map[string]string{"vcoil-daemon": "vpp"}},
		{"overlays/lab-vpp", map[string]string{"vcoil-daemon": "linux", "vcoil-daemon-vpp": "vpp"}},
	} {
		t.Run(tc.overlay, func(t *testing.T) {
			m, err := testenv.Render(tc.overlay)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range tc.daemons {
				ds := &appsv1.DaemonSet{}
				decode(t, m, "DaemonSet", name, ds)
				spec := ds.Spec.Template.Spec
				got := "linux" // install-cni's default
				for _, a := range spec.InitContainers[0].Args {
					if v, ok := strings.CutPrefix(a, "--dataplane="); ok {
						got = v
					}
				}
				vcoild := "linux"
				for _, a := range spec.Containers[0].Args {
					if v, ok := strings.CutPrefix(a, "--dataplane="); ok {
						vcoild = v
					}
				}
				if got != want || vcoild != want {
					t.Errorf("DaemonSet %s: install-cni for dataplane %s, vcoild %s; want %s for both", name, got, vcoild, want)
				}
			}
		})
	}
}

// The admission policies name vcoil's ServiceAccounts in CEL, which
// kustomize does not rewrite: the names must be the rendered ones.
func TestAdmissionPoliciesNameTheRenderedServiceAccounts(t *testing.T) {
	m, err := testenv.Render("default")
	if err != nil {
		t.Fatal(err)
	}
	accounts := map[string]bool{}
	for _, o := range m {
		if o.GetKind() == "ServiceAccount" {
			accounts["system:serviceaccount:"+o.GetNamespace()+":"+o.GetName()] = true
		}
	}
	named := regexp.MustCompile(`'(system:serviceaccount:[^']*)'`)
	policies := map[string]bool{}
	for _, o := range m {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy":
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{}
			decode(t, m, o.GetKind(), o.GetName(), p)
			policies[p.Name] = true
			if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("policy %s does not fail closed", p.Name)
			}
			for _, c := range p.Spec.MatchConditions {
				for _, sub := range named.FindAllStringSubmatch(c.Expression, -1) {
					if !accounts[sub[1]] {
						t.Errorf("policy %s names %s, which the manifests do not make (they make %v)", p.Name, sub[1], accounts)
					}
				}
			}
		}
	}
	for _, o := range m {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			decode(t, m, o.GetKind(), o.GetName(), b)
			if !policies[b.Spec.PolicyName] || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
				t.Errorf("binding %s: policy %s (rendered: %v), actions %v", b.Name, b.Spec.PolicyName, policies, b.Spec.ValidationActions)
			}
			delete(policies, b.Spec.PolicyName)
		}
	}
	if len(policies) != 0 {
		t.Errorf("policies without a binding: %v", policies)
	}
}
