// Package processor is the policy processor of the Contiv/VPP design
// (docs/background.md#policy-layers). It watches the policy cache, decides
// for each change which local pods may have an outdated configuration,
// postpones pods that have no address yet, and turns the policies of each such
// pod into vcoil's policy model (package configurator): label selectors
// resolved to pods and their addresses, namespaces expanded into their pods,
// named ports resolved per destination pod. Each change becomes one
// configurator transaction.
//
// Local pods are those whose spec.nodeName is the processor's node name;
// pods elsewhere are only peers. The cache shows both kinds as a
// cache.PodView (a Pod, or the PodEndpoint of another node's pod), from
// which the processor derives, once per object, what policies read of a
// pod (podInfo). The processor keeps policies parsed and their peers
// resolved between changes, and re-resolves a policy only when something
// it references changes.
//
// It does no I/O and starts no goroutines; a Processor is not safe for
// concurrent use (the cache's Feed serializes calls).
package processor

import (
	"context"
	"fmt"
	"iter"
	"net/netip"
	"slices"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// Lookup is what the processor reads from the policy cache.
type Lookup interface {
	// Pod returns the zero view for an unknown pod.
	Pod(namespace, name string) cache.PodView
	Namespace(name string) *corev1.Namespace
	Pods() []cache.PodView
	PodsInNamespace(namespace string, sel labels.Selector) []cache.PodView
	Namespaces(sel labels.Selector) []*corev1.Namespace
	Policies() []*networkingv1.NetworkPolicy
	ClusterPolicies() []*cnp.ClusterNetworkPolicy
}

// Configurator receives the processor's transactions.
type Configurator interface {
	Configure(ctx context.Context, txn configurator.Txn) error
}

// Processor implements the cache's Watcher.
type Processor struct {
	node   string
	lookup Lookup
	out    Configurator
	log    logr.Logger

	policies    map[configurator.PolicyID]*parsedPolicy
	byNamespace map[string]map[configurator.PolicyID]*parsedPolicy
	// anyNamespace are the policies that may reference a pod of any
	// namespace (parsedPolicy.crossesNamespaces): with byNamespace, a pod's
	// change asks only the policies that can concern it, not every one of
	// the cluster (at 2,000 policies, a quarter of vcoild's CPU under 20
	// pod events a second went to asking them all).
	anyNamespace map[configurator.PolicyID]*parsedPolicy
	compiled     map[configurator.PolicyID]*compiledPolicy
	infos        map[renderer.PodID]*podInfo
	// configured holds the local pods given to the configurator, with the
	// addresses they were given with, so that their removal can be sent.
	configured map[renderer.PodID][]netip.Addr
	// clusters are the ClusterNetworkPolicies by name; tiers the Admin
	// (0) and Baseline (1) ones in evaluation order.
	clusters map[string]*parsedCluster
	tiers    [2][]*parsedCluster
}

// New returns a processor for the pods of node nodeName. It does nothing
// until the cache calls Resync.
func New(nodeName string, lookup Lookup, out Configurator, log logr.Logger) *Processor {
	p := &Processor{node: nodeName, lookup: lookup, out: out, log: log}
	p.reset()
	return p
}

func (p *Processor) reset() {
	p.policies = make(map[configurator.PolicyID]*parsedPolicy)
	p.byNamespace = make(map[string]map[configurator.PolicyID]*parsedPolicy)
	p.anyNamespace = make(map[configurator.PolicyID]*parsedPolicy)
	p.compiled = make(map[configurator.PolicyID]*compiledPolicy)
	p.infos = make(map[renderer.PodID]*podInfo)
	p.configured = make(map[renderer.PodID][]netip.Addr)
	p.clusters = make(map[string]*parsedCluster)
	p.tiers = [2][]*parsedCluster{}
}

// Resync forgets everything and configures every local pod with an address.
func (p *Processor) Resync(ctx context.Context) error {
	p.reset()
	for _, np := range p.lookup.Policies() {
		p.addPolicy(np)
	}
	for _, pol := range p.lookup.ClusterPolicies() {
		p.addCluster(pol)
	}
	p.sortClusters()
	affected := make(map[renderer.PodID]struct{})
	for _, pod := range p.lookup.Pods() {
		if i := p.info(pod); i.node == p.node && i.endpoint() {
			affected[i.id] = struct{}{}
		}
	}
	return p.configure(ctx, affected, true)
}

// PolicyChanged reconfigures the local pods the policy selected before and
// selects after the change.
func (p *Processor) PolicyChanged(ctx context.Context, before, after *networkingv1.NetworkPolicy) error {
	if before != nil && after != nil && equality.Semantic.DeepEqual(before.Spec, after.Spec) {
		return nil
	}
	affected := make(map[renderer.PodID]struct{})
	if before != nil {
		id := configurator.PolicyID{Namespace: before.Namespace, Name: before.Name}
		if old := p.policies[id]; old != nil {
			p.addLocalPodsSelectedBy(affected, old)
			p.removePolicy(old)
		}
	}
	if after != nil {
		p.addLocalPodsSelectedBy(affected, p.addPolicy(after))
	}
	return p.configure(ctx, affected, false)
}

// PodChanged reconfigures the pod itself, if local, and the local pods with a
// policy that references the pod before or after the change (through its
// labels, its namespace's labels, its addresses or its named ports).
func (p *Processor) PodChanged(ctx context.Context, before, after cache.PodView) error {
	var b, a *podInfo
	if !before.IsZero() {
		b = newPodInfo(before)
	}
	if !after.IsZero() {
		a = p.info(after)
	} else if b != nil {
		delete(p.infos, b.id)
		// Forget the per-pod models of the pod (only policies of its own
		// namespace select it).
		for id := range p.byNamespace[b.id.Namespace] {
			if cp := p.compiled[id]; cp != nil {
				delete(cp.models, b.id)
			}
		}
	}
	if sameForPolicies(b, a) {
		return nil
	}
	affected := make(map[renderer.PodID]struct{})
	for _, x := range []*podInfo{b, a} {
		if x == nil {
			continue
		}
		if x.node == p.node {
			affected[x.id] = struct{}{}
		}
		ns := p.lookup.Namespace(x.id.Namespace)
		for pp := range p.mayReference(x.id.Namespace) {
			if pp.references(x, ns) {
				delete(p.compiled, pp.id)
				p.addLocalPodsSelectedBy(affected, pp)
			}
		}
	}
	p.clustersReferencing(affected, b, a)
	return p.configure(ctx, affected, false)
}

// NamespaceChanged reconfigures the local pods with a policy whose namespace
// selectors match the namespace before or after the change.
func (p *Processor) NamespaceChanged(ctx context.Context, before, after *corev1.Namespace) error {
	if before != nil && after != nil && equality.Semantic.DeepEqual(before.Labels, after.Labels) {
		return nil
	}
	affected := make(map[renderer.PodID]struct{})
	for _, ns := range []*corev1.Namespace{before, after} {
		if ns == nil {
			continue
		}
		for _, pp := range p.policies {
			if pp.referencesNamespace(ns.Labels) {
				delete(p.compiled, pp.id)
				p.addLocalPodsSelectedBy(affected, pp)
			}
		}
		p.clustersOfNamespace(affected, ns.Name, ns.Labels)
	}
	return p.configure(ctx, affected, false)
}

func (p *Processor) addPolicy(np *networkingv1.NetworkPolicy) *parsedPolicy {
	pp := parsePolicy(np)
	for _, err := range pp.problems {
		p.log.Info("part of a NetworkPolicy is ignored and permits nothing", "policy", pp.id.String(), "reason", err.Error())
	}
	p.policies[pp.id] = pp
	inner := p.byNamespace[pp.id.Namespace]
	if inner == nil {
		inner = make(map[configurator.PolicyID]*parsedPolicy)
		p.byNamespace[pp.id.Namespace] = inner
	}
	inner[pp.id] = pp
	if pp.crossesNamespaces() {
		p.anyNamespace[pp.id] = pp
	} else {
		delete(p.anyNamespace, pp.id)
	}
	delete(p.compiled, pp.id)
	return pp
}

// mayReference yields, once each, the policies that may reference a pod of
// namespace: those of the namespace and those that cross namespaces.
func (p *Processor) mayReference(namespace string) iter.Seq[*parsedPolicy] {
	return func(yield func(*parsedPolicy) bool) {
		for _, pp := range p.byNamespace[namespace] {
			if !yield(pp) {
				return
			}
		}
		for _, pp := range p.anyNamespace {
			if pp.id.Namespace != namespace && !yield(pp) {
				return
			}
		}
	}
}

func (p *Processor) removePolicy(pp *parsedPolicy) {
	delete(p.policies, pp.id)
	delete(p.anyNamespace, pp.id)
	delete(p.compiled, pp.id)
	if inner := p.byNamespace[pp.id.Namespace]; inner != nil {
		delete(inner, pp.id)
		if len(inner) == 0 {
			delete(p.byNamespace, pp.id.Namespace)
		}
	}
}

// addLocalPodsSelectedBy adds the local pods that pp applies to.
func (p *Processor) addLocalPodsSelectedBy(affected map[renderer.PodID]struct{}, pp *parsedPolicy) {
	for _, pod := range p.lookup.PodsInNamespace(pp.id.Namespace, pp.podSelector) {
		if pod.NodeName() == p.node {
			affected[renderer.PodID{Namespace: pod.Namespace(), Name: pod.Name()}] = struct{}{}
		}
	}
}

// info returns the podInfo of a pod of the cache, derived once per object
// (a view is equal to another of the same object).
func (p *Processor) info(pod cache.PodView) *podInfo {
	id := renderer.PodID{Namespace: pod.Namespace(), Name: pod.Name()}
	if i := p.infos[id]; i != nil && i.pod == pod {
		return i
	}
	i := newPodInfo(pod)
	p.infos[id] = i
	return i
}

// configure builds the model of each affected pod and hands it over as one
// transaction. A pod that is not local or has no address yet is postponed;
// one that was configured before is removed.
func (p *Processor) configure(ctx context.Context, affected map[renderer.PodID]struct{}, resync bool) error {
	if len(affected) == 0 && !resync {
		return nil
	}
	ids := make([]renderer.PodID, 0, len(affected))
	for id := range affected {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, renderer.PodID.Compare)
	txn := configurator.Txn{Resync: resync, Pods: make([]configurator.Pod, 0, len(ids))}
	for _, id := range ids {
		var i *podInfo
		if pod := p.lookup.Pod(id.Namespace, id.Name); !pod.IsZero() {
			i = p.info(pod)
		}
		if i == nil || i.node != p.node || !i.endpoint() {
			if ips, ok := p.configured[id]; ok {
				txn.Pods = append(txn.Pods, configurator.Pod{ID: id, IPs: ips, Removed: true})
				delete(p.configured, id)
			}
			continue
		}
		admin, baseline := p.clustersFor(i)
		txn.Pods = append(txn.Pods, configurator.Pod{ID: id, IPs: i.ips, SourcePrefixes: i.sources, Policies: p.policiesFor(i),
			Admin: admin, Baseline: baseline})
		p.configured[id] = i.ips
	}
	if len(txn.Pods) == 0 && !resync {
		return nil
	}
	if err := p.out.Configure(ctx, txn); err != nil {
		return fmt.Errorf("configure %d pods on node %q: %w", len(txn.Pods), p.node, err)
	}
	return nil
}

// policiesFor returns the models of the policies selecting pod t, ordered
// by name.
func (p *Processor) policiesFor(t *podInfo) []*configurator.Policy {
	var selecting []*parsedPolicy
	for _, pp := range p.byNamespace[t.id.Namespace] {
		if pp.podSelector.Matches(labels.Set(t.labels)) {
			selecting = append(selecting, pp)
		}
	}
	slices.SortFunc(selecting, func(a, b *parsedPolicy) int {
		switch {
		case a.id.Name < b.id.Name:
			return -1
		case a.id.Name > b.id.Name:
			return 1
		}
		return 0
	})
	out := make([]*configurator.Policy, 0, len(selecting))
	for _, pp := range selecting {
		cp := p.compiled[pp.id]
		if cp == nil {
			cp = p.compile(pp)
			p.compiled[pp.id] = cp
		}
		out = append(out, cp.forPod(t))
	}
	return out
}
