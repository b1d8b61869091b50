package healthcheck

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// ProxyMode is what /proxyMode answers: the upstream tests and tools read it
// to learn how services are implemented, and vcoil's Linux renderer is an
// nftables one.
const ProxyMode = "nftables"

// ToBeDeletedTaint is the taint the Cluster Autoscaler puts on a node it is
// about to remove; load balancers should stop sending traffic there.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// SyncState is the service processor's progress, as the health servers read
// it.
type SyncState interface {
	// LastSync is when the dataplane last caught up with every change; zero
	// before the first sync.
	LastSync() time.Time
	// PendingSince is when the oldest change not yet in the dataplane
	// arrived; zero when nothing is pending.
	PendingSince() time.Time
}

// ProxyHealthConfig places the proxy health server.
type ProxyHealthConfig struct {
	// Addr is the server's address; empty means constants.ProxyHealthAddr.
	Addr string
	// Netns is the path of the node's network namespace; empty means the
	// process's own.
	Netns string
	// HealthTimeout is how long a change may be pending before the proxy is
	// unhealthy (kube-proxy uses twice its sync period); 0 means
	// constants.ProxyHealthTimeout.
	HealthTimeout time.Duration
	// NodeEligible says whether load balancers may send traffic to this
	// node (see EligibleNode); nil means always.
	NodeEligible func(context.Context) bool
}

// ProxyHealthServer is kube-proxy's "healthz" server. It is a
// manager.Runnable; Healthy is what the service health check ports report
// as serviceProxyHealthy.
type ProxyHealthServer struct {
	cfg  ProxyHealthConfig
	sync SyncState
	log  logr.Logger
}

// NewProxyHealthServer returns a server reading sync; it listens on Start.
func NewProxyHealthServer(cfg ProxyHealthConfig, sync SyncState, log logr.Logger) *ProxyHealthServer {
	if cfg.Addr == "" {
		cfg.Addr = constants.ProxyHealthAddr
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = constants.ProxyHealthTimeout
	}
	return &ProxyHealthServer{cfg: cfg, sync: sync, log: log.WithName("proxy-health")}
}

// proxyHealth is kube-proxy's JSON answer. LastUpdated is the current time
// when healthy, as kube-proxy keeps it for clients that compare it with
// their clock; NodeEligible is only in /healthz.
type proxyHealth struct {
	LastUpdated  time.Time `json:"lastUpdated"`
	CurrentTime  time.Time `json:"currentTime"`
	NodeEligible *bool     `json:"nodeEligible,omitempty"`
	Healthy      bool      `json:"healthy"`
}

// Healthy says whether the dataplane keeps up: nothing is pending, or the
// oldest pending change is younger than the health timeout. The node's
// eligibility does not count, as in kube-proxy.
func (s *ProxyHealthServer) Healthy() bool {
	h, _ := s.health(time.Now())
	return h
}

func (s *ProxyHealthServer) health(now time.Time) (healthy bool, lastUpdated time.Time) {
	pending := s.sync.PendingSince()
	healthy = pending.IsZero() || now.Sub(pending) < s.cfg.HealthTimeout
	if healthy {
		return true, now
	}
	return false, s.sync.LastSync()
}

// Handler serves /healthz and /livez.
func (s *ProxyHealthServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { s.answer(w, r, true) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { s.answer(w, r, false) })
	return mux
}

func (s *ProxyHealthServer) answer(w http.ResponseWriter, r *http.Request, withNode bool) {
	now := time.Now()
	healthy, last := s.health(now)
	body := proxyHealth{LastUpdated: last, CurrentTime: now, Healthy: healthy}
	ok := healthy
	if withNode {
		eligible := s.cfg.NodeEligible == nil || s.cfg.NodeEligible(r.Context())
		body.NodeEligible = &eligible
		ok = ok && eligible
	}
	writeJSON(w, ok, body, nil)
}

// Start serves until ctx ends.
func (s *ProxyHealthServer) Start(ctx context.Context) error {
	return serve(ctx, s.cfg.Netns, s.cfg.Addr, s.Handler(), s.log)
}

// NeedLeaderElection: every node serves its own health.
func (s *ProxyHealthServer) NeedLeaderElection() bool { return false }

// EligibleNode says whether load balancers may send traffic to node: not
// when it is being deleted or carries ToBeDeletedTaint, nor when it is
// unknown (nil), as kube-proxy decides.
func EligibleNode(node *corev1.Node) bool {
	if node == nil || !node.DeletionTimestamp.IsZero() {
		return false
	}
	for _, t := range node.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return false
		}
	}
	return true
}

// NodeEligibility reads the node called name from reader (vcoild's cache)
// at each request and applies EligibleNode. A node that cannot be read
// counts as not eligible, as a node kube-proxy has not seen.
func NodeEligibility(reader client.Reader, name string) func(context.Context) bool {
	return func(ctx context.Context) bool {
		var node corev1.Node
		if err := reader.Get(ctx, client.ObjectKey{Name: name}, &node); err != nil {
			return false
		}
		return EligibleNode(&node)
	}
}

// ProxyStatusConfig places the status server.
type ProxyStatusConfig struct {
	// Addr is the server's address; empty means constants.ProxyStatusAddr.
	Addr string
	// Netns is the path of the node's network namespace; empty means the
	// process's own.
	Netns string
}

// ProxyStatusServer serves kube-proxy's /proxyMode on kube-proxy's metrics
// port. It is a manager.Runnable.
type ProxyStatusServer struct {
	cfg ProxyStatusConfig
	log logr.Logger
}

// NewProxyStatusServer returns a server that listens on Start.
func NewProxyStatusServer(cfg ProxyStatusConfig, log logr.Logger) *ProxyStatusServer {
	if cfg.Addr == "" {
		cfg.Addr = constants.ProxyStatusAddr
	}
	return &ProxyStatusServer{cfg: cfg, log: log.WithName("proxy-status")}
}

// Handler serves /proxyMode.
func (s *ProxyStatusServer) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte(ProxyMode))
	})
	return mux
}

// Start serves until ctx ends.
func (s *ProxyStatusServer) Start(ctx context.Context) error {
	return serve(ctx, s.cfg.Netns, s.cfg.Addr, s.Handler(), s.log)
}

// NeedLeaderElection: every node serves.
func (s *ProxyStatusServer) NeedLeaderElection() bool { return false }

// writeJSON answers 200 when ok, else 503, with body as JSON and kube-proxy's
// headers plus extra.
func writeJSON(w http.ResponseWriter, ok bool, body any, extra map[string]string) {
	out, err := json.Marshal(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	for k, v := range extra {
		w.Header().Set(k, v)
	}
	if ok {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(out)
}
