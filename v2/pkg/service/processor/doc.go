// Package processor is the layer between the apiserver and vcoil's service
// renderers: it turns Services, EndpointSlices and this node's Node into the
// service model of package service, and keeps the renderers in sync with it.
//
// It applies kube-proxy's semantics once, so that no renderer has to:
// which Services are served (not headless, not ExternalName, not labelled
// for another proxy), which endpoints a frontend may use (Cluster and Local
// lists per family, topology hints, terminating endpoints only when no
// ready one is left), and the frontends themselves (cluster IPs, external
// IPs, LoadBalancer VIPs, NodePorts on the node's NodePort addresses).
//
//   - build.go: Build, pure: one Service and its slices -> one model, or
//     nothing (not served), or ErrInvalidService (the caller records an
//     Event and skips the Service).
//   - node.go: NodeModel, pure: the Node -> the node the renderers see.
//   - processor.go: Processor, the objects it was fed, the models the
//     renderers hold, and kube-proxy's sync timing: changes batched for at
//     least MinSyncPeriod and sent as one Update, a full Resync every
//     SyncPeriod, a failed renderer resynced with a bounded backoff.
//     LastSync, PendingSince and Synced are what /healthz and /readyz read.
//   - watch.go: controller-runtime wiring: CacheOptions (this node's Node;
//     transforms that trim every cached Service, EndpointSlice and Node to
//     what is read) and Setup (informers -> processor -> loop).
//
// It does not program any dataplane, serve health checks or keep metrics of
// the renderers; those belong to the renderers and to vcoild.
package processor
