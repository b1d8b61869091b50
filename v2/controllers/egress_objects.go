package controllers

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// The objects vcoil-controller makes for an Egress. They are pure functions
// of the Egress and the router image, so that what the apiserver holds can be
// compared with (and repaired to) them.

const (
	// egressAppName is the app.kubernetes.io/name of router pods and of
	// everything made for them.
	egressAppName = "vcoil-egress"
	// egressDefaultContainerAnnotation makes kubectl logs and exec pick the
	// router container when a user's template adds others.
	egressDefaultContainerAnnotation = "kubectl.kubernetes.io/default-container"
	// egressTokenVolume is the router's ServiceAccount token, mounted into
	// the egress container only.
	egressTokenVolume = "vcoil-egress-token"
	// serviceAccountMountPath is where client-go's in-cluster configuration
	// reads the token, the CA and the namespace.
	serviceAccountMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"
	// egressTokenSeconds is the token's lifetime; the kubelet renews it
	// before it ends and client-go rereads the file.
	egressTokenSeconds = 3607
)

// The environment of the router container (read by vcoil-egress).
const (
	envEgressNamespace = "EGRESS_NAMESPACE"
	envEgressName      = "EGRESS_NAME"
	envPodName         = "POD_NAME"
	envPodNamespace    = "POD_NAMESPACE"
	envPodIP           = "POD_IP"
)

// egressLabels are the labels of an Egress's router pods and of the objects
// made for them: the Deployment's and the Service's selector.
func egressLabels(eg *vcoilv2.Egress) map[string]string {
	return map[string]string{
		vcoilv2.LabelEgress:          eg.Name,
		"app.kubernetes.io/name":     egressAppName,
		"app.kubernetes.io/instance": eg.Name,
	}
}

// egressSelector is the label selector string of the router pods (the scale
// subresource's status.selector).
func egressSelector(eg *vcoilv2.Egress) string {
	return labels.SelectorFromSet(egressLabels(eg)).String()
}

func egressObjectMeta(eg *vcoilv2.Egress) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: eg.Namespace, Name: eg.Name, Labels: egressLabels(eg)}
}

// egressReplicas is spec.replicas, 1 when absent (as the schema defaults it).
func egressReplicas(eg *vcoilv2.Egress) int32 { return ptr.Deref(eg.Spec.Replicas, 1) }

// egressDeployment is the Deployment of the Egress's router pods, running
// image. The user's template is merged into vcoil's pod (egressPodSpec).
func egressDeployment(eg *vcoilv2.Egress, image string) *appsv1.Deployment {
	podLabels := map[string]string{}
	podAnnotations := map[string]string{}
	var userSpec corev1.PodSpec
	if t := eg.Spec.Template; t != nil {
		for k, v := range t.Metadata.Labels {
			podLabels[k] = v
		}
		for k, v := range t.Metadata.Annotations {
			podAnnotations[k] = v
		}
		userSpec = *t.Spec.DeepCopy()
	}
	// vcoil's labels win: they are the selector.
	for k, v := range egressLabels(eg) {
		podLabels[k] = v
	}
	podAnnotations[egressDefaultContainerAnnotation] = vcoilv2.EgressContainer

	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: egressObjectMeta(eg),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(egressReplicas(eg)),
			Selector: &metav1.LabelSelector{MatchLabels: egressLabels(eg)},
			Strategy: egressStrategy(eg.Spec.Strategy),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec:       egressPodSpec(eg, image, userSpec),
			},
		},
	}
}

// egressStrategy spells out the apiserver's default strategy when the spec
// has none. vcoil applies its objects (server-side apply) and so owns only
// the fields it sends: a rollingUpdate block filled in by the apiserver's
// defaulting would survive a later switch to Recreate, which the apiserver
// then rejects. Sending the defaults makes them vcoil's to remove.
func egressStrategy(s *appsv1.DeploymentStrategy) appsv1.DeploymentStrategy {
	if s == nil || s.Type == "" {
		s = &appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}
	}
	out := *s.DeepCopy()
	if out.Type == appsv1.RollingUpdateDeploymentStrategyType {
		if out.RollingUpdate == nil {
			out.RollingUpdate = &appsv1.RollingUpdateDeployment{}
		}
		if out.RollingUpdate.MaxUnavailable == nil {
			out.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("25%"))
		}
		if out.RollingUpdate.MaxSurge == nil {
			out.RollingUpdate.MaxSurge = ptr.To(intstr.FromString("25%"))
		}
	}
	return out
}

// egressPodSpec merges vcoil's router pod into the user's pod spec: the
// pod-level fields the user sets (node selection, tolerations, affinity,
// priority, spread constraints, volumes, ...) are kept; the ServiceAccount,
// its token and the host network are vcoil's; the "egress" container is
// vcoil's with the user's resources, extra environment and volume mounts;
// the user's other containers follow it.
//
// The router's token reads every pod of the cluster: only the egress
// container gets it. The pod does not mount the ServiceAccount's token
// (automountServiceAccountToken false): a volume of vcoil's projects it,
// mounted into the egress container alone at the path client-go reads. The
// user's volumes that project a ServiceAccount token are dropped (with
// their mounts), and the containers never share their process namespace,
// through which the token could be read under /proc.
func egressPodSpec(eg *vcoilv2.Egress, image string, user corev1.PodSpec) corev1.PodSpec {
	spec := user
	spec.ServiceAccountName = constants.EgressServiceAccount
	spec.DeprecatedServiceAccount = ""
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.ShareProcessNamespace = nil
	// A router rewrites sysctls and nftables of its network namespace: in
	// the node's namespace that would reconfigure the node.
	spec.HostNetwork = false

	tokenVolumes := map[string]bool{egressTokenVolume: true}
	spec.Volumes = nil
	for _, v := range user.Volumes {
		if projectsToken(v) || v.Name == egressTokenVolume {
			tokenVolumes[v.Name] = true
			continue
		}
		spec.Volumes = append(spec.Volumes, v)
	}
	spec.Volumes = append(spec.Volumes, egressTokenVolumeSource())
	withoutToken := func(c corev1.Container) corev1.Container {
		c.VolumeMounts = slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool { return tokenVolumes[m.Name] })
		return c
	}
	spec.InitContainers = nil
	for _, c := range user.InitContainers {
		spec.InitContainers = append(spec.InitContainers, withoutToken(c))
	}

	router := egressContainer(eg, image)
	containers := []corev1.Container{router}
	for _, c := range user.Containers {
		if c.Name != vcoilv2.EgressContainer {
			containers = append(containers, withoutToken(c))
			continue
		}
		r := &containers[0]
		r.Resources = c.Resources
		have := map[string]bool{}
		for _, e := range r.Env {
			have[e.Name] = true
		}
		for _, e := range c.Env {
			// vcoil's variables tell the router who it is: not overridable.
			if !have[e.Name] {
				r.Env = append(r.Env, e)
			}
		}
		r.EnvFrom = c.EnvFrom
		// The token's path is vcoil's.
		r.VolumeMounts = slices.DeleteFunc(withoutToken(c).VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.MountPath == serviceAccountMountPath
		})
	}
	containers[0].VolumeMounts = append(containers[0].VolumeMounts, corev1.VolumeMount{
		Name: egressTokenVolume, MountPath: serviceAccountMountPath, ReadOnly: true,
	})
	spec.Containers = containers
	return spec
}

// projectsToken says whether a volume holds a ServiceAccount token of the
// pod's account.
func projectsToken(v corev1.Volume) bool {
	if v.Projected == nil {
		return false
	}
	return slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil })
}

// egressTokenVolumeSource is what the kubelet would mount for the
// ServiceAccount (its kube-api-access volume): a bound token, the cluster's
// CA and the namespace.
func egressTokenVolumeSource() corev1.Volume {
	return corev1.Volume{
		Name: egressTokenVolume,
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o644),
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Path: "token", ExpirationSeconds: ptr.To[int64](egressTokenSeconds),
				}},
				{ConfigMap: &corev1.ConfigMapProjection{
					LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
					Items:                []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}},
				}},
				{DownwardAPI: &corev1.DownwardAPIProjection{
					Items: []corev1.DownwardAPIVolumeFile{{
						Path:     "namespace",
						FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"},
					}},
				}},
			},
		}},
	}
}

// egressContainer is vcoil's router container.
func egressContainer(eg *vcoilv2.Egress, image string) corev1.Container {
	fieldEnv := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path},
		}}
	}
	return corev1.Container{
		Name:    vcoilv2.EgressContainer,
		Image:   image,
		Command: []string{constants.EgressCommand},
		Env: []corev1.EnvVar{
			{Name: envEgressNamespace, Value: eg.Namespace},
			{Name: envEgressName, Value: eg.Name},
			fieldEnv(envPodName, "metadata.name"),
			fieldEnv(envPodNamespace, "metadata.namespace"),
			// status.podIPs cannot be a fieldRef: the router reads its
			// other family's address from its Pod.
			fieldEnv(envPodIP, "status.podIP"),
		},
		Ports: []corev1.ContainerPort{
			{Name: "metrics", ContainerPort: constants.EgressMetricsPort, Protocol: corev1.ProtocolTCP},
			{Name: "health", ContainerPort: constants.EgressHealthPort, Protocol: corev1.ProtocolTCP},
		},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path:   "/readyz",
				Port:   intstr.FromInt32(constants.EgressHealthPort),
				Scheme: corev1.URISchemeHTTP,
			}},
		},
		// The router sets sysctls (forwarding, rp_filter) and nftables
		// (SNAT) of its pod's network namespace and creates tunnel devices
		// there: that needs CAP_NET_ADMIN and a writable /proc/sys, which
		// only a privileged container gets.
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
	}
}

// egressService is the Service client pods tunnel to: its ClusterIPs (one
// per family where the cluster has both) spread the clients over the routers.
func egressService(eg *vcoilv2.Egress) *corev1.Service {
	affinity := eg.Spec.SessionAffinity
	if affinity == "" {
		affinity = corev1.ServiceAffinityClientIP
	}
	var affinityConfig *corev1.SessionAffinityConfig
	if affinity == corev1.ServiceAffinityClientIP {
		// Sent in full (with the apiserver's default timeout when the spec
		// has none) so that vcoil owns it and removes it on a switch to
		// None, which the apiserver requires.
		timeout := int32(corev1.DefaultClientIPServiceAffinitySeconds)
		if c := eg.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			timeout = *c.ClientIP.TimeoutSeconds
		}
		affinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr.To(timeout)}}
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: egressObjectMeta(eg),
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicyPreferDualStack),
			Selector:       egressLabels(eg),
			Ports: []corev1.ServicePort{
				{Name: "fou", Protocol: corev1.ProtocolUDP, Port: vcoilv2.EgressFoUPort, TargetPort: intstr.FromInt32(vcoilv2.EgressFoUPort)},
				{Name: "vxlan", Protocol: corev1.ProtocolUDP, Port: vcoilv2.EgressVXLANPort, TargetPort: intstr.FromInt32(vcoilv2.EgressVXLANPort)},
			},
			SessionAffinity:       affinity,
			SessionAffinityConfig: affinityConfig,
		},
	}
}

// egressPDB is the PodDisruptionBudget of the router pods, nil when the spec
// asks for none.
func egressPDB(eg *vcoilv2.Egress) *policyv1.PodDisruptionBudget {
	p := eg.Spec.PodDisruptionBudget
	if p == nil {
		return nil
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: egressObjectMeta(eg),
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: egressLabels(eg)},
			MinAvailable:   p.MinAvailable,
			MaxUnavailable: p.MaxUnavailable,
		},
	}
}

// egressServiceAccount is the routers' ServiceAccount of a namespace, owned
// by every Egress of the namespace: the garbage collector removes it with
// the last of them.
func egressServiceAccount(namespace string, owners []vcoilv2.Egress) *corev1.ServiceAccount {
	sa := &corev1.ServiceAccount{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace,
			Name:      constants.EgressServiceAccount,
			Labels:    map[string]string{"app.kubernetes.io/name": egressAppName},
		},
	}
	for i := range owners {
		sa.OwnerReferences = append(sa.OwnerReferences, metav1.OwnerReference{
			APIVersion: vcoilv2.GroupVersion.String(),
			Kind:       "Egress",
			Name:       owners[i].Name,
			UID:        owners[i].UID,
		})
	}
	return sa
}

// egressSubjects are the ServiceAccounts of the namespaces, as binding
// subjects.
func egressSubjects(namespaces []string) []rbacv1.Subject {
	out := make([]rbacv1.Subject, 0, len(namespaces))
	for _, ns := range namespaces {
		out = append(out, rbacv1.Subject{Kind: "ServiceAccount", Name: constants.EgressServiceAccount, Namespace: ns})
	}
	return out
}

// describeEgress names an Egress in errors.
func describeEgress(eg *vcoilv2.Egress) string {
	return fmt.Sprintf("egress %s/%s", eg.Namespace, eg.Name)
}
