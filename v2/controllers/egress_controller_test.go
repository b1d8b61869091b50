package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/constants"
)

const testRouterImage = "registry.example/vcoil:test"

// startEgressController runs a vcoil-controller with the Egress reconciler,
// and removes every Egress and the routers' ClusterRoleBinding after it
// stopped (envtest has no garbage collector; the owned objects stay in the
// test's own namespaces).
func startEgressController(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		var list vcoilv2.EgressList
		if err := env.Client.List(ctx, &list); err != nil {
			t.Errorf("list egresses: %v", err)
		}
		for i := range list.Items {
			_ = env.Client.Delete(ctx, &list.Items[i])
		}
		_ = env.Client.Delete(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: constants.EgressClusterRoleBinding}})
	})
	runController(t, Options{
		NodeGCInterval:          time.Hour,
		BlockRequestConcurrency: 1,
		Egress:                  EgressOptions{Enabled: true, Image: testRouterImage},
	})
}

// testNamespace creates a namespace of its own for a test. envtest never
// finishes deleting namespaces, so they are left behind.
func testNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "egress-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func egressObject(ns, name string, dests ...string) *vcoilv2.Egress {
	return &vcoilv2.Egress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       vcoilv2.EgressSpec{Destinations: dests},
	}
}

func createEgress(t *testing.T, eg *vcoilv2.Egress) *vcoilv2.Egress {
	t.Helper()
	if err := env.Client.Create(context.Background(), eg); err != nil {
		t.Fatalf("create egress %s/%s: %v", eg.Namespace, eg.Name, err)
	}
	return eg
}

// updateEgress reads the Egress, changes it and writes it back.
func updateEgress(t *testing.T, key client.ObjectKey, mutate func(*vcoilv2.Egress)) *vcoilv2.Egress {
	t.Helper()
	eg := &vcoilv2.Egress{}
	poll.Eventually(t, 10*time.Second, func() error {
		if err := env.Client.Get(context.Background(), key, eg); err != nil {
			return err
		}
		mutate(eg)
		return env.Client.Update(context.Background(), eg)
	})
	return eg
}

// waitFor polls until the object of key exists and check accepts it.
func waitFor[T client.Object](t *testing.T, key client.ObjectKey, obj T, check func(T) error) T {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(context.Background(), key, obj); err != nil {
			return err
		}
		return check(obj)
	})
	return obj
}

func waitGone(t *testing.T, key client.ObjectKey, obj client.Object) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		err := env.Client.Get(context.Background(), key, obj)
		if err == nil {
			return fmt.Errorf("%T %s still exists", obj, key)
		}
		return client.IgnoreNotFound(err)
	})
}

// wantControlledBy checks the object's one owner reference: the Egress, as
// its controller.
func wantControlledBy(t *testing.T, obj client.Object, eg *vcoilv2.Egress) {
	t.Helper()
	want := []metav1.OwnerReference{{
		APIVersion: "vcoil.io/v2", Kind: "Egress", Name: eg.Name, UID: eg.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}
	if got := obj.GetOwnerReferences(); !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("%T %s: owner references %+v, want %+v", obj, obj.GetName(), got, want)
	}
}

func routerLabels(name string) map[string]string {
	return map[string]string{
		vcoilv2.LabelEgress:          name,
		"app.kubernetes.io/name":     "vcoil-egress",
		"app.kubernetes.io/instance": name,
	}
}

func TestEgressGetsItsRouterDeploymentServiceBudgetAndRights(t *testing.T) {
	startEgressController(t)
	ns := testNamespace(t)

	eg := egressObject(ns, "nat", "203.0.113.0/24", "2001:db8::/32")
	eg.Spec.Replicas = ptr.To[int32](2)
	eg.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](600)}}
	eg.Spec.PodDisruptionBudget = &vcoilv2.EgressPDBSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))}
	eg.Spec.Template = &vcoilv2.EgressPodTemplate{
		Metadata: vcoilv2.EgressPodMetadata{
			Labels:      map[string]string{"team": "net", vcoilv2.LabelEgress: "not-this"},
			Annotations: map[string]string{"example.com/note": "routers"},
		},
		Spec: corev1.PodSpec{
			NodeSelector:      map[string]string{"example.com/egress": "true"},
			Tolerations:       []corev1.Toleration{{Key: "egress", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			PriorityClassName: "egress-critical",
			Volumes:           []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
			Containers: []corev1.Container{
				{
					Name: vcoilv2.EgressContainer,
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("100m"),
					}},
					Env: []corev1.EnvVar{
						{Name: "EXTRA", Value: "1"},
						{Name: "EGRESS_NAME", Value: "cannot-override"},
					},
					VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg"}},
				},
				{Name: "sidecar", Image: "registry.example/sidecar:1"},
			},
		},
	}
	createEgress(t, eg)
	key := client.ObjectKeyFromObject(eg)

	// The schema and the webhook filled the defaults.
	if eg.Spec.Encapsulation != vcoilv2.EncapsulationAuto || eg.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Errorf("defaults: encapsulation %q, session affinity %q", eg.Spec.Encapsulation, eg.Spec.SessionAffinity)
	}

	dep := waitFor(t, key, &appsv1.Deployment{}, func(*appsv1.Deployment) error { return nil })
	wantControlledBy(t, dep, eg)
	if !equality.Semantic.DeepEqual(dep.Labels, routerLabels("nat")) {
		t.Errorf("deployment labels %v", dep.Labels)
	}
	if *dep.Spec.Replicas != 2 || !equality.Semantic.DeepEqual(dep.Spec.Selector.MatchLabels, routerLabels("nat")) {
		t.Errorf("deployment replicas %d selector %v", *dep.Spec.Replicas, dep.Spec.Selector)
	}
	if s := dep.Spec.Strategy; s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate.MaxSurge.String() != "25%" || s.RollingUpdate.MaxUnavailable.String() != "25%" {
		t.Errorf("deployment strategy %+v", s)
	}
	tpl := dep.Spec.Template
	wantPodLabels := routerLabels("nat")
	wantPodLabels["team"] = "net"
	if !equality.Semantic.DeepEqual(tpl.Labels, wantPodLabels) {
		t.Errorf("pod labels %v, want %v (vcoil's label wins over the template's)", tpl.Labels, wantPodLabels)
	}
	if want := map[string]string{"example.com/note": "routers", "kubectl.kubernetes.io/default-container": "egress"}; !equality.Semantic.DeepEqual(tpl.Annotations, want) {
		t.Errorf("pod annotations %v, want %v", tpl.Annotations, want)
	}
	pod := tpl.Spec
	if pod.ServiceAccountName != "vcoil-egress" || pod.PriorityClassName != "egress-critical" || pod.HostNetwork ||
		pod.NodeSelector["example.com/egress"] != "true" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Key != "egress" ||
		len(pod.Volumes) != 2 || pod.Volumes[0].Name != "cfg" || pod.Volumes[1].Name != "vcoil-egress-token" {
		t.Errorf("pod spec: service account %q, priority class %q, host network %v, node selector %v, tolerations %+v, volumes %+v",
			pod.ServiceAccountName, pod.PriorityClassName, pod.HostNetwork, pod.NodeSelector, pod.Tolerations, pod.Volumes)
	}
	if len(pod.Containers) != 2 || pod.Containers[1].Name != "sidecar" || pod.Containers[1].Image != "registry.example/sidecar:1" {
		t.Fatalf("containers %+v, want egress then the sidecar", pod.Containers)
	}
	c := pod.Containers[0]
	if c.Name != "egress" || c.Image != testRouterImage || !slices.Equal(c.Command, []string{"/vcoil-egress"}) || len(c.Args) != 0 {
		t.Errorf("router container: name %s image %s command %v args %v", c.Name, c.Image, c.Command, c.Args)
	}
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}}}
	}
	wantEnv := []corev1.EnvVar{
		{Name: "EGRESS_NAMESPACE", Value: ns},
		{Name: "EGRESS_NAME", Value: "nat"},
		fieldEnv("POD_NAME", "metadata.name"),
		fieldEnv("POD_NAMESPACE", "metadata.namespace"),
		fieldEnv("POD_IP", "status.podIP"),
		{Name: "EXTRA", Value: "1"},
	}
	if !equality.Semantic.DeepEqual(c.Env, wantEnv) {
		t.Errorf("router env\n got %+v\nwant %+v", c.Env, wantEnv)
	}
	wantPorts := []corev1.ContainerPort{
		{Name: "metrics", ContainerPort: 8080, Protocol: corev1.ProtocolTCP},
		{Name: "health", ContainerPort: 8081, Protocol: corev1.ProtocolTCP},
	}
	if !equality.Semantic.DeepEqual(c.Ports, wantPorts) {
		t.Errorf("router ports %+v", c.Ports)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.IntValue() != 8081 {
		t.Errorf("router readiness probe %+v", p)
	}
	if c.SecurityContext == nil || !ptr.Deref(c.SecurityContext.Privileged, false) {
		t.Errorf("router security context %+v, want privileged", c.SecurityContext)
	}
	if q := c.Resources.Limits[corev1.ResourceCPU]; q.String() != "100m" {
		t.Errorf("router resources %+v, want the template's cpu limit", c.Resources)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].MountPath != "/cfg" ||
		!equality.Semantic.DeepEqual(c.VolumeMounts[1], corev1.VolumeMount{Name: "vcoil-egress-token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}) {
		t.Errorf("router volume mounts %+v", c.VolumeMounts)
	}

	svc := waitFor(t, key, &corev1.Service{}, func(*corev1.Service) error { return nil })
	wantControlledBy(t, svc, eg)
	wantSvcPorts := []corev1.ServicePort{
		{Name: "fou", Protocol: corev1.ProtocolUDP, Port: 5555, TargetPort: intstr.FromInt32(5555)},
		{Name: "vxlan", Protocol: corev1.ProtocolUDP, Port: 4789, TargetPort: intstr.FromInt32(4789)},
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || ptr.Deref(svc.Spec.IPFamilyPolicy, "") != corev1.IPFamilyPolicyPreferDualStack ||
		!equality.Semantic.DeepEqual(svc.Spec.Ports, wantSvcPorts) || !equality.Semantic.DeepEqual(svc.Spec.Selector, routerLabels("nat")) {
		t.Errorf("service spec %+v", svc.Spec)
	}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Errorf("service cluster IPs %v, want one per family (the apiserver is dual-stack)", svc.Spec.ClusterIPs)
	}
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || *svc.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != 600 {
		t.Errorf("service session affinity %s %+v", svc.Spec.SessionAffinity, svc.Spec.SessionAffinityConfig)
	}

	pdb := waitFor(t, key, &policyv1.PodDisruptionBudget{}, func(*policyv1.PodDisruptionBudget) error { return nil })
	wantControlledBy(t, pdb, eg)
	if pdb.Spec.MinAvailable != nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || !equality.Semantic.DeepEqual(pdb.Spec.Selector.MatchLabels, routerLabels("nat")) {
		t.Errorf("pdb spec %+v", pdb.Spec)
	}

	sa := waitFor(t, client.ObjectKey{Namespace: ns, Name: "vcoil-egress"}, &corev1.ServiceAccount{}, func(*corev1.ServiceAccount) error { return nil })
	if refs := sa.OwnerReferences; len(refs) != 1 || refs[0].UID != eg.UID || ptr.Deref(refs[0].Controller, false) {
		t.Errorf("service account owners %+v, want the Egress (not as controller: the namespace's Egresses share it)", refs)
	}
	crb := waitFor(t, client.ObjectKey{Name: "vcoil-egress"}, &rbacv1.ClusterRoleBinding{}, func(*rbacv1.ClusterRoleBinding) error { return nil })
	if want := (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "vcoil-egress"}); crb.RoleRef != want {
		t.Errorf("binding role %+v", crb.RoleRef)
	}
	if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "vcoil-egress", Namespace: ns}}; !equality.Semantic.DeepEqual(crb.Subjects, want) {
		t.Errorf("binding subjects %+v, want %+v", crb.Subjects, want)
	}

	// Status: the Deployment has no pods yet (envtest runs no
	// controller-manager).
	got := waitFor(t, key, &vcoilv2.Egress{}, func(e *vcoilv2.Egress) error {
		if e.Status.ObservedGeneration != e.Generation {
			return fmt.Errorf("status %+v not of generation %d", e.Status, e.Generation)
		}
		return nil
	})
	cond := meta.FindStatusCondition(got.Status.Conditions, EgressAvailable)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonNoRouterReady || cond.Message != "none of 2 routers is ready" {
		t.Errorf("Available condition %+v", cond)
	}
	if want := "app.kubernetes.io/instance=nat,app.kubernetes.io/name=vcoil-egress,vcoil.io/egress=nat"; got.Status.Selector != want {
		t.Errorf("status selector %q, want %q", got.Status.Selector, want)
	}
}

func TestEgressObjectsFollowTheSpecAndAreRepaired(t *testing.T) {
	startEgressController(t)
	ctx := context.Background()
	ns := testNamespace(t)
	eg := egressObject(ns, "nat", "203.0.113.0/24")
	eg.Spec.PodDisruptionBudget = &vcoilv2.EgressPDBSpec{MinAvailable: ptr.To(intstr.FromString("50%"))}
	eg.Spec.Template = &vcoilv2.EgressPodTemplate{Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"example.com/egress": "true"},
	}}
	createEgress(t, eg)
	key := client.ObjectKeyFromObject(eg)
	waitFor(t, key, &policyv1.PodDisruptionBudget{}, func(p *policyv1.PodDisruptionBudget) error {
		if p.Spec.MinAvailable.String() != "50%" {
			return fmt.Errorf("pdb minAvailable %v", p.Spec.MinAvailable)
		}
		return nil
	})
	svc := waitFor(t, key, &corev1.Service{}, func(*corev1.Service) error { return nil })

	t.Run("replicas, strategy and template follow", func(t *testing.T) {
		updateEgress(t, key, func(e *vcoilv2.Egress) {
			e.Spec.Replicas = ptr.To[int32](3)
			e.Spec.Strategy = &appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
			e.Spec.Template.Spec.NodeSelector = nil
			e.Spec.Template.Metadata.Labels = map[string]string{"team": "sre"}
		})
		waitFor(t, key, &appsv1.Deployment{}, func(d *appsv1.Deployment) error {
			s := d.Spec
			if *s.Replicas != 3 || s.Strategy.Type != appsv1.RecreateDeploymentStrategyType || s.Strategy.RollingUpdate != nil ||
				len(s.Template.Spec.NodeSelector) != 0 || s.Template.Labels["team"] != "sre" {
				return fmt.Errorf("deployment replicas %d strategy %+v node selector %v labels %v",
					*s.Replicas, s.Strategy, s.Template.Spec.NodeSelector, s.Template.Labels)
			}
			return nil
		})
	})
	t.Run("session affinity follows", func(t *testing.T) {
		updateEgress(t, key, func(e *vcoilv2.Egress) { e.Spec.SessionAffinity = corev1.ServiceAffinityNone })
		waitFor(t, key, &corev1.Service{}, func(s *corev1.Service) error {
			if s.Spec.SessionAffinity != corev1.ServiceAffinityNone || s.Spec.SessionAffinityConfig != nil {
				return fmt.Errorf("service session affinity %s %+v", s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig)
			}
			return nil
		})
		updateEgress(t, key, func(e *vcoilv2.Egress) {
			e.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			e.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](30)}}
		})
		waitFor(t, key, &corev1.Service{}, func(s *corev1.Service) error {
			if s.Spec.SessionAffinity != corev1.ServiceAffinityClientIP || s.Spec.SessionAffinityConfig == nil || *s.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds != 30 {
				return fmt.Errorf("service session affinity %s %+v", s.Spec.SessionAffinity, s.Spec.SessionAffinityConfig)
			}
			return nil
		})
	})
	t.Run("destinations change the observed generation", func(t *testing.T) {
		e := updateEgress(t, key, func(e *vcoilv2.Egress) { e.Spec.Destinations = []string{"198.51.100.0/24"} })
		waitFor(t, key, &vcoilv2.Egress{}, func(got *vcoilv2.Egress) error {
			if got.Status.ObservedGeneration != e.Generation {
				return fmt.Errorf("observed generation %d, want %d", got.Status.ObservedGeneration, e.Generation)
			}
			return nil
		})
	})
	t.Run("a deleted Service is made again", func(t *testing.T) {
		if err := env.Client.Delete(ctx, svc); err != nil {
			t.Fatal(err)
		}
		waitFor(t, key, &corev1.Service{}, func(s *corev1.Service) error {
			if s.UID == svc.UID {
				return fmt.Errorf("service %s not deleted yet", s.UID)
			}
			return nil
		})
	})
	t.Run("an edited Deployment is put back", func(t *testing.T) {
		d := &appsv1.Deployment{}
		if err := env.Client.Get(ctx, key, d); err != nil {
			t.Fatal(err)
		}
		d.Spec.Replicas = ptr.To[int32](7)
		d.Spec.Template.Spec.Containers[0].Image = "registry.example/other:1"
		if err := env.Client.Update(ctx, d); err != nil {
			t.Fatal(err)
		}
		waitFor(t, key, &appsv1.Deployment{}, func(d *appsv1.Deployment) error {
			if *d.Spec.Replicas != 3 || d.Spec.Template.Spec.Containers[0].Image != testRouterImage {
				return fmt.Errorf("deployment replicas %d image %s", *d.Spec.Replicas, d.Spec.Template.Spec.Containers[0].Image)
			}
			return nil
		})
	})
	t.Run("the PodDisruptionBudget goes when unset", func(t *testing.T) {
		updateEgress(t, key, func(e *vcoilv2.Egress) { e.Spec.PodDisruptionBudget = nil })
		waitGone(t, key, &policyv1.PodDisruptionBudget{})
	})
}

func TestEgressStatusFollowsTheDeploymentAndScales(t *testing.T) {
	startEgressController(t)
	ctx := context.Background()
	ns := testNamespace(t)
	eg := createEgress(t, egressObject(ns, "nat", "203.0.113.0/24"))
	key := client.ObjectKeyFromObject(eg)
	if ptr.Deref(eg.Spec.Replicas, -1) != 1 {
		t.Errorf("replicas %v, want the default 1", eg.Spec.Replicas)
	}
	dep := waitFor(t, key, &appsv1.Deployment{}, func(*appsv1.Deployment) error { return nil })

	setDeploymentStatus := func(replicas, ready int32) {
		t.Helper()
		poll.Eventually(t, 10*time.Second, func() error {
			if err := env.Client.Get(ctx, key, dep); err != nil {
				return err
			}
			dep.Status.Replicas, dep.Status.ReadyReplicas = replicas, ready
			return env.Client.Status().Update(ctx, dep)
		})
	}
	waitStatus := func(replicas, ready int32, status metav1.ConditionStatus, reason, message string) {
		t.Helper()
		waitFor(t, key, &vcoilv2.Egress{}, func(e *vcoilv2.Egress) error {
			c := meta.FindStatusCondition(e.Status.Conditions, EgressAvailable)
			if e.Status.Replicas != replicas || e.Status.ReadyReplicas != ready || c == nil ||
				c.Status != status || c.Reason != reason || c.Message != message || e.Status.ObservedGeneration != e.Generation {
				return fmt.Errorf("status %+v, want %d replicas, %d ready, Available %s %s %q", e.Status, replicas, ready, status, reason, message)
			}
			return nil
		})
	}

	svc := waitFor(t, key, &corev1.Service{}, func(*corev1.Service) error { return nil })
	sa := waitFor(t, client.ObjectKey{Namespace: ns, Name: "vcoil-egress"}, &corev1.ServiceAccount{}, func(*corev1.ServiceAccount) error { return nil })
	setDeploymentStatus(1, 1)
	waitStatus(1, 1, metav1.ConditionTrue, ReasonRoutersReady, "1 of 1 routers are ready")
	// That reconcile applied everything again, and changed nothing: no
	// write loop between the controller and the apiserver's defaulting.
	for _, o := range []client.Object{dep.DeepCopy(), svc, sa} {
		was := o.GetResourceVersion()
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		if o.GetResourceVersion() != was {
			t.Errorf("%T %s was written again by a reconcile that had nothing to change", o, o.GetName())
		}
	}
	setDeploymentStatus(1, 0)
	waitStatus(1, 0, metav1.ConditionFalse, ReasonNoRouterReady, "none of 1 routers is ready")

	// The scale subresource, as kubectl scale and autoscalers use it.
	scale := &autoscalingv1.Scale{}
	if err := env.Client.SubResource("scale").Get(ctx, eg, scale); err != nil {
		t.Fatalf("get scale: %v", err)
	}
	if want := "app.kubernetes.io/instance=nat,app.kubernetes.io/name=vcoil-egress,vcoil.io/egress=nat"; scale.Spec.Replicas != 1 || scale.Status.Replicas != 1 || scale.Status.Selector != want {
		t.Errorf("scale %+v, want 1 replica and selector %s", scale, want)
	}
	setScale := func(n int32) {
		t.Helper()
		poll.Eventually(t, 10*time.Second, func() error {
			if err := env.Client.SubResource("scale").Get(ctx, eg, scale); err != nil {
				return err
			}
			scale.Spec.Replicas = n
			return env.Client.SubResource("scale").Update(ctx, eg, client.WithSubResourceBody(scale))
		})
		waitFor(t, key, &appsv1.Deployment{}, func(d *appsv1.Deployment) error {
			if *d.Spec.Replicas != n {
				return fmt.Errorf("deployment replicas %d, want %d", *d.Spec.Replicas, n)
			}
			return nil
		})
	}
	setScale(4)
	if e := waitFor(t, key, &vcoilv2.Egress{}, func(*vcoilv2.Egress) error { return nil }); ptr.Deref(e.Spec.Replicas, -1) != 4 {
		t.Errorf("spec.replicas %v after scaling to 4", e.Spec.Replicas)
	}
	setScale(0)
	setDeploymentStatus(0, 0)
	waitStatus(0, 0, metav1.ConditionFalse, ReasonScaledToZero, "the Egress is scaled to zero routers")
	// Zero stays zero through a typed client's update (a label change).
	e := updateEgress(t, key, func(e *vcoilv2.Egress) { e.Labels = map[string]string{"team": "net"} })
	if ptr.Deref(e.Spec.Replicas, -1) != 0 {
		t.Errorf("replicas %v after an update, want 0", e.Spec.Replicas)
	}
}

func TestEgressRouterRightsFollowTheNamespacesHoldingEgresses(t *testing.T) {
	startEgressController(t)
	ctx := context.Background()
	ns1, ns2 := testNamespace(t), testNamespace(t)
	a := createEgress(t, egressObject(ns1, "a", "203.0.113.0/24"))
	b := createEgress(t, egressObject(ns1, "b", "198.51.100.0/24"))
	c := createEgress(t, egressObject(ns2, "c", "203.0.113.0/24"))

	subject := func(ns string) rbacv1.Subject {
		return rbacv1.Subject{Kind: "ServiceAccount", Name: "vcoil-egress", Namespace: ns}
	}
	waitSubjects := func(want ...rbacv1.Subject) {
		t.Helper()
		slices.SortFunc(want, func(x, y rbacv1.Subject) int { return cmpString(x.Namespace, y.Namespace) })
		waitFor(t, client.ObjectKey{Name: "vcoil-egress"}, &rbacv1.ClusterRoleBinding{}, func(crb *rbacv1.ClusterRoleBinding) error {
			if !equality.Semantic.DeepEqual(crb.Subjects, want) {
				return fmt.Errorf("subjects %+v, want %+v", crb.Subjects, want)
			}
			return nil
		})
	}
	waitOwners := func(ns string, owners ...*vcoilv2.Egress) {
		t.Helper()
		waitFor(t, client.ObjectKey{Namespace: ns, Name: "vcoil-egress"}, &corev1.ServiceAccount{}, func(sa *corev1.ServiceAccount) error {
			var got, want []string
			for _, r := range sa.OwnerReferences {
				got = append(got, r.Name)
			}
			for _, o := range owners {
				want = append(want, o.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				return fmt.Errorf("service account owners %v, want %v", got, want)
			}
			return nil
		})
	}

	waitSubjects(subject(ns1), subject(ns2))
	waitOwners(ns1, a, b)
	waitOwners(ns2, c)

	if err := env.Client.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	waitOwners(ns1, b)
	waitSubjects(subject(ns1), subject(ns2))

	if err := env.Client.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	waitSubjects(subject(ns2))
	waitGone(t, client.ObjectKey{Namespace: ns1, Name: "vcoil-egress"}, &corev1.ServiceAccount{})

	if err := env.Client.Delete(ctx, c); err != nil {
		t.Fatal(err)
	}
	waitGone(t, client.ObjectKey{Name: "vcoil-egress"}, &rbacv1.ClusterRoleBinding{})
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// A Service of the Egress's name that is not the Egress's is not taken
// over: the Egress gets a Warning Event naming it.
func TestEgressLeavesAForeignServiceAloneAndSaysSo(t *testing.T) {
	startEgressController(t)
	ctx := context.Background()
	ns := testNamespace(t)
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nat"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": "web"}},
	}
	if err := env.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	eg := createEgress(t, egressObject(ns, "nat", "203.0.113.0/24"))
	poll.Eventually(t, 20*time.Second, func() error {
		var list eventsv1.EventList
		if err := env.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range list.Items {
			if e.Regarding.UID == eg.UID && e.Reason == ReasonEgressFailed && e.Type == corev1.EventTypeWarning &&
				e.Note == fmt.Sprintf("Service %s/nat exists and is not controlled by egress %s/nat: rename or delete it", ns, ns) {
				return nil
			}
		}
		return fmt.Errorf("no EgressFailed event on the egress among %d events", len(list.Items))
	})
	got := &corev1.Service{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(foreign), got); err != nil {
		t.Fatal(err)
	}
	if len(got.OwnerReferences) != 0 || got.Spec.Selector["app"] != "web" || len(got.Spec.Ports) != 1 {
		t.Errorf("the foreign Service was changed: %+v", got)
	}
}

// The routers' token reads every pod of the cluster: of a router pod's
// containers only egress gets it, whatever the template asks.
func TestEgressTokenIsTheRouterContainersOnly(t *testing.T) {
	startEgressController(t)
	ns := testNamespace(t)
	tokenVolume := corev1.Volume{Name: "my-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}},
	}}}
	eg := egressObject(ns, "sidecars", "203.0.113.0/24")
	eg.Spec.Template = &vcoilv2.EgressPodTemplate{Spec: corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(true),
		ShareProcessNamespace:        ptr.To(true),
		Volumes: []corev1.Volume{
			tokenVolume,
			{Name: "vcoil-egress-token", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "cfg", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		},
		InitContainers: []corev1.Container{{
			Name: "init", Image: "registry.example/init:1",
			VolumeMounts: []corev1.VolumeMount{{Name: "my-token", MountPath: "/token"}, {Name: "cfg", MountPath: "/cfg"}},
		}},
		Containers: []corev1.Container{
			{
				Name: vcoilv2.EgressContainer,
				VolumeMounts: []corev1.VolumeMount{
					{Name: "cfg", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
					{Name: "cfg", MountPath: "/cfg"},
				},
			},
			{
				Name: "sidecar", Image: "registry.example/sidecar:1",
				VolumeMounts: []corev1.VolumeMount{
					{Name: "my-token", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"},
					{Name: "vcoil-egress-token", MountPath: "/stolen"},
					{Name: "cfg", MountPath: "/cfg"},
				},
			},
		},
	}}
	createEgress(t, eg)

	dep := waitFor(t, client.ObjectKeyFromObject(eg), &appsv1.Deployment{}, func(*appsv1.Deployment) error { return nil })
	pod := dep.Spec.Template.Spec
	if !equality.Semantic.DeepEqual(pod.AutomountServiceAccountToken, ptr.To(false)) || pod.ShareProcessNamespace != nil {
		t.Errorf("pod: automountServiceAccountToken %v, shareProcessNamespace %v; want false and unset",
			ptr.Deref(pod.AutomountServiceAccountToken, true), pod.ShareProcessNamespace)
	}
	var names []string
	for _, v := range pod.Volumes {
		names = append(names, v.Name)
	}
	if !slices.Equal(names, []string{"cfg", "vcoil-egress-token"}) {
		t.Fatalf("volumes %v, want the template's cfg and vcoil's token (the template's token volumes dropped)", names)
	}
	token := pod.Volumes[1].Projected
	if token == nil || len(token.Sources) != 3 || token.Sources[0].ServiceAccountToken == nil ||
		token.Sources[1].ConfigMap == nil || token.Sources[1].ConfigMap.Name != "kube-root-ca.crt" ||
		token.Sources[2].DownwardAPI == nil || token.Sources[2].DownwardAPI.Items[0].Path != "namespace" {
		t.Errorf("token volume %+v, want a token, the cluster's CA and the namespace, as client-go reads them", pod.Volumes[1])
	}
	mounts := func(c corev1.Container) []string {
		var out []string
		for _, m := range c.VolumeMounts {
			out = append(out, m.Name+":"+m.MountPath)
		}
		return out
	}
	if got, want := mounts(pod.Containers[0]), []string{"cfg:/cfg", "vcoil-egress-token:/var/run/secrets/kubernetes.io/serviceaccount"}; pod.Containers[0].Name != "egress" || !slices.Equal(got, want) {
		t.Errorf("%s mounts %v, want %v", pod.Containers[0].Name, got, want)
	}
	if got, want := mounts(pod.Containers[1]), []string{"cfg:/cfg"}; pod.Containers[1].Name != "sidecar" || !slices.Equal(got, want) {
		t.Errorf("%s mounts %v, want %v", pod.Containers[1].Name, got, want)
	}
	if got, want := mounts(pod.InitContainers[0]), []string{"cfg:/cfg"}; !slices.Equal(got, want) {
		t.Errorf("init container mounts %v, want %v", got, want)
	}
}
