// Package informerlist chooses how client-go's informers fill their caches
// when they start: with one LIST served from the apiserver's watch cache,
// not with the streamed list (client-go's WatchListClient feature, on by
// default since Kubernetes v1.35).
//
// A streamed list is consistent: the apiserver first waits until its watch
// cache of the resource has caught up with etcd's latest revision, which it
// learns from a progress notification of etcd, and then sends every object
// as an event of its own. On the project's lab, with 10,000 Services and
// their EndpointSlices, a Service and an EndpointSlice informer took
// 1.4-1.8 s to sync that way and 0.55 s with a LIST at resourceVersion 0,
// and vcoild's Service caches synced 2.2 s after its start instead of 0.9 s
// (docs/services.md, Cost): a node's Services reached the kernel that much
// later after every start of vcoild. The LIST may answer from a watch cache a moment behind etcd; the
// watch that follows brings the cache up to date, as it did for every
// client before the streamed list existed. The apiserver encodes a large
// LIST as a stream since Kubernetes v1.33, so it no longer holds the whole
// answer in memory.
//
// The environment variable KUBE_FEATURE_WatchListClient, client-go's own
// switch, still decides when it is set.
package informerlist

import (
	clientfeatures "k8s.io/client-go/features"
)

// EnvVar is client-go's switch of the streamed list; when set, its value
// decides (client-go reads it, true or false).
const EnvVar = "KUBE_FEATURE_" + string(clientfeatures.WatchListClient)

// UseLists makes every informer of the process fill its cache with a LIST,
// unless lookupEnv (os.LookupEnv) finds EnvVar set. It replaces client-go's
// feature gates for the whole process, so it must run before the first
// client or informer is made (client-go warns otherwise). It reports
// whether informers list.
func UseLists(lookupEnv func(string) (string, bool)) bool {
	if _, set := lookupEnv(EnvVar); set {
		return !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient)
	}
	clientfeatures.ReplaceFeatureGates(listGates{base: clientfeatures.FeatureGates()})
	return true
}

// listGates are client-go's gates, with the streamed list off.
type listGates struct{ base clientfeatures.Gates }

func (g listGates) Enabled(key clientfeatures.Feature) bool {
	if key == clientfeatures.WatchListClient {
		return false
	}
	return g.base.Enabled(key)
}
