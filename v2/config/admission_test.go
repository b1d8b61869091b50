// The admission tests run vcoil's ValidatingAdmissionPolicies, as the
// default overlay renders them, in a real apiserver (envtest), and send the
// requests vcoil's programs and users send, as those users.
package config_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/testenv"
)

// The package's tests share one apiserver, started by the first test that
// needs it (the render tests need none).
var shared struct {
	once sync.Once
	env  *testenv.Env
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		if err := shared.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the apiserver:", err)
		}
	}
	os.Exit(code)
}

// admissionEnv is an apiserver holding vcoil's CRDs, the RBAC objects and
// the admission policies of the default overlay.
func admissionEnv(t *testing.T) *testenv.Env {
	t.Helper()
	shared.once.Do(func() {
		shared.env, shared.err = testenv.Start(testenv.Options{})
		if shared.err == nil {
			shared.err = installPolicies(context.Background(), shared.env)
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.env
}

// installPolicies creates the default overlay's RBAC objects, policies and
// bindings. The apiserver loads policies asynchronously: each test waits
// for a first refusal. (Type-checking status comes from
// kube-controller-manager, which envtest does not run: a rule that does not
// type-check shows as a refusal with an evaluation error instead of the
// policy's message, which the tests check.)
func installPolicies(ctx context.Context, e *testenv.Env) error {
	if err := testenv.ApplyRBAC(ctx, e.Client, "default"); err != nil {
		return err
	}
	objs, err := testenv.Render("default")
	if err != nil {
		return err
	}
	policies := 0
	for _, o := range objs {
		switch o.GetKind() {
		case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			if err := e.Client.Create(ctx, o); err != nil {
				return fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
			}
			if o.GetKind() == "ValidatingAdmissionPolicy" {
				policies++
			}
		}
	}
	if policies == 0 {
		return fmt.Errorf("the default overlay has no ValidatingAdmissionPolicy")
	}
	return nil
}

// as is a client that impersonates a user: the apiserver authorizes and
// admits its requests as that user's, with extra as the user's extra
// authentication information (what a bound token's claims give).
func as(t *testing.T, e *testenv.Env, user string, groups []string, extra map[string][]string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups, Extra: extra}
	c, err := client.New(cfg, client.Options{Scheme: e.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serviceAccount impersonates the ServiceAccount of the default overlay
// named name (in kube-system), on node ("" for a token bound to no pod).
func serviceAccount(t *testing.T, e *testenv.Env, name, node string) client.Client {
	t.Helper()
	var extra map[string][]string
	if node != "" {
		extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	return as(t, e, "system:serviceaccount:kube-system:"+name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}, extra)
}

// byPolicy tells a policy's refusal from RBAC's.
func byPolicy(err error) bool {
	return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy")
}

// refused checks that err is an admission policy's refusal of kind
// (Forbidden or Invalid) whose message holds every one of parts.
func refused(t *testing.T, what string, err error, forbidden bool, parts ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: admitted, want refused", what)
		return
	}
	if !byPolicy(err) || forbidden && !apierrors.IsForbidden(err) || !forbidden && !apierrors.IsInvalid(err) {
		t.Errorf("%s: %v, want a refusal (forbidden %v)", what, err, forbidden)
		return
	}
	t.Logf("%s: %v", what, err)
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want a message holding %q", what, err, p)
		}
	}
}

func admitted(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want admitted", what, err)
	}
}

// namespace creates a namespace with annotations.
func namespace(t *testing.T, e *testenv.Env, annotations map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "admission-", Annotations: annotations}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// grantPods lets user create, read and update pods of namespace ns, as a
// namespace's own users may.
func grantPods(t *testing.T, e *testenv.Env, ns, user string) {
	t.Helper()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"},
			Verbs: []string{"create", "get", "update", "patch"}}},
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pods-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: user}},
	}
	for _, o := range []client.Object{role, rb} {
		if err := e.Client.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}
