package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

// Reload brings a running lab to the work tree's vcoil: it imports the
// image tarballs into every node again (the tags stay, the contents change)
// and restarts vcoil-controller and vcoild as `kubectl rollout restart`
// would (the controller's pods are deleted), waiting for both. Pods of the sample application or of tests keep
// running with the agent they started with.
func (c Config) Reload(ctx context.Context) error {
	if !c.IsUp() {
		return errors.New("the lab is not up: make lab-up")
	}
	done := c.step("importing the images into every node again")
	for _, n := range c.Topology.NodeList() {
		if err := c.importImages(n); err != nil {
			return err
		}
	}
	done()
	cl, _, err := c.Client()
	if err != nil {
		return err
	}
	done = c.step("restarting vcoil-controller and vcoild")
	// vcoil-controller's replicas hold host ports on as many nodes as the
	// lab may have, so a rolling update could not place a new one: its pods
	// are deleted instead, and come back from the new images.
	if err := cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("kube-system"),
		client.MatchingLabels{"app.kubernetes.io/name": "vcoil-controller"}); err != nil {
		return fmt.Errorf("restart vcoil-controller: %w", err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(
		`{"spec":{"template":{"metadata":{"annotations":{"vcoil.io/lab-reloaded-at":%q}}}}}`, time.Now().Format(time.RFC3339Nano))))
	for name := range c.daemonSets() {
		ds := &appsv1.DaemonSet{}
		ds.Namespace, ds.Name = "kube-system", name
		if err := cl.Patch(ctx, ds, patch); err != nil {
			return fmt.Errorf("restart vcoild (%s): %w", name, err)
		}
	}
	if err := waitDeployment(ctx, cl, "kube-system", "vcoil-controller", 3*time.Minute); err != nil {
		return c.failed(err, "node1-kubelet")
	}
	for name := range c.daemonSets() {
		if err := poll.Until(ctx, 3*time.Minute, pollInterval, func(ctx context.Context) error {
			d := &appsv1.DaemonSet{}
			if err := cl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: name}, d); err != nil {
				return err
			}
			s := d.Status
			if s.ObservedGeneration < d.Generation || s.UpdatedNumberScheduled < s.DesiredNumberScheduled || s.NumberReady < s.DesiredNumberScheduled || s.NumberAvailable < s.DesiredNumberScheduled {
				return fmt.Errorf("%d of %d updated, %d ready", s.UpdatedNumberScheduled, s.DesiredNumberScheduled, s.NumberReady)
			}
			return nil
		}); err != nil {
			return c.failed(fmt.Errorf("vcoild (%s) restarted on every node: %w", name, err), "node1-kubelet")
		}
	}
	done()
	return nil
}
