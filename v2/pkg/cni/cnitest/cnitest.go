// Package cnitest helps test both ends of the CNI contract: it serves a
// cnirpc.CNIServer on a UNIX socket in a temporary directory, provides
// sockets where no daemon answers, and a stand-in for vcoild that answers
// with canned results and records what it received. Tests that run the vcoil
// binary the way a container runtime does build it with gobuild.
//
// It is for tests only and does nothing privileged.
package cnitest

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// SocketDir returns a new directory for a socket, removed when the test
// ends. Not t.TempDir: its path holds the test's name and can exceed the
// 107 bytes a UNIX socket path may have.
func SocketDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "vcoil-")
	if err != nil {
		tb.Fatalf("create a socket directory: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Serve serves srv on a new UNIX socket until the test ends and returns
// the socket's path.
func Serve(tb testing.TB, srv cnirpc.CNIServer) string {
	tb.Helper()
	socket := filepath.Join(SocketDir(tb), "vcoild.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		tb.Fatalf("listen on %s: %v", socket, err)
	}
	gs := grpc.NewServer()
	cnirpc.RegisterCNIServer(gs, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(l)
	}()
	tb.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return socket
}

// DeadSocket returns the path of a socket file that nobody listens on, as
// a crashed daemon leaves behind: connecting to it is refused.
func DeadSocket(tb testing.TB) string {
	tb.Helper()
	socket := filepath.Join(SocketDir(tb), "vcoild.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		tb.Fatalf("listen on %s: %v", socket, err)
	}
	l.SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		tb.Fatalf("close %s: %v", socket, err)
	}
	return socket
}

// MissingSocket returns a socket path in an existing directory where no
// file exists, as on a node where vcoild has not started yet.
func MissingSocket(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(SocketDir(tb), "vcoild.sock")
}

// Answers are what a Daemon answers. A nil error is a success.
type Answers struct {
	AddResult []byte
	Status    *cnirpc.StatusResponse

	AddErr, DelErr, CheckErr, StatusErr, GCErr error

	// Hang makes every call wait until its caller gives up.
	Hang bool
}

// Call is one request a Daemon received.
type Call struct {
	// Verb is "Add", "Del", "Check", "Status" or "GC".
	Verb string
	// Args is the request of Add, Del and Check.
	Args *cnirpc.CNIArgs
	// GC is the request of GC.
	GC *cnirpc.GCRequest
}

// Daemon stands in for vcoild: it answers with its Answers and records
// every request. It is safe for concurrent use.
type Daemon struct {
	cnirpc.UnimplementedCNIServer

	mu      sync.Mutex
	answers Answers
	calls   []Call
}

// NewDaemon returns a Daemon that answers with a.
func NewDaemon(a Answers) *Daemon {
	return &Daemon{answers: a}
}

// Answer replaces the answers for the calls that follow.
func (d *Daemon) Answer(a Answers) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.answers = a
}

// Calls returns the requests received so far, oldest first.
func (d *Daemon) Calls() []Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Call(nil), d.calls...)
}

// record stores c and returns the answers in force.
func (d *Daemon) record(ctx context.Context, c Call) (Answers, error) {
	d.mu.Lock()
	d.calls = append(d.calls, c)
	a := d.answers
	d.mu.Unlock()
	if a.Hang {
		<-ctx.Done()
		return a, errors.New("the caller gave up")
	}
	return a, nil
}

func (d *Daemon) Add(ctx context.Context, in *cnirpc.CNIArgs) (*cnirpc.AddResponse, error) {
	a, err := d.record(ctx, Call{Verb: "Add", Args: proto.CloneOf(in)})
	if err != nil {
		return nil, err
	}
	if a.AddErr != nil {
		return nil, a.AddErr
	}
	return &cnirpc.AddResponse{Result: a.AddResult}, nil
}

func (d *Daemon) Del(ctx context.Context, in *cnirpc.CNIArgs) (*cnirpc.Empty, error) {
	a, err := d.record(ctx, Call{Verb: "Del", Args: proto.CloneOf(in)})
	if err != nil {
		return nil, err
	}
	return &cnirpc.Empty{}, a.DelErr
}

func (d *Daemon) Check(ctx context.Context, in *cnirpc.CNIArgs) (*cnirpc.Empty, error) {
	a, err := d.record(ctx, Call{Verb: "Check", Args: proto.CloneOf(in)})
	if err != nil {
		return nil, err
	}
	return &cnirpc.Empty{}, a.CheckErr
}

func (d *Daemon) Status(ctx context.Context, _ *cnirpc.Empty) (*cnirpc.StatusResponse, error) {
	a, err := d.record(ctx, Call{Verb: "Status"})
	if err != nil {
		return nil, err
	}
	if a.StatusErr != nil {
		return nil, a.StatusErr
	}
	if a.Status == nil {
		return &cnirpc.StatusResponse{}, nil
	}
	return a.Status, nil
}

func (d *Daemon) GC(ctx context.Context, in *cnirpc.GCRequest) (*cnirpc.Empty, error) {
	a, err := d.record(ctx, Call{Verb: "GC", GC: proto.CloneOf(in)})
	if err != nil {
		return nil, err
	}
	return &cnirpc.Empty{}, a.GCErr
}
