package controllers

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// The Egress status condition and its reasons.
const (
	// EgressAvailable is True while at least one router pod is ready.
	EgressAvailable = "Available"

	ReasonRoutersReady  = "RoutersReady"
	ReasonNoRouterReady = "NoRouterReady"
	ReasonScaledToZero  = "ScaledToZero"
	// ReasonEgressFailed is the reason of the Warning Event on an Egress
	// whose objects could not be made.
	ReasonEgressFailed = "EgressFailed"
)

// egressFieldOwner is the server-side apply field manager of the objects
// made for Egresses.
const egressFieldOwner = "vcoil-controller"

// EgressReconciler runs the router pods of every Egress: a Deployment, a
// Service client pods tunnel to and an optional PodDisruptionBudget, all
// named after the Egress and controlled by it (the garbage collector removes
// them with it). It also keeps, per namespace holding Egresses, the routers'
// ServiceAccount, and the one ClusterRoleBinding that gives those
// ServiceAccounts the ClusterRole vcoil-egress (installed with vcoil).
//
// The objects are written with server-side apply, so that vcoil owns exactly
// the fields it sets: a user's or another controller's additions stay, and a
// change to vcoil's fields (or a deleted object) is put back on the next
// reconcile, which the watches on the owned objects trigger.
//
// It does not watch ServiceAccounts or the ClusterRoleBinding (that would
// need list and watch rights on every one in the cluster): both are put back
// at the next reconcile of an Egress.
type EgressReconciler struct {
	Client client.Client
	// APIReader reads what the manager does not cache: the
	// ClusterRoleBinding and ServiceAccount (vcoil's rights on them are
	// limited to their names, which excludes list and watch), and objects of
	// an Egress's names that the cache, limited to vcoil's labels, cannot
	// see.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Image is the router pods' image.
	Image string
}

// +kubebuilder:rbac:groups=vcoil.io,resources=egresses,verbs=get;list;watch
// +kubebuilder:rbac:groups=vcoil.io,resources=egresses/status,verbs=get;update;patch
// Owner references that block the owner's deletion need update on its
// finalizers where the OwnerReferencesPermissionEnforcement plugin runs.
// +kubebuilder:rbac:groups=vcoil.io,resources=egresses/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=create
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;patch;delete,resourceNames=vcoil-egress
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=create
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterrolebindings,verbs=get;update;delete,resourceNames=vcoil-egress
// Binding the routers' role needs either every right it grants or bind on
// it: bind keeps vcoil-controller from reading every pod.
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=clusterroles,verbs=bind,resourceNames=vcoil-egress
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile implements reconcile.Reconciler.
func (r *EgressReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	eg := &vcoilv2.Egress{}
	if err := r.Client.Get(ctx, req.NamespacedName, eg); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get egress %s: %w", req.NamespacedName, err)
		}
		eg = nil
	}
	if eg == nil || !eg.DeletionTimestamp.IsZero() {
		// The Deployment, Service and PDB go with the Egress (owner
		// references); what is shared by the namespace or the cluster
		// follows what remains.
		if err := r.syncServiceAccount(ctx, req.Namespace); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.syncBinding(ctx)
	}

	if err := r.apply(ctx, eg); err != nil {
		r.Recorder.Eventf(eg, nil, corev1.EventTypeWarning, ReasonEgressFailed, "ApplyRouters", "%s", err.Error())
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.updateStatus(ctx, eg)
}

// apply makes the objects of a live Egress: the ServiceAccount and the
// binding first, so that routers have their rights when they start.
func (r *EgressReconciler) apply(ctx context.Context, eg *vcoilv2.Egress) error {
	if err := r.syncServiceAccount(ctx, eg.Namespace); err != nil {
		return err
	}
	if err := r.syncBinding(ctx); err != nil {
		return err
	}
	if err := r.applyOwned(ctx, eg, egressDeployment(eg, r.Image), &appsv1.Deployment{}); err != nil {
		return err
	}
	if err := r.applyOwned(ctx, eg, egressService(eg), &corev1.Service{}); err != nil {
		return err
	}
	if pdb := egressPDB(eg); pdb != nil {
		return r.applyOwned(ctx, eg, pdb, &policyv1.PodDisruptionBudget{})
	}
	return r.deletePDB(ctx, eg)
}

// applyOwned applies obj as controlled by eg. An object of that name that eg
// does not control (a user's own Service, say) is left alone and reported:
// taking it over would break whatever it serves. current is an empty object
// of obj's type to read the existing one into.
func (r *EgressReconciler) applyOwned(ctx context.Context, eg *vcoilv2.Egress, obj, current client.Object) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	key := client.ObjectKeyFromObject(obj)
	err := r.Client.Get(ctx, key, current)
	if apierrors.IsNotFound(err) {
		// The cache holds only objects with vcoil's labels.
		err = r.APIReader.Get(ctx, key, current)
	}
	switch {
	case err == nil:
		if !metav1.IsControlledBy(current, eg) {
			return fmt.Errorf("%s %s exists and is not controlled by %s: rename or delete it", kind, key, describeEgress(eg))
		}
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get %s %s of %s: %w", kind, key, describeEgress(eg), err)
	}
	if err := controllerutil.SetControllerReference(eg, obj, r.Scheme); err != nil {
		return fmt.Errorf("set the owner of %s %s to %s: %w", kind, key, describeEgress(eg), err)
	}
	if err := r.serverSideApply(ctx, obj); err != nil {
		return fmt.Errorf("apply %s %s of %s: %w", kind, key, describeEgress(eg), err)
	}
	return nil
}

// serverSideApply applies obj (with its TypeMeta set) as vcoil-controller,
// taking back fields others changed.
func (r *EgressReconciler) serverSideApply(ctx context.Context, obj client.Object) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	// Zero values of the typed object that are not vcoil's to set.
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	return r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
		client.FieldOwner(egressFieldOwner), client.ForceOwnership)
}

// deletePDB removes the Egress's PodDisruptionBudget when its spec no longer
// asks for one.
func (r *EgressReconciler) deletePDB(ctx context.Context, eg *vcoilv2.Egress) error {
	pdb := &policyv1.PodDisruptionBudget{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(eg), pdb); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !metav1.IsControlledBy(pdb, eg) {
		return nil
	}
	if err := r.Client.Delete(ctx, pdb, client.Preconditions{UID: &pdb.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete the PodDisruptionBudget of %s: %w", describeEgress(eg), err)
	}
	return nil
}

// liveEgresses lists the Egresses of namespace ("" for all) that are not
// being deleted.
func (r *EgressReconciler) liveEgresses(ctx context.Context, namespace string) ([]vcoilv2.Egress, error) {
	var list vcoilv2.EgressList
	if err := r.Client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("list egresses: %w", err)
	}
	live := list.Items[:0]
	for _, eg := range list.Items {
		if eg.DeletionTimestamp.IsZero() {
			live = append(live, eg)
		}
	}
	return live, nil
}

// syncServiceAccount keeps the routers' ServiceAccount of namespace while it
// holds Egresses, owned by each of them, and deletes it (when it is vcoil's)
// with the last one, without waiting for the garbage collector.
func (r *EgressReconciler) syncServiceAccount(ctx context.Context, namespace string) error {
	owners, err := r.liveEgresses(ctx, namespace)
	if err != nil {
		return err
	}
	if len(owners) > 0 {
		// One apply with every owner: vcoil's owner references are one
		// field manager's list, and an apply with fewer would drop the
		// others.
		if err := r.serverSideApply(ctx, egressServiceAccount(namespace, owners)); err != nil {
			return fmt.Errorf("apply ServiceAccount %s/%s: %w", namespace, constants.EgressServiceAccount, err)
		}
		return nil
	}
	sa := &corev1.ServiceAccount{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: constants.EgressServiceAccount}, sa); err != nil {
		return client.IgnoreNotFound(err)
	}
	if sa.Labels["app.kubernetes.io/name"] != egressAppName {
		return nil
	}
	if err := r.Client.Delete(ctx, sa, client.Preconditions{UID: &sa.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete ServiceAccount %s/%s: %w", namespace, sa.Name, err)
	}
	log.FromContext(ctx).Info("deleted the egress routers' ServiceAccount", "namespace", namespace)
	return nil
}

// syncBinding makes the ClusterRoleBinding's subjects the routers'
// ServiceAccounts of every namespace holding an Egress, and deletes it when
// there are none.
func (r *EgressReconciler) syncBinding(ctx context.Context) error {
	live, err := r.liveEgresses(ctx, "")
	if err != nil {
		return err
	}
	var namespaces []string
	for _, eg := range live {
		namespaces = append(namespaces, eg.Namespace)
	}
	slices.Sort(namespaces)
	subjects := egressSubjects(slices.Compact(namespaces))
	roleRef := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: constants.EgressClusterRole}

	crb := &rbacv1.ClusterRoleBinding{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Name: constants.EgressClusterRoleBinding}, crb)
	switch {
	case apierrors.IsNotFound(err):
		if len(subjects) == 0 {
			return nil
		}
		crb = &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{
				Name:   constants.EgressClusterRoleBinding,
				Labels: map[string]string{"app.kubernetes.io/name": egressAppName},
			},
			RoleRef:  roleRef,
			Subjects: subjects,
		}
		if err := r.Client.Create(ctx, crb); err != nil {
			return fmt.Errorf("create ClusterRoleBinding %s: %w", crb.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("get ClusterRoleBinding %s: %w", constants.EgressClusterRoleBinding, err)
	}

	// The roleRef is immutable: a binding to another role is replaced.
	if len(subjects) == 0 || crb.RoleRef != roleRef {
		if err := r.Client.Delete(ctx, crb, client.Preconditions{UID: &crb.UID, ResourceVersion: &crb.ResourceVersion}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete ClusterRoleBinding %s: %w", crb.Name, err)
		}
		if len(subjects) == 0 {
			return nil
		}
		return r.syncBinding(ctx)
	}
	if equality.Semantic.DeepEqual(crb.Subjects, subjects) {
		return nil
	}
	// An update with the read resourceVersion: a concurrent change fails
	// with a conflict and the reconcile is retried on fresh data.
	crb.Subjects = subjects
	if err := r.Client.Update(ctx, crb); err != nil {
		return fmt.Errorf("update the subjects of ClusterRoleBinding %s: %w", crb.Name, err)
	}
	return nil
}

// updateStatus copies the Deployment's replica counts and writes the
// Available condition.
func (r *EgressReconciler) updateStatus(ctx context.Context, eg *vcoilv2.Egress) error {
	dep := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(eg), dep); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("get the Deployment of %s: %w", describeEgress(eg), err)
	}
	status := eg.Status.DeepCopy()
	status.ObservedGeneration = eg.Generation
	status.Replicas = dep.Status.Replicas
	status.ReadyReplicas = dep.Status.ReadyReplicas
	status.Selector = egressSelector(eg)
	cond := metav1.Condition{Type: EgressAvailable, ObservedGeneration: eg.Generation}
	want := egressReplicas(eg)
	switch {
	case status.ReadyReplicas > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, ReasonRoutersReady
		cond.Message = fmt.Sprintf("%d of %d routers are ready", status.ReadyReplicas, want)
	case want == 0:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonScaledToZero, "the Egress is scaled to zero routers"
	default:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonNoRouterReady
		cond.Message = fmt.Sprintf("none of %d routers is ready", want)
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if equality.Semantic.DeepEqual(*status, eg.Status) {
		return nil
	}
	patch := client.MergeFrom(eg.DeepCopy())
	eg.Status = *status
	if err := r.Client.Status().Patch(ctx, eg, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("update status of %s: %w", describeEgress(eg), err)
	}
	return nil
}

// SetupWithManager registers the reconciler. Changes to the owned objects
// (the routers' readiness, a deleted Service, an edited Deployment) requeue
// their Egress; the Egress itself only on spec changes and deletion, not on
// its own status writes.
func (r *EgressReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Image == "" {
		return fmt.Errorf("the egress reconciler needs a router image")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&vcoilv2.Egress{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Named("egress").
		Complete(r)
}
