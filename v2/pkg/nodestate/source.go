package nodestate

import "context"

// A Source fills its part of a State: the daemon its pods and blocks, the
// dataplane the pods' interfaces and its objects, the service proxy, the
// policy agent and the egress agent their sections. The server runs the
// sources in order, so that a later one may complete what an earlier one
// filled (the dataplane adds the interfaces of the daemon's pods). An
// error is recorded in State.Errors under the source's name and the other
// sources still run.
type Source interface {
	Fill(ctx context.Context, s *State) error
}

// SourceFunc is a function as a Source.
type SourceFunc func(ctx context.Context, s *State) error

// Fill calls f.
func (f SourceFunc) Fill(ctx context.Context, s *State) error { return f(ctx, s) }

// Named is a Source with the name its errors are recorded under.
type Named struct {
	Name   string
	Source Source
}
