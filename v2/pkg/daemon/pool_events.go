package daemon

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
	"github.com/vcoil/vcoil/v2/pkg/nodeipam"
)

// vcoild records Events on the pods whose pool fails them (role "daemon").
// +kubebuilder:rbac:groups="",resources=pods,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// ActionAllocate is the action of the Events on a pod that got no address.
const ActionAllocate = "AllocateAddress"

// argPodUID is the CNI_ARGS key under which containerd and CRI-O pass the
// pod's UID.
const argPodUID = "K8S_POD_UID"

// poolEventTimeout bounds the read of the pod for its Event: the ADD has
// failed already, and its answer must not wait for long.
const poolEventTimeout = 5 * time.Second

// poolReason is the reason of the Warning Event on a pod whose pool gave
// it no address, or "" when the failure is not the pool's (a timeout, a
// vcoild that is not ready: the kubelet retries, and vcoild's log says why).
func poolReason(err error) string {
	switch {
	case errors.Is(err, nodeipam.ErrPoolExhausted):
		return vcoilv2.ReasonPoolExhausted
	case errors.Is(err, nodeipam.ErrPoolNotFound):
		return vcoilv2.ReasonPoolNotFound
	case errors.Is(err, nodeipam.ErrPoolDeleting):
		return vcoilv2.ReasonPoolDeleting
	case errors.Is(err, nodeipam.ErrPoolNotForPods):
		return vcoilv2.ReasonPoolNotForPods
	}
	return ""
}

// reportPoolError records a Warning Event on the pod of args when its pool
// gave it no address, so that `kubectl describe pod` says which pool and
// why, beside the kubelet's "failed to create pod sandbox". allocErr is
// the pool's error, cniErr what the ADD answers (its message is the
// note). The Event names the pod with its UID, from the apiserver or,
// when the pod cannot be read, from the runtime's CNI_ARGS.
func (s *Server) reportPoolError(ctx context.Context, args *cnirpc.CNIArgs, allocErr, cniErr error) {
	reason := poolReason(allocErr)
	namespace, name := args.Args[argPodNamespace], args.Args[argPodName]
	if s.recorder == nil || reason == "" || name == "" {
		return
	}
	var regarding runtime.Object
	pod := &corev1.Pod{}
	ctx, cancel := context.WithTimeout(ctx, poolEventTimeout)
	defer cancel()
	if err := s.pods.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod); err == nil {
		regarding = pod
	} else if uid := args.Args[argPodUID]; uid != "" {
		regarding = &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: namespace, Name: name, UID: types.UID(uid)}
	} else {
		s.log.Error(err, "cannot read the pod for its Event; the ADD's error still tells the kubelet", "pod", namespace+"/"+name, "reason", reason)
		return
	}
	s.recorder.Eventf(regarding, nil, corev1.EventTypeWarning, reason, ActionAllocate, "%s", cnicontract.FromRPCError(cniErr, 0).Msg)
}
