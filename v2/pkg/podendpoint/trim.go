package podendpoint

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// Trim is the cache transform of PodEndpoints in the vcoild of node. Every
// vcoild caches the endpoint of every pod of the cluster, and keeps the
// informer's object itself as the pod's policy peer: another node's
// endpoint keeps only what that reads (namespace, name, resource version,
// spec), not its UID, owner, labels or timestamps, which are about a
// third of what it holds once decoded. This node's own endpoints are kept
// whole but for their managed fields: the publisher compares their owner
// and label, and deletes them on their UID and resource version.
func Trim(node string) toolscache.TransformFunc {
	return func(obj any) (any, error) {
		ep, ok := obj.(*vcoilv2.PodEndpoint)
		if !ok {
			return obj, nil // a tombstone
		}
		if ep.Spec.NodeName == node {
			ep.ManagedFields = nil
			return ep, nil
		}
		return &vcoilv2.PodEndpoint{
			TypeMeta: ep.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Namespace: ep.Namespace, Name: ep.Name,
				ResourceVersion: ep.ResourceVersion, DeletionTimestamp: ep.DeletionTimestamp,
			},
			Spec: ep.Spec,
		}, nil
	}
}
