package kubectlvcoil

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil/trace"
	"github.com/vcoil/vcoil/v2/pkg/lbipam"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// The structures below are what `-o json` and `-o yaml` print: fields are
// added, never renamed or removed (docs/kubectl-vcoil.md).

// Pool is one AddressPool as `kubectl vcoil pools` shows it.
type Pool struct {
	Name string `json:"name"`
	// Usage is "Pods" or "LoadBalancer"; LoadBalancer says whether the
	// pool gives addresses to Services of type LoadBalancer.
	Usage        string   `json:"usage"`
	LoadBalancer bool     `json:"loadBalancer"`
	Subnets      []string `json:"subnets"`
	// IPv4Addresses and IPv6Addresses are the sizes of the pool's subnets
	// per family (saturating at 2^63-1).
	IPv4Addresses int64 `json:"ipv4Addresses"`
	IPv6Addresses int64 `json:"ipv6Addresses"`
	// A Pods pool: its block size, the blocks its subnets hold, the
	// AddressBlocks carved from it and the blocks left.
	BlockSizeBits   int32 `json:"blockSizeBits,omitempty"`
	BlocksMax       int64 `json:"blocksMax,omitempty"`
	BlocksAllocated int64 `json:"blocksAllocated,omitempty"`
	BlocksFree      int64 `json:"blocksFree,omitempty"`
	// A LoadBalancer pool: the addresses it gives, those held by Services
	// (status.loadBalancer.ingress within the pool), the rest, and the
	// Services ("namespace/name") that hold them.
	AddressesMax       int64    `json:"addressesMax,omitempty"`
	AddressesAllocated int64    `json:"addressesAllocated,omitempty"`
	AddressesFree      int64    `json:"addressesFree,omitempty"`
	Services           []string `json:"services,omitempty"`
	// Error says why the pool's spec could not be read.
	Error string `json:"error,omitempty"`
}

// Pools builds the pools' report from the apiserver's objects.
func Pools(pools []vcoilv2.AddressPool, blocks []vcoilv2.AddressBlock, services []corev1.Service) []Pool {
	perPool := map[string]int64{}
	for _, b := range blocks {
		perPool[b.Labels[vcoilv2.LabelPool]]++
	}
	var out []Pool
	for _, p := range pools {
		specs := make([]ipam.SubnetSpec, len(p.Spec.Subnets))
		r := Pool{Name: p.Name, Usage: string(p.Spec.Usage), LoadBalancer: p.Spec.IsLoadBalancer()}
		if r.Usage == "" {
			r.Usage = string(vcoilv2.UsagePods)
		}
		for i, s := range p.Spec.Subnets {
			specs[i] = ipam.SubnetSpec{IPv4: s.IPv4, IPv6: s.IPv6}
			var parts []string
			for _, c := range []*string{s.IPv4, s.IPv6} {
				if c == nil {
					continue
				}
				parts = append(parts, *c)
				if pfx, err := netip.ParsePrefix(*c); err == nil {
					n := hostAddresses(pfx)
					if pfx.Addr().Is4() {
						r.IPv4Addresses = addSat(r.IPv4Addresses, n)
					} else {
						r.IPv6Addresses = addSat(r.IPv6Addresses, n)
					}
				}
			}
			r.Subnets = append(r.Subnets, strings.Join(parts, "+"))
		}
		if r.LoadBalancer {
			lb, err := lbipam.ParsePool(specs)
			if err != nil {
				r.Error = err.Error()
			} else {
				r.AddressesMax = lb.Size()
				held := map[netip.Addr]bool{}
				for _, s := range services {
					if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
						continue
					}
					mine := false
					for _, in := range s.Status.LoadBalancer.Ingress {
						if a, err := netip.ParseAddr(in.IP); err == nil && lb.Contains(a) {
							held[a], mine = true, true
						}
					}
					if mine {
						r.Services = append(r.Services, s.Namespace+"/"+s.Name)
					}
				}
				sort.Strings(r.Services)
				r.AddressesAllocated = int64(len(held))
				r.AddressesFree = max(0, r.AddressesMax-r.AddressesAllocated)
			}
		} else {
			r.BlockSizeBits = p.Spec.BlockSizeBits
			pool, errs := ipam.ParsePool(int(p.Spec.BlockSizeBits), specs)
			if len(errs) > 0 {
				r.Error = errs[0].Error()
			} else {
				r.BlocksMax = pool.NumBlocks()
			}
			r.BlocksAllocated = perPool[p.Name]
			r.BlocksFree = max(0, r.BlocksMax-r.BlocksAllocated)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func hostAddresses(p netip.Prefix) int64 {
	host := p.Addr().BitLen() - p.Bits()
	if host >= 63 {
		return math.MaxInt64
	}
	return int64(1) << host
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Block is one AddressBlock as `kubectl vcoil blocks` shows it.
type Block struct {
	Node       string   `json:"node"`
	Name       string   `json:"name"`
	Pool       string   `json:"pool"`
	Prefixes   []string `json:"prefixes"`
	NodeSubnet bool     `json:"nodeSubnet,omitempty"`
	// InUse and Free come from the node's vcoild; nil when its state could
	// not be read or does not hold the block.
	InUse    *int `json:"inUse,omitempty"`
	Free     *int `json:"free,omitempty"`
	Draining bool `json:"draining,omitempty"`
}

// NodeError is a node whose state could not be read.
type NodeError struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}

// Blocks is what `kubectl vcoil blocks` prints.
type Blocks struct {
	Blocks []Block     `json:"blocks"`
	Errors []NodeError `json:"errors,omitempty"`
}

// BlocksOf builds the blocks' report: the apiserver's AddressBlocks with
// their use from the nodes' states (absent for a node that could not be
// read, whose error errs holds).
func BlocksOf(blocks []vcoilv2.AddressBlock, states map[string]*nodestate.State, errs map[string]error) Blocks {
	var out Blocks
	for _, b := range blocks {
		r := Block{Node: b.Labels[vcoilv2.LabelNode], Name: b.Name, Pool: b.Labels[vcoilv2.LabelPool], NodeSubnet: b.NodeSubnet}
		for _, c := range []*string{b.IPv4, b.IPv6} {
			if c != nil {
				r.Prefixes = append(r.Prefixes, *c)
			}
		}
		if st := states[r.Node]; st != nil {
			for _, sb := range st.Blocks {
				if sb.Name == b.Name {
					r.InUse, r.Free, r.Draining = intPtr(sb.InUse), intPtr(sb.Free), sb.Draining
				}
			}
		}
		out.Blocks = append(out.Blocks, r)
	}
	sort.Slice(out.Blocks, func(i, j int) bool {
		x, y := out.Blocks[i], out.Blocks[j]
		if x.Node != y.Node {
			return x.Node < y.Node
		}
		if x.Pool != y.Pool {
			return x.Pool < y.Pool
		}
		return x.Name < y.Name
	})
	for n, err := range errs {
		out.Errors = append(out.Errors, NodeError{Node: n, Error: err.Error()})
	}
	sort.Slice(out.Errors, func(i, j int) bool { return out.Errors[i].Node < out.Errors[j].Node })
	return out
}

func intPtr(v int) *int { return &v }

// PodReport is what `kubectl vcoil pod` prints.
type PodReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node"`
	// IPs are the pod's addresses as the apiserver has them.
	IPs []netip.Addr `json:"ips"`
	// Pool, Block, ContainerID, IfName and Interface are vcoild's record
	// of the pod's interface; NATLoopback its node's.
	Pool        string               `json:"pool,omitempty"`
	Block       string               `json:"block,omitempty"`
	ContainerID string               `json:"containerID,omitempty"`
	IfName      string               `json:"ifName,omitempty"`
	Interface   *nodestate.Interface `json:"interface,omitempty"`
	NATLoopback []netip.Addr         `json:"natLoopback,omitempty"`
	// Backs are the Service frontends (on the pod's node) whose backends
	// include the pod.
	Backs []Backed `json:"backs,omitempty"`
	// Policies is nil when vcoil's network policies do not run on the
	// node; Ingress and Egress are the pod's rules there, first match
	// wins, empty when the pod is not isolated in that direction.
	Policies *PodPolicies `json:"policies,omitempty"`
	// Egresses are the Egresses the pod uses.
	Egresses []nodestate.EgressUse `json:"egresses,omitempty"`
	// Warnings say what vcoild does not know about the pod; Errors are the
	// node state's errors.
	Warnings []string `json:"warnings,omitempty"`
	Errors   []string `json:"errors,omitempty"`
}

// Backed is a Service frontend a pod backs.
type Backed struct {
	Service  string     `json:"service"`
	Kind     string     `json:"kind"`
	Address  netip.Addr `json:"address"`
	Port     uint16     `json:"port"`
	Protocol string     `json:"protocol"`
	// TargetPort is the pod's port the frontend sends to.
	TargetPort uint16 `json:"targetPort"`
}

// PodPolicies are a pod's rules as rendered on its node.
type PodPolicies struct {
	Ingress []NumberedRule `json:"ingress,omitempty"`
	Egress  []NumberedRule `json:"egress,omitempty"`
	// The ClusterNetworkPolicy tiers, in evaluation order: Admin before
	// Ingress and Egress, Baseline after them.
	AdminIngress    []NumberedRule `json:"adminIngress,omitempty"`
	AdminEgress     []NumberedRule `json:"adminEgress,omitempty"`
	BaselineIngress []NumberedRule `json:"baselineIngress,omitempty"`
	BaselineEgress  []NumberedRule `json:"baselineEgress,omitempty"`
	// Known is false when the node's policy agent does not list the pod.
	Known bool `json:"known"`
}

// NumberedRule is a rule with its index in its list and its text; Policy
// and RuleName say where a ClusterNetworkPolicy rule comes from.
type NumberedRule struct {
	Index    int            `json:"index"`
	Text     string         `json:"text"`
	Rule     nodestate.Rule `json:"rule"`
	Policy   string         `json:"policy,omitempty"`
	RuleName string         `json:"ruleName,omitempty"`
}

// PodReportOf builds a pod's report from the Pod and its node's state.
func PodReportOf(p *corev1.Pod, st *nodestate.State) PodReport {
	r := PodReport{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName}
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			r.IPs = append(r.IPs, a)
		}
	}
	if p.Spec.HostNetwork {
		r.Warnings = append(r.Warnings, "the pod uses its node's network: vcoil gives it no address and no rules")
	}
	if st == nil {
		return r
	}
	r.NATLoopback = st.NATLoopback
	r.Errors = st.Errors
	found := false
	for _, sp := range st.Pods {
		if (sp.Namespace == p.Namespace && sp.Name == p.Name) || (sp.Namespace == "" && slices.ContainsFunc(sp.IPs, func(a netip.Addr) bool { return slices.Contains(r.IPs, a) })) {
			r.Pool, r.Block, r.ContainerID, r.IfName, r.Interface = sp.Pool, sp.Block, sp.ContainerID, sp.IfName, sp.Interface
			if len(r.IPs) == 0 {
				r.IPs = sp.IPs
			}
			found = true
			break
		}
	}
	if !found && !p.Spec.HostNetwork {
		r.Warnings = append(r.Warnings, fmt.Sprintf("vcoild on node %s holds no interface of the pod", r.Node))
	}
	if st.Services != nil {
		for _, fe := range st.Services.Frontends {
			for _, b := range fe.Backends {
				if slices.Contains(r.IPs, b.Address) {
					r.Backs = append(r.Backs, Backed{Service: fe.Service, Kind: fe.Kind, Address: fe.Address, Port: fe.Port, Protocol: fe.Protocol, TargetPort: b.Port})
				}
			}
		}
	}
	if st.Policies != nil {
		r.Policies = &PodPolicies{}
		for _, pr := range st.Policies.Pods {
			if pr.Namespace == p.Namespace && pr.Name == p.Name {
				r.Policies.Known = true
				r.Policies.Ingress = numbered(pr.Ingress)
				r.Policies.Egress = numbered(pr.Egress)
				r.Policies.AdminIngress = numberedTier(pr.AdminIngress)
				r.Policies.AdminEgress = numberedTier(pr.AdminEgress)
				r.Policies.BaselineIngress = numberedTier(pr.BaselineIngress)
				r.Policies.BaselineEgress = numberedTier(pr.BaselineEgress)
			}
		}
	}
	if st.Egress != nil {
		for _, ep := range st.Egress.Pods {
			if ep.Namespace == p.Namespace && ep.Name == p.Name {
				r.Egresses = ep.Egresses
				if ep.Error != "" {
					r.Warnings = append(r.Warnings, "egress: "+ep.Error)
				}
			}
		}
	}
	return r
}

func numberedTier(rules []nodestate.TierRule) []NumberedRule {
	var out []NumberedRule
	for i, r := range rules {
		out = append(out, NumberedRule{Index: i, Text: trace.TierRuleString(r), Rule: r.Rule, Policy: r.Policy, RuleName: r.RuleName})
	}
	return out
}

func numbered(rules []nodestate.Rule) []NumberedRule {
	var out []NumberedRule
	for i, r := range rules {
		out = append(out, NumberedRule{Index: i, Text: trace.RuleString(r), Rule: r})
	}
	return out
}
