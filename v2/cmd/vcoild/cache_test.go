package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
)

// vcoild caches every PodEndpoint, NetworkPolicy and Namespace of the
// cluster: its cache keeps none of their managed fields (nor those of the
// types it trims itself), which the apiserver sends with each.
func TestManagerCachesNoManagedFields(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme, err := kubescheme.New()
	if err != nil {
		t.Fatal(err)
	}
	f := flags{nodeName: "cache-node", metricsAddr: "0", healthAddr: "0"}
	f.policies.enabled = true
	mgr, err := f.newManager(env.Config, scheme, true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "managed-fields"}}
	objects := []client.Object{
		ns,
		&networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "deny"},
			Spec:       networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}},
		},
		&vcoilv2.PodEndpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "peer", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: "peer", UID: "0b9c4a1e-3d52-4c8e-9a57-5f6e0d3b2a10", BlockOwnerDeletion: ptr.To(false),
			}}},
			Spec: vcoilv2.PodEndpointSpec{PodUID: "0b9c4a1e-3d52-4c8e-9a57-5f6e0d3b2a10", NodeName: "other-node", Addresses: []string{"198.18.64.3"}},
		},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "local", Labels: map[string]string{"app": "x"}},
			Spec:       corev1.PodSpec{NodeName: f.nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "svc"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
		},
	}
	for _, o := range objects {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
		if len(o.GetManagedFields()) == 0 {
			t.Fatalf("the apiserver returned %T %s without managed fields: the test shows nothing", o, o.GetName())
		}
	}
	defer func() {
		for _, o := range objects[1:] {
			_ = env.Client.Delete(context.Background(), o, client.GracePeriodSeconds(0))
		}
		_ = env.Client.Delete(context.Background(), ns)
	}()
	for _, o := range objects {
		cached := o.DeepCopyObject().(client.Object)
		poll.Eventually(t, 20*time.Second, func() error {
			return mgr.GetCache().Get(ctx, client.ObjectKeyFromObject(o), cached)
		})
		if mf := cached.GetManagedFields(); len(mf) > 0 {
			t.Errorf("the cache keeps %d managed fields entries of %T %s", len(mf), o, o.GetName())
		}
	}
}
