package agent

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// rendered wraps the agent's renderer and keeps what the node's state
// shows of it: each pod's rules as the renderer last rendered them
// successfully, and how its transactions went. A failed transaction
// leaves the rules kept as they were.
type rendered struct {
	r     renderer.Renderer
	name  string
	clock func() time.Time
	// onFailure, when set, hears of each failed transaction (the agent's
	// repair).
	onFailure func(error)

	mu   sync.Mutex
	pods map[renderer.PodID]renderer.PodRules
	sync nodestate.Sync
}

func newRendered(name string, r renderer.Renderer) *rendered {
	return &rendered{r: r, name: name, clock: time.Now, pods: map[renderer.PodID]renderer.PodRules{}}
}

// Render renders txn with the wrapped renderer and, when it succeeded,
// keeps the rules of its pods (a resync's pods replace all).
func (d *rendered) Render(ctx context.Context, txn renderer.Txn) error {
	start := d.clock()
	err := d.r.Render(ctx, txn)
	end := d.clock()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sync.Attempted = end
	if err != nil {
		d.sync.Error = err.Error()
		d.sync.Errors++
		if d.onFailure != nil {
			d.onFailure(err)
		}
		return err
	}
	d.sync.Error, d.sync.Last = "", end
	d.sync.Duration = nodestate.Seconds(end.Sub(start).Seconds())
	if txn.Resync {
		clear(d.pods)
	}
	for _, pr := range txn.Pods {
		if pr.Removed {
			delete(d.pods, pr.Pod)
		} else {
			// The configurator never changes the slices it sent.
			d.pods[pr.Pod] = pr
		}
	}
	return nil
}

// deniedCounter is a renderer that counts its denied packets per policy
// (the nftables renderer, and the VPP ACL renderer with its counters).
type deniedCounter interface {
	Denied(ctx context.Context) ([]renderer.Denied, error)
}

// policies is the node state's policies section, but for AlwaysAllowed.
func (d *rendered) policies(ctx context.Context) *nodestate.Policies {
	d.mu.Lock()
	pods, sync := maps.Clone(d.pods), d.sync
	d.mu.Unlock()
	out := &nodestate.Policies{Renderer: d.name, Sync: sync}
	for _, id := range slices.SortedFunc(maps.Keys(pods), renderer.PodID.Compare) {
		out.Pods = append(out.Pods, PodRulesState(pods[id]))
	}
	if dc, ok := d.r.(deniedCounter); ok {
		// The counters are a view: a failed read leaves them out.
		if denied, err := dc.Denied(ctx); err == nil {
			for _, x := range denied {
				out.Denied = append(out.Denied, nodestate.Denied{Tier: x.Tier, Policy: x.Policy, Group: x.Group,
					Direction: x.Direction.String(), Packets: x.Packets})
			}
		}
	}
	return out
}

// StateSource fills the node state's policies section: the renderer's
// name and transactions, every local pod's rules as last rendered, and the
// sources every pod accepts whatever its policies (the node's addresses
// and NAT loopback, which the rules permit too).
func (a *Agent) StateSource() nodestate.Source {
	return nodestate.SourceFunc(func(ctx context.Context, s *nodestate.State) error {
		out := a.rendered.policies(ctx)
		// The node's addresses are the feed's to guard; a render in
		// progress holds the lock for its duration.
		_ = a.feed.Locked(func(*pcache.Cache) error {
			out.AlwaysAllowed = append(slices.Clone(a.node.NodeAddresses), a.node.NATLoopback...)
			return nil
		})
		slices.SortFunc(out.AlwaysAllowed, netip.Addr.Compare)
		out.AlwaysAllowed = slices.Compact(out.AlwaysAllowed)
		s.Policies = out
		return nil
	})
}

// PodRulesState is one pod's rules as the node's state shows them.
func PodRulesState(pr renderer.PodRules) nodestate.PodRules {
	return nodestate.PodRules{
		Namespace: pr.Pod.Namespace, Name: pr.Pod.Name,
		IPs:     slices.Clone(pr.IPs),
		Ingress: rulesState(pr.Ingress),
		Egress:  rulesState(pr.Egress),

		AdminIngress:    tierState(pr.Admin[renderer.Ingress]),
		AdminEgress:     tierState(pr.Admin[renderer.Egress]),
		BaselineIngress: tierState(pr.Baseline[renderer.Ingress]),
		BaselineEgress:  tierState(pr.Baseline[renderer.Egress]),
	}
}

func tierState(rules []renderer.TierRule) []nodestate.TierRule {
	if len(rules) == 0 {
		return nil
	}
	out := make([]nodestate.TierRule, 0, len(rules))
	for _, r := range rules {
		m := r.Match
		out = append(out, nodestate.TierRule{
			Rule: nodestate.Rule{
				Action: r.Action.String(), Protocol: m.Protocol.String(),
				Src: m.SrcNetwork, Dst: m.DstNetwork,
				SrcPorts: portsState(m.SrcPort), DstPorts: portsState(m.DstPort),
			},
			Policy: r.Policy, RuleName: r.Name,
		})
	}
	return out
}

func rulesState(rules []renderer.Rule) []nodestate.Rule {
	if len(rules) == 0 {
		return nil
	}
	out := make([]nodestate.Rule, 0, len(rules))
	for _, r := range rules {
		out = append(out, nodestate.Rule{
			Action: r.Action.String(), Protocol: r.Protocol.String(),
			Src: r.SrcNetwork, Dst: r.DstNetwork,
			SrcPorts: portsState(r.SrcPort), DstPorts: portsState(r.DstPort),
		})
	}
	return out
}

// portsState is a port range, nil for every port.
func portsState(r renderer.PortRange) *nodestate.PortRange {
	if r.IsAny() {
		return nil
	}
	return &nodestate.PortRange{First: r.First, Last: r.Last}
}
