package service

import "context"

// State is the whole service configuration of a node.
type State struct {
	Node     Node
	Services map[ID]*Service
}

// Changes are what changed since the previous Resync or Update. One Changes
// is one transaction in the dataplane.
type Changes struct {
	// Node is set when the node's own data changed (addresses, zone, NAT
	// loopback); the renderer re-renders what depends on it.
	Node *Node
	// Upsert holds services added or changed, each in full.
	Upsert []*Service
	// Delete names services that are gone (or no longer served by vcoil).
	Delete []ID
}

// Empty says whether there is nothing to apply.
func (c *Changes) Empty() bool { return c.Node == nil && len(c.Upsert) == 0 && len(c.Delete) == 0 }

// Renderer programs one dataplane from the service model. The processor
// calls Resync first (and then periodically, to repair drift), then Update
// for each batch of changes; calls never overlap. A renderer must leave the
// dataplane unchanged when a call fails, and expect the next Resync to fix
// whatever is wrong. Services and Node passed in are never modified by the
// caller afterwards; the renderer may keep them.
type Renderer interface {
	Resync(ctx context.Context, state *State) error
	Update(ctx context.Context, changes *Changes) error
}
