package scale

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// A simulated pod's life as its node's vcoild would tell it to the other
// nodes: the Pod, then its PodEndpoint (vcoild publishes it at the pod's
// CNI ADD); a label changed on both (vcoild follows its node's Pods); the
// endpoint deleted with the pod (at its CNI DEL).

// createPod creates the pod and its endpoint.
func (s *Sim) createPod(ctx context.Context, p PodSpec) error {
	pod := p.Object()
	if err := createRetry(ctx, s.o.Client, pod); err != nil {
		return err
	}
	if pod.UID == "" { // it existed: read its UID
		if err := s.o.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return fmt.Errorf("read pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return createRetry(ctx, s.o.Client, p.Endpoint(pod.UID))
}

// labelPod merges labels into the pod's and its endpoint's.
func (s *Sim) labelPod(ctx context.Context, namespace, name string, labels map[string]string) error {
	l, err := json.Marshal(labels)
	if err != nil {
		return err
	}
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = namespace, name
	if err := s.o.Client.Patch(ctx, pod, client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"metadata":{"labels":%s}}`, l))); err != nil {
		return fmt.Errorf("label pod %s/%s: %w", namespace, name, err)
	}
	ep := &vcoilv2.PodEndpoint{}
	ep.Namespace, ep.Name = namespace, name
	if err := s.o.Client.Patch(ctx, ep, client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"podLabels":%s}}`, l))); err != nil {
		return fmt.Errorf("label PodEndpoint %s/%s: %w", namespace, name, err)
	}
	return nil
}

// deletePod deletes the pod and its endpoint.
func (s *Sim) deletePod(ctx context.Context, p PodSpec) error {
	if err := s.o.Client.Delete(ctx, p.Object(), client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	ep := &vcoilv2.PodEndpoint{}
	ep.Namespace, ep.Name = p.Namespace, p.Name
	if err := s.o.Client.Delete(ctx, ep); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PodEndpoint %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}
