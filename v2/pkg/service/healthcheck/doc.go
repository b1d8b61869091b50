// Package healthcheck serves what kube-proxy serves over HTTP besides
// rules, for nodes where vcoil replaces kube-proxy:
//
//   - the proxy health server (ProxyHealthServer, 127.0.0.1:10256 by
//     default): /healthz and /livez, healthy while no change has waited for
//     the dataplane longer than the health timeout; /healthz also fails while
//     the node is being deleted or is tainted ToBeDeletedByClusterAutoscaler;
//   - the status server (ProxyStatusServer, 127.0.0.1:10249): /proxyMode;
//   - the service health check node ports (ServiceHealthServer), a
//     service.Renderer: for each service with a HealthCheckNodePort (eTP=Local
//     LoadBalancers), an HTTP server telling load balancers how many ready
//     endpoints the service has on this node.
//
// Responses follow kube-proxy's, field for field, since cloud load balancers
// and the upstream e2e tests read them. The package reads the processor's
// progress through SyncState and never sees Kubernetes objects except the
// Node, for eligibility. It does not serve metrics: vcoild's metrics server
// does.
package healthcheck
