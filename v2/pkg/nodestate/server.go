package nodestate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// DefaultTimeout bounds the collection of one State: a source that hangs
// (VPP not answering) is cut off and named in State.Errors, and the State is
// served with what the others filled.
const DefaultTimeout = 10 * time.Second

// The server answers any process of the node (the loopback is shared by
// hostNetwork pods), so its work is capped: one request at a time per peer
// address, DefaultMaxInFlight collections at once, and a State of at most
// DefaultMaxResponseBytes. A request beyond a cap is refused at once with
// 429 and Retry-After: it costs no collection, whose sources read the
// parts' state under the locks their syncs take.
const (
	DefaultMaxInFlight      = 2
	DefaultMaxResponseBytes = 64 << 20
)

// retryAfter is what a refused client is told to wait, in seconds.
const retryAfter = "1"

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
	// MaxInFlight caps the collections that run at once, whoever asks;
	// 0 means DefaultMaxInFlight.
	MaxInFlight int
	// MaxResponseBytes caps the encoded State; 0 means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int
	Log              logr.Logger
}

// Server serves the node's State as JSON on GET Path. It is a
// controller-runtime Runnable that every replica runs: the state is the
// node's own, there is no leader.
type Server struct {
	cfg     ServerConfig
	version string
	now     func() time.Time

	// slots holds a token per running collection (MaxInFlight).
	slots chan struct{}
	mu    sync.Mutex
	// busy are the peer addresses (IPs, without port) being served.
	busy map[string]bool
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
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	return &Server{
		cfg: cfg, version: BuildVersion(), now: time.Now,
		slots: make(chan struct{}, cfg.MaxInFlight), busy: map[string]bool{},
	}, nil
}

// CheckAddr accepts "" (off) and host:port addresses whose host is a
// loopback address (127.0.0.0/8 or ::1); vcoild checks its profiles'
// address (--pprof-addr) with it too. The state names every pod, address
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
		return fmt.Errorf("host %q is not a loopback address (127.0.0.0/8 or ::1): served on the node's loopback only (the node state is read through the apiserver's port-forward)", host)
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
	// A client that sends or reads slowly holds a connection, not a
	// collection: the timeouts end it.
	srv := &http.Server{
		Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: s.cfg.Timeout + 30*time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
	}
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
		done, why := s.admit(r.RemoteAddr)
		if done == nil {
			w.Header().Set("Retry-After", retryAfter)
			http.Error(w, why, http.StatusTooManyRequests)
			return
		}
		defer done()
		st := s.Collect(r.Context())
		var buf bytes.Buffer
		enc := json.NewEncoder(&limitedWriter{w: &buf, max: s.cfg.MaxResponseBytes})
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			s.cfg.Log.Error(err, "cannot encode the node state", "remote", r.RemoteAddr)
			http.Error(w, fmt.Sprintf("cannot encode the node state: %v", err), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if _, err := w.Write(buf.Bytes()); err != nil {
			s.cfg.Log.Error(err, "cannot write the node state", "remote", r.RemoteAddr)
		}
	})
	return mux
}

// admit takes the peer's turn and a collection slot; done gives them
// back. A nil done refuses the request, why says which cap it met.
func (s *Server) admit(remote string) (done func(), why string) {
	peer := remote
	if host, _, err := net.SplitHostPort(remote); err == nil {
		peer = host
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[peer] {
		return nil, "a request of this client is being served: one at a time"
	}
	select {
	case s.slots <- struct{}{}:
	default:
		return nil, fmt.Sprintf("%d requests are being served: try again later", cap(s.slots))
	}
	s.busy[peer] = true
	return func() {
		s.mu.Lock()
		delete(s.busy, peer)
		s.mu.Unlock()
		<-s.slots
	}, ""
}

// limitedWriter fails a write that would pass its limit, so that a State
// beyond MaxResponseBytes is refused whole rather than sent cut off.
type limitedWriter struct {
	w            io.Writer
	max, written int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.written+len(p) > l.max {
		return 0, fmt.Errorf("the node state is larger than %d bytes (the server's cap)", l.max)
	}
	l.written += len(p)
	return l.w.Write(p)
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
