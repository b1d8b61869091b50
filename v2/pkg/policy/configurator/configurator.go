// Package configurator turns the policies of local pods into the 6-tuple rules
// of package renderer and hands them to the registered renderers, one
// transaction per change (docs/background.md#policy-layers).
//
// It knows neither Kubernetes objects nor any network stack: its input is the
// processor's model (Pod, Policy, Match) and its output is renderer.Txn. It
// remembers the rules it last sent for each pod, so that it can send the
// same slices again when they did not change.
package configurator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// Config is what the configurator needs to know about its node.
type Config struct {
	// NATLoopback holds the node's NAT loopback addresses (at most one IPv4
	// and one IPv6; see docs/background.md#the-node-subnet-and-its-nat-loopback).
	// Traffic from them to a pod is a pod reaching itself through a service
	// and is always permitted
	// (docs/background.md#how-services-and-policies-fit-together).
	NATLoopback []netip.Addr
	// NodeAddresses are the addresses of the node itself as its pods see them
	// (the host side). Kubernetes always permits traffic between a pod and
	// its own node, so they are permitted in both directions.
	NodeAddresses []netip.Addr
}

// Txn is one change for the configurator: every local pod whose policies may
// have changed.
type Txn struct {
	// Resync is set when Pods lists every local pod with an address.
	Resync bool
	Pods   []Pod
}

// Configurator generates rules and fans them out to renderers.
type Configurator struct {
	ingressPeers []netip.Addr // always permitted sources of traffic into a pod
	egressPeers  []netip.Addr // always permitted destinations of traffic out of a pod
	renderers    []namedRenderer
	// last holds the rules last sent for each pod: a pod whose rules did
	// not change is sent the very same slices.
	last map[renderer.PodID]renderer.PodRules
	// tiers shares the tier rules of pods with the same ClusterPolicies.
	tiers tierMemo
}

type namedRenderer struct {
	name string
	r    renderer.Renderer
}

// New checks cfg and returns a configurator without renderers.
func New(cfg Config) (*Configurator, error) {
	c := &Configurator{last: make(map[renderer.PodID]renderer.PodRules)}
	if err := c.SetConfig(cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// SetConfig changes what the configurator knows about its node (the NAT
// loopback appears when the node gets its subnet). It takes effect for the
// pods of the next transactions: the caller resyncs (processor.Resync).
func (c *Configurator) SetConfig(cfg Config) error {
	var ingress, egress []netip.Addr
	v4, v6 := 0, 0
	for _, a := range cfg.NATLoopback {
		if !a.IsValid() {
			return fmt.Errorf("NAT loopback %v: not an address", a)
		}
		if a.Unmap().Is4() {
			v4++
		} else {
			v6++
		}
		ingress = append(ingress, a.Unmap())
	}
	if v4 > 1 || v6 > 1 {
		return fmt.Errorf("NAT loopback %v: at most one address per family", cfg.NATLoopback)
	}
	for _, a := range cfg.NodeAddresses {
		if !a.IsValid() {
			return fmt.Errorf("node address %v: not an address", a)
		}
		ingress = append(ingress, a.Unmap())
		egress = append(egress, a.Unmap())
	}
	c.ingressPeers, c.egressPeers = ingress, egress
	// The Admin tiers begin with the always accepted peers.
	c.tiers = tierMemo{}
	return nil
}

// Register adds a renderer; every later transaction goes to it. name is used
// in errors only.
func (c *Configurator) Register(name string, r renderer.Renderer) {
	c.renderers = append(c.renderers, namedRenderer{name: name, r: r})
}

// Rules returns the renderer's view of one pod: GenerateRules and
// GenerateTier for both directions, plus the permits no policy can take
// away (first in the Admin tier when the pod has any tier rule).
func (c *Configurator) Rules(p *Pod) renderer.PodRules {
	pr := renderer.PodRules{Pod: p.ID, IPs: p.IPs, SourcePrefixes: p.SourcePrefixes, Removed: p.Removed}
	if p.Removed {
		return pr
	}
	pr.Ingress = GenerateRules(renderer.Ingress, p.Policies, c.ingressPeers)
	pr.Egress = GenerateRules(renderer.Egress, p.Policies, c.egressPeers)
	for d := range pr.NetworkPolicies {
		pr.NetworkPolicies[d] = isolating(renderer.Direction(d), p.Policies, nil)
	}
	var m tierMemo
	pr.Admin[renderer.Ingress], pr.Baseline[renderer.Ingress] = m.tiers(renderer.Ingress, p, c.ingressPeers)
	pr.Admin[renderer.Egress], pr.Baseline[renderer.Egress] = m.tiers(renderer.Egress, p, c.egressPeers)
	return pr
}

// isolating names the policies that isolate a pod in direction d, sorted;
// previous when it is the same list.
func isolating(d renderer.Direction, policies []*Policy, previous []string) []string {
	var out []string
	for _, p := range policies {
		if p.isolates(d) {
			out = append(out, p.ID.String())
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if slices.Equal(out, previous) {
		return previous
	}
	return out
}

// rules is Rules reusing the slices last sent for the pod when the rules
// are the same, and remembering what it returns.
func (c *Configurator) rules(p *Pod) renderer.PodRules {
	if p.Removed {
		delete(c.last, p.ID)
		return renderer.PodRules{Pod: p.ID, IPs: p.IPs, Removed: true}
	}
	prev := c.last[p.ID]
	pr := renderer.PodRules{Pod: p.ID, IPs: p.IPs, SourcePrefixes: p.SourcePrefixes}
	pr.Ingress = generateRules(renderer.Ingress, p.Policies, c.ingressPeers, prev.Ingress)
	pr.Egress = generateRules(renderer.Egress, p.Policies, c.egressPeers, prev.Egress)
	for d := range pr.NetworkPolicies {
		pr.NetworkPolicies[d] = isolating(renderer.Direction(d), p.Policies, prev.NetworkPolicies[d])
	}
	for d, peers := range [2][]netip.Addr{c.ingressPeers, c.egressPeers} {
		pr.Admin[d], pr.Baseline[d] = c.tiers.tiers(renderer.Direction(d), p, peers)
	}
	c.last[p.ID] = pr
	return pr
}

// Configure renders txn: one renderer transaction holding the rules of every
// pod in txn, given to every renderer. All renderers are tried; the error
// names each that failed.
func (c *Configurator) Configure(ctx context.Context, txn Txn) error {
	rt := renderer.Txn{Resync: txn.Resync, Pods: make([]renderer.PodRules, 0, len(txn.Pods))}
	for i := range txn.Pods {
		if p := &txn.Pods[i]; !p.Removed && len(p.IPs) == 0 {
			return fmt.Errorf("configure pod %s: it has no address", p.ID)
		}
	}
	if txn.Resync {
		listed := make(map[renderer.PodID]bool, len(txn.Pods))
		for i := range txn.Pods {
			listed[txn.Pods[i].ID] = true
		}
		for id := range c.last {
			if !listed[id] {
				delete(c.last, id)
			}
		}
	}
	for i := range txn.Pods {
		rt.Pods = append(rt.Pods, c.rules(&txn.Pods[i]))
	}
	var errs []error
	for _, nr := range c.renderers {
		if err := nr.r.Render(ctx, rt); err != nil {
			errs = append(errs, fmt.Errorf("renderer %s: %w", nr.name, err))
		}
	}
	return errors.Join(errs...)
}
