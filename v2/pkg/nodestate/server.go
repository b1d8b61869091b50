package nodestate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
)

// DefaultTimeout bounds the collection of one State: a source that hangs
// (VPP not answering) is cut off and named in State.Errors, and the State is
// served with what the others filled.
const DefaultTimeout = 10 * time.Second

// ServerConfig wires a Server.
type ServerConfig struct {
	// Addr is where the server listens: a loopback address and port
	// (CheckAddr). Empty turns the server off.
	Addr string
	// Flag names the setting Addr comes from ("--state-addr"), for errors.
	Flag string
	// Node is the Node's name, Dataplane "linux" or "vpp".
	Node      string
	Dataplane string
	// Sources fill the State, in this order.
	Sources []Named
	// Timeout bounds one collection; 0 means DefaultTimeout.
	Timeout time.Duration
	Log     logr.Logger
}

// Server serves the node's State as JSON on GET Path. It is a
// controller-runtime Runnable that every replica runs: the state is the
// node's own, there is no leader.
type Server struct {
	cfg     ServerConfig
	version string
	now     func() time.Time
}

// NewServer checks cfg (the address must be a loopback one) and returns
// the server. It listens only when started.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Flag == "" {
		cfg.Flag = "state address"
	}
	if err := CheckAddr(cfg.Addr); err != nil {
		return nil, fmt.Errorf("%s %q: %w", cfg.Flag, cfg.Addr, err)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Server{cfg: cfg, version: BuildVersion(), now: time.Now}, nil
}

// CheckAddr accepts "" (off) and host:port addresses whose host is a
// loopback address (127.0.0.0/8 or ::1). The state names every pod, address
// and rule of the node: it is read through the apiserver's port-forward,
// which authenticates and authorizes each use, so nothing may answer on the
// node's network. Host names are refused too: "localhost" may resolve to
// anything.
func CheckAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want a loopback address and port, as 127.0.0.1:9390: %w", err)
	}
	if port == "" {
		return errors.New("want a loopback address and port, as 127.0.0.1:9390: the port is empty")
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Unmap().IsLoopback() || ip.Zone() != "" {
		return fmt.Errorf("host %q is not a loopback address (127.0.0.0/8 or ::1): the node state is served on the node's loopback only and read through the apiserver", host)
	}
	return nil
}

// NeedLeaderElection is false: every vcoild serves its own node.
func (s *Server) NeedLeaderElection() bool { return false }

// Start listens on the address until ctx ends. With no address it returns
// at once.
func (s *Server) Start(ctx context.Context) error {
	if s.cfg.Addr == "" {
		return nil
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen for the node state on %s (%s): %w", s.cfg.Addr, s.cfg.Flag, err)
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.cfg.Log.Info("serving the node state", "addr", ln.Addr().String(), "path", Path)
	select {
	case err := <-errc:
		return fmt.Errorf("serve the node state on %s: %w", s.cfg.Addr, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	return nil
}

// Handler serves GET Path.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+Path, func(w http.ResponseWriter, r *http.Request) {
		st := s.Collect(r.Context())
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			s.cfg.Log.Error(err, "cannot write the node state", "remote", r.RemoteAddr)
		}
	})
	return mux
}

// Collect runs the sources in order, within the timeout, and returns the
// State. A source's error is recorded as "name: error"; the sources after
// it still run, those after the timeout see an ended context.
func (s *Server) Collect(ctx context.Context) *State {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	st := &State{APIVersion: APIVersion, Node: s.cfg.Node, Dataplane: s.cfg.Dataplane, Version: s.version}
	for _, src := range s.cfg.Sources {
		if err := src.Source.Fill(ctx, st); err != nil {
			st.Errors = append(st.Errors, src.Name+": "+err.Error())
		}
	}
	st.Collected = s.now().UTC()
	return st
}

// BuildVersion is the running program's version: its module's version when
// it was built from a tagged module, else the VCS revision the go tool
// recorded (with "-dirty" for a modified tree), else "unknown".
func BuildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return versionOf(info)
}

func versionOf(info *debug.BuildInfo) string {
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if modified {
		rev += "-dirty"
	}
	return rev
}
