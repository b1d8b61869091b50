package config_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/controllers"
	"github.com/vcoil/vcoil/v2/internal/controllertest"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// vcoil-controller may create Deployments, Services, PodDisruptionBudgets
// and ServiceAccounts in every namespace (an Egress may be anywhere):
// admission narrows that to the Egress routers' objects. The Egress
// reconciler, run as vcoil-controller with the manifests' RBAC, makes its
// objects; other writes are refused.
func TestVcoilControllerWritesOnlyEgressRoutersObjects(t *testing.T) {
	e := admissionEnv(t)
	ctx := context.Background()
	ctrlClient := serviceAccount(t, e, "vcoil-controller", "")
	ns := namespace(t, e, nil)
	foreign := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", Labels: map[string]string{"app": "x"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/app:1"}}},
			},
		},
	}

	// In force once a ServiceAccount of another name is refused.
	poll.Eventually(t, 30*time.Second, func() error {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "powerful"}}
		err := ctrlClient.Create(ctx, sa)
		if err == nil {
			if err := e.Client.Delete(ctx, sa); err != nil {
				return poll.Stop(err)
			}
			return errors.New("vcoil-controller created a ServiceAccount that is not the routers'")
		}
		if !byPolicy(err) {
			return poll.Stop(err)
		}
		refused(t, "a ServiceAccount of another name", err, true, "Egress routers' objects", "powerful")
		return nil
	})
	refused(t, "a Deployment of its own", ctrlClient.Create(ctx, foreign.DeepCopy()), true, "Egress routers' objects", "app")

	// Taking over a user's Deployment: relabelled and owned by an Egress.
	if err := e.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	takeover := foreign.DeepCopy()
	patch := client.MergeFrom(foreign.DeepCopy())
	takeover.Labels = map[string]string{"app.kubernetes.io/name": "vcoil-egress"}
	takeover.OwnerReferences = []metav1.OwnerReference{{APIVersion: "vcoil.io/v2", Kind: "Egress", Name: "x", UID: "1", Controller: ptr.To(true)}}
	takeover.Spec.Template.Spec.ServiceAccountName = "vcoil-egress"
	takeover.Spec.Template.Spec.AutomountServiceAccountToken = ptr.To(false)
	refused(t, "a user's Deployment taken over", ctrlClient.Patch(ctx, takeover, patch), true, "does not take over", "app")

	// A router Deployment whose pods would run as another ServiceAccount.
	other := takeover.DeepCopy()
	other.ResourceVersion, other.Name = "", "router"
	other.Spec.Template.Spec.ServiceAccountName = "default"
	refused(t, "router pods of another ServiceAccount", ctrlClient.Create(ctx, other), true, "must run as ServiceAccount vcoil-egress")
	other.Spec.Template.Spec.ServiceAccountName = "vcoil-egress"
	other.Spec.Template.Spec.AutomountServiceAccountToken = nil
	refused(t, "router pods with the token mounted", ctrlClient.Create(ctx, other), true, "automountServiceAccountToken false")

	// The reconciler, as vcoil-controller, makes an Egress's objects.
	runEgressControllerAs(t, e.Config)
	eg := &vcoilv2.Egress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nat"},
		Spec: vcoilv2.EgressSpec{
			Destinations:        []string{"203.0.113.0/24"},
			PodDisruptionBudget: &vcoilv2.EgressPDBSpec{MinAvailable: ptr.To(intstr.FromInt32(1))},
		},
	}
	if err := e.Client.Create(ctx, eg); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, func() error {
		for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
			if err := e.Client.Get(ctx, client.ObjectKeyFromObject(eg), o); err != nil {
				return fmt.Errorf("%T of the Egress: %w", o, err)
			}
		}
		return e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vcoil-egress"}, &corev1.ServiceAccount{})
	})
	// The last Egress of the namespace takes the ServiceAccount with it.
	if err := e.Client.Delete(ctx, eg); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 30*time.Second, func() error {
		err := e.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vcoil-egress"}, &corev1.ServiceAccount{})
		if err == nil {
			return errors.New("the routers' ServiceAccount outlived the namespace's last Egress")
		}
		return client.IgnoreNotFound(err)
	})
}

// runEgressControllerAs runs vcoil-controller's reconcilers, the Egress's
// included, as vcoil-controller (admin impersonating it), until the test
// ends.
func runEgressControllerAs(t *testing.T, admin *rest.Config) {
	t.Helper()
	e := *shared.env
	e.Config = rest.CopyConfig(admin)
	e.Config.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:kube-system:vcoil-controller",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
	mgr, err := controllertest.NewManager(&e)
	if err != nil {
		t.Fatal(err)
	}
	m, err := controllers.NewPoolMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.Setup(mgr, controllers.Options{
		NodeGCInterval: time.Hour, BlockRequestConcurrency: 1, Metrics: m,
		Egress: controllers.EgressOptions{Enabled: true, Image: "registry.example/vcoil:test"},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
}
