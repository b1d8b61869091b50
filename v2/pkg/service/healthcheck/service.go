package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// ProxyHealth is the proxy's health as the service health checks report it
// (ProxyHealthServer.Healthy).
type ProxyHealth interface {
	Healthy() bool
}

// ServiceHealthConfig places the service health check servers.
type ServiceHealthConfig struct {
	// Netns is the path of the node's network namespace; empty means the
	// process's own.
	Netns string
}

// ServiceHealthServer serves the health check node port of every service
// that has one: any path answers with the service's number of local ready
// endpoints, 200 when there are some and the proxy is healthy, else 503, so
// that a load balancer sends eTP=Local traffic only to nodes that can serve
// it. It is a service.Renderer fed by the processor like the dataplane
// renderers; Start (a manager.Runnable) closes the ports when vcoild stops.
//
// A port that cannot be opened (another process holds it) is logged and
// tried again at every Resync and Update, never an error: the other services
// and renderers go on.
type ServiceHealthServer struct {
	cfg   ServiceHealthConfig
	proxy ProxyHealth
	log   logr.Logger

	// mu guards what follows: the processor's calls never overlap, but
	// Close may come from another goroutine.
	mu     sync.Mutex
	closed bool
	// addrs are the node's NodePortAddresses; empty means all addresses.
	addrs  []netip.Addr
	checks map[service.ID]*healthCheck
}

// healthCheck is one service's port and its servers.
type healthCheck struct {
	id   service.ID
	port uint16
	// local is read by the handler while Update changes it.
	local atomic.Int64
	// server is nil while the port is not open.
	server *http.Server
}

var _ service.Renderer = (*ServiceHealthServer)(nil)

// NewServiceHealthServer returns a server with no ports open; the first
// Resync opens them.
func NewServiceHealthServer(cfg ServiceHealthConfig, proxy ProxyHealth, log logr.Logger) *ServiceHealthServer {
	return &ServiceHealthServer{
		cfg:    cfg,
		proxy:  proxy,
		log:    log.WithName("service-health"),
		checks: map[service.ID]*healthCheck{},
	}
}

// Resync makes the open ports those of state.
func (s *ServiceHealthServer) Resync(_ context.Context, state *service.State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setNode(&state.Node)
	for id := range s.checks {
		if _, ok := state.Services[id]; !ok {
			s.remove(id)
		}
	}
	for _, svc := range state.Services {
		s.set(svc)
	}
	s.openPending()
	return nil
}

// Update applies changes and retries the ports that could not be opened.
func (s *ServiceHealthServer) Update(_ context.Context, changes *service.Changes) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if changes.Node != nil {
		s.setNode(changes.Node)
	}
	for _, id := range changes.Delete {
		s.remove(id)
	}
	for _, svc := range changes.Upsert {
		s.set(svc)
	}
	s.openPending()
	return nil
}

// Start waits for ctx to end and then closes every port.
func (s *ServiceHealthServer) Start(ctx context.Context) error {
	<-ctx.Done()
	s.Close()
	return nil
}

// NeedLeaderElection: every node serves its own ports.
func (s *ServiceHealthServer) NeedLeaderElection() bool { return false }

// Close closes every port; later calls open none.
func (s *ServiceHealthServer) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for id := range s.checks {
		s.remove(id)
	}
}

// setNode reopens every port on the node's new addresses when they changed.
func (s *ServiceHealthServer) setNode(node *service.Node) {
	if slices.Equal(s.addrs, node.NodePortAddresses) {
		return
	}
	s.addrs = slices.Clone(node.NodePortAddresses)
	for _, hc := range s.checks {
		hc.close(s.log)
	}
}

// set records svc's port and local endpoint count; the port opens in
// openPending.
func (s *ServiceHealthServer) set(svc *service.Service) {
	hc := s.checks[svc.ID]
	if hc != nil && hc.port != svc.HealthCheckNodePort {
		s.remove(svc.ID)
		hc = nil
	}
	if svc.HealthCheckNodePort == 0 {
		return
	}
	if hc == nil {
		hc = &healthCheck{id: svc.ID, port: svc.HealthCheckNodePort}
		s.checks[svc.ID] = hc
	}
	hc.local.Store(int64(LocalReadyEndpoints(svc)))
}

func (s *ServiceHealthServer) remove(id service.ID) {
	if hc := s.checks[id]; hc != nil {
		hc.close(s.log)
		delete(s.checks, id)
	}
}

func (s *ServiceHealthServer) openPending() {
	if s.closed {
		return
	}
	for _, hc := range s.checks {
		if hc.server != nil {
			continue
		}
		if err := hc.open(s.cfg.Netns, s.addrs, s.proxy, s.log); err != nil {
			s.log.Error(err, "Cannot open the health check node port; retrying at the next sync", "service", hc.id, "port", hc.port)
		}
	}
}

// open listens on the port on every address (all addresses when there are
// none), or on none of them.
func (hc *healthCheck) open(netnsPath string, addrs []netip.Addr, proxy ProxyHealth, log logr.Logger) error {
	hosts := []string{""}
	if len(addrs) > 0 {
		hosts = hosts[:0]
		for _, a := range addrs {
			hosts = append(hosts, a.String())
		}
	}
	var listeners []net.Listener
	for _, h := range hosts {
		l, err := listen(netnsPath, net.JoinHostPort(h, strconv.Itoa(int(hc.port))))
		if err != nil {
			for _, l := range listeners {
				_ = l.Close()
			}
			return fmt.Errorf("health check of service %s: %w", hc.id, err)
		}
		listeners = append(listeners, l)
	}
	srv := &http.Server{Handler: hc.handler(proxy), ReadHeaderTimeout: readHeaderTimeout}
	for _, l := range listeners {
		go func() { _ = srv.Serve(l) }()
	}
	hc.server = srv
	log.Info("Serving the health check node port", "service", hc.id, "port", hc.port, "addresses", hosts)
	return nil
}

func (hc *healthCheck) close(log logr.Logger) {
	if hc.server == nil {
		return
	}
	if err := hc.server.Close(); err != nil {
		log.Error(err, "Closing the health check node port", "service", hc.id, "port", hc.port)
	}
	hc.server = nil
	log.Info("Closed the health check node port", "service", hc.id, "port", hc.port)
}

// serviceHealth is kube-proxy's JSON answer.
type serviceHealth struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int64 `json:"localEndpoints"`
	ServiceProxyHealthy bool  `json:"serviceProxyHealthy"`
}

func (hc *healthCheck) handler(proxy ProxyHealth) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var body serviceHealth
		body.Service.Namespace, body.Service.Name = hc.id.Namespace, hc.id.Name
		body.LocalEndpoints = hc.local.Load()
		body.ServiceProxyHealthy = proxy.Healthy()
		// The weight header lets load balancers that read it (Google's
		// WEIGHTED_MAGLEV) spread traffic by local endpoint count.
		writeJSON(w, body.LocalEndpoints > 0 && body.ServiceProxyHealthy, body,
			map[string]string{"X-Load-Balancing-Endpoint-Weight": strconv.FormatInt(body.LocalEndpoints, 10)})
	})
}

// LocalReadyEndpoints counts the distinct addresses of svc's ready
// endpoints on this node, over all its ports, as kube-proxy does: a pod
// serving ports 80 and 443 is one endpoint, and terminating endpoints do not
// count, so that a node whose local pods are all going away fails its check
// even while they still serve.
func LocalReadyEndpoints(svc *service.Service) int {
	seen := map[netip.Addr]struct{}{}
	for i := range svc.Ports {
		for _, e := range svc.Ports[i].Local {
			if e.Ready {
				seen[e.Addr] = struct{}{}
			}
		}
	}
	return len(seen)
}
