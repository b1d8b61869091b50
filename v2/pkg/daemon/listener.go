package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"

	"google.golang.org/grpc"

	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// Listener serves the CNI service on a UNIX socket. It is a manager.Runnable.
type Listener struct {
	Server *Server
	// Socket is the path of the UNIX socket (mode 0600: only root talks to
	// vcoild).
	Socket string
	// Before runs once before the socket opens (recovery): no CNI request is
	// answered from a half-rebuilt state.
	Before func(ctx context.Context) error

	serving atomic.Bool
}

// Start listens until ctx ends.
func (l *Listener) Start(ctx context.Context) error {
	if l.Before != nil {
		if err := l.Before(ctx); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(l.Socket), 0o755); err != nil {
		return fmt.Errorf("create socket directory: %w", err)
	}
	// A socket left by a killed vcoild would make Listen fail.
	if err := os.Remove(l.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale socket %s: %w", l.Socket, err)
	}
	ln, err := net.Listen("unix", l.Socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", l.Socket, err)
	}
	if err := os.Chmod(l.Socket, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("restrict socket %s: %w", l.Socket, err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(l.recoverPanics))
	cnirpc.RegisterCNIServer(srv, l.Server)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	l.serving.Store(true)
	l.Server.log.Info("serving CNI requests", "socket", l.Socket)
	select {
	case <-ctx.Done():
		l.serving.Store(false)
		srv.GracefulStop()
		return nil
	case err := <-errc:
		l.serving.Store(false)
		return fmt.Errorf("gRPC server on %s: %w", l.Socket, err)
	}
}

// NeedLeaderElection: every node's vcoild serves.
func (l *Listener) NeedLeaderElection() bool { return false }

// Serving reports whether the socket accepts requests, for readiness: it
// dials the socket, as the CNI binary does.
func (l *Listener) Serving() error {
	if !l.serving.Load() {
		return errors.New("the CNI gRPC server is not serving")
	}
	c, err := net.Dial("unix", l.Socket)
	if err != nil {
		return fmt.Errorf("the CNI socket does not accept connections: %w", err)
	}
	return c.Close()
}

// recoverPanics turns a panic in a handler into an error for that request
// instead of killing every pod's network operations.
func (l *Listener) recoverPanics(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			l.Server.log.Error(fmt.Errorf("%v", r), "panic in CNI handler", "method", info.FullMethod, "stack", string(debug.Stack()))
			err = cniError(cnirpc.ErrorCode_INTERNAL, "", "vcoild: internal error in %s", info.FullMethod)
		}
	}()
	return handler(ctx, req)
}
