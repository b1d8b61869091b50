package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/policy/agent"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// countingRenderer counts the transactions it renders.
type countingRenderer struct {
	mu   sync.Mutex
	txns int
}

func (r *countingRenderer) Render(context.Context, renderer.Txn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.txns++
	return nil
}

func ruleText(r nodestate.Rule) string {
	s := r.Action + " " + r.Protocol
	if r.Src.IsValid() {
		s += " from " + r.Src.String()
	}
	if r.DstPorts != nil {
		s += fmt.Sprintf(" port %d-%d", r.DstPorts.First, r.DstPorts.Last)
	}
	return s
}

// TestStateSourceHoldsThePodsRulesAfterItsADD runs the agent against a
// real apiserver: once a pod's CNI ADD returned, the node's state holds
// the rules rendered for it (its NetworkPolicy's permit, the node's
// address and NAT loopback always permitted, then deny) and the node's
// always allowed sources.
func TestStateSourceHoldsThePodsRulesAfterItsADD(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := env.Client
	ctx, cancel := context.WithCancel(t.Context())
	const nodeName = "pol-node"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Annotations: map[string]string{vcoilv2.AnnotationNATLoopback: "10.64.0.31"}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.2"}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-from-pods"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.64.0.0/16"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: new(intstr.FromInt32(80))}},
			}},
		},
	}
	if err := c.Create(ctx, np); err != nil {
		t.Fatal(err)
	}

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: agent.CacheOptions(nodeName)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &countingRenderer{}
	a, err := agent.Setup(ctx, mgr, agent.Options{NodeName: nodeName, Renderer: r, RendererName: "test", Reader: mgr.GetAPIReader(), Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	addCtx, addCancel := context.WithTimeout(ctx, 30*time.Second)
	defer addCancel()
	if err := a.PodAdded(addCtx, "default", "web", []netip.Addr{netip.MustParseAddr("10.64.0.5")}); err != nil {
		t.Fatal(err)
	}
	// The node's addresses arrive through the informer: poll for them.
	want := "default/web [10.64.0.5] ingress: permit any from 10.64.0.31/32, permit any from 198.18.0.2/32, permit tcp from 10.64.0.0/16 port 80-80, deny any; always allowed [10.64.0.31 198.18.0.2]"
	poll.Eventually(t, 30*time.Second, func() error {
		var st nodestate.State
		if err := a.StateSource().Fill(ctx, &st); err != nil {
			return err
		}
		p := st.Policies
		if p.Renderer != "test" || p.Sync.Last.IsZero() || len(p.Pods) != 1 {
			return fmt.Errorf("policies: renderer %q, sync %+v, %d pods", p.Renderer, p.Sync, len(p.Pods))
		}
		var rules []string
		for _, r := range p.Pods[0].Ingress {
			rules = append(rules, ruleText(r))
		}
		got := fmt.Sprintf("%s/%s %v ingress: %s; always allowed %v", p.Pods[0].Namespace, p.Pods[0].Name, p.Pods[0].IPs, strings.Join(rules, ", "), p.AlwaysAllowed)
		if got != want {
			return fmt.Errorf("state %s, want %s", got, want)
		}
		return nil
	})
}

// healingRenderer fails every transaction until heal is closed.
type healingRenderer struct {
	heal chan struct{}

	mu       sync.Mutex
	attempts int
	ok       int
}

func (r *healingRenderer) Render(context.Context, renderer.Txn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts++
	select {
	case <-r.heal:
		r.ok++
		return nil
	default:
		return fmt.Errorf("injected failure %d", r.attempts)
	}
}

func (r *healingRenderer) counts() (attempts, ok int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts, r.ok
}

// TestAFailedRenderIsRetriedWithoutAnyNewEvent: the first sync's render
// fails and nothing changes in the cluster afterwards; the agent resyncs
// on its own timer, again while the renderer fails, is not ready until a
// resync succeeds, and is ready then.
func TestAFailedRenderIsRetriedWithoutAnyNewEvent(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	const nodeName = "retry-node"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIPs = []corev1.PodIP{{IP: "10.64.0.9"}}
	pod.Status.PodIP = "10.64.0.9"
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: agent.CacheOptions(nodeName)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &healingRenderer{heal: make(chan struct{})}
	var afterResyncs sync.WaitGroup
	afterResyncs.Add(1)
	a, err := agent.Setup(ctx, mgr, agent.Options{
		NodeName: nodeName, Renderer: r, RendererName: "test", Reader: mgr.GetAPIReader(), Log: testr.New(t),
		RetryMin: 10 * time.Millisecond, RetryMax: 40 * time.Millisecond,
		AfterResync: func(context.Context) error { afterResyncs.Done(); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	// Retried while it fails, and not ready meanwhile.
	poll.Eventually(t, 30*time.Second, func() error {
		if attempts, _ := r.counts(); attempts < 3 {
			return fmt.Errorf("%d render attempts, want the first and two retries", attempts)
		}
		return nil
	})
	if err := a.Ready(nil); err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Ready while the renderer fails = %v, want the render's failure", err)
	}
	close(r.heal)
	poll.Eventually(t, 30*time.Second, func() error {
		if _, ok := r.counts(); ok == 0 {
			return errors.New("no render succeeded yet")
		}
		return a.Ready(nil)
	})
	afterResyncs.Wait() // AfterResync ran once, after the sync that succeeded
}

// TestNodesSeeEachOthersPodsThroughTheirEndpoints runs two nodes' agents
// against one apiserver. Each watches only its own node's Pods: node A
// learns of node B's pod through the PodEndpoint B's agent publishes, so
// a label change on B's pod reaches A's rules, and B's CNI DEL takes the
// pod's address out of them.
func TestNodesSeeEachOthersPodsThroughTheirEndpoints(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	c := env.Client
	ctx, cancel := context.WithCancel(t.Context())
	const nodeA, nodeB = "pol-node-a", "pol-node-b"
	env.CreateNode(t, nodeA, "198.18.0.2")
	env.CreateNode(t, nodeB, "198.18.0.3")
	pod := func(name, node, app string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": app}},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pod("web", nodeA, "web")
	cli := pod("cli", nodeB, "other")
	tcp := corev1.ProtocolTCP
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-from-clients"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: new(intstr.FromInt32(80))}},
			}},
		},
	}
	if err := c.Create(ctx, np); err != nil {
		t.Fatal(err)
	}

	agents := map[string]*agent.Agent{}
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, node := range []string{nodeA, nodeB} {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
			Scheme:                 env.Scheme,
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Cache:                  cache.Options{ByObject: agent.CacheOptions(node)},
		})
		if err != nil {
			t.Fatal(err)
		}
		a, err := agent.Setup(ctx, mgr, agent.Options{NodeName: node, Renderer: &countingRenderer{}, RendererName: "test", Reader: mgr.GetAPIReader(), Log: testr.New(t).WithName(node)})
		if err != nil {
			t.Fatal(err)
		}
		agents[node] = a
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := mgr.Start(ctx); err != nil {
				t.Errorf("manager of %s: %v", node, err)
			}
		}()
	}
	added := func(node, name, ip string) {
		t.Helper()
		actx, acancel := context.WithTimeout(ctx, 30*time.Second)
		defer acancel()
		if err := agents[node].PodAdded(actx, "default", name, []netip.Addr{netip.MustParseAddr(ip)}); err != nil {
			t.Fatal(err)
		}
	}
	added(nodeA, "web", "10.64.0.5")
	added(nodeB, "cli", "10.64.1.7")
	webIngress := func(want string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			var st nodestate.State
			if err := agents[nodeA].StateSource().Fill(ctx, &st); err != nil {
				return err
			}
			if len(st.Policies.Pods) != 1 {
				return fmt.Errorf("node A renders %d pods, want web only", len(st.Policies.Pods))
			}
			var rules []string
			for _, r := range st.Policies.Pods[0].Ingress {
				if r.Action == "permit" && r.Protocol == "tcp" || r.Action == "deny" {
					rules = append(rules, ruleText(r))
				}
			}
			if got := strings.Join(rules, ", "); got != want {
				return fmt.Errorf("web's ingress on node A: %s, want %s", got, want)
			}
			return nil
		})
	}

	// cli is no client yet: web admits nobody on port 80.
	webIngress("deny any")
	ep := &vcoilv2.PodEndpoint{}
	poll.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cli), ep); err != nil {
			return err
		}
		if ep.Spec.NodeName != nodeB || len(ep.Spec.Addresses) != 1 || ep.Spec.Addresses[0] != "10.64.1.7" {
			return fmt.Errorf("cli's endpoint: %+v", ep.Spec)
		}
		return nil
	})

	// cli becomes a client on node B: node A, which never sees that Pod,
	// admits its address.
	cli.Labels["app"] = "client"
	if err := c.Update(ctx, cli); err != nil {
		t.Fatal(err)
	}
	webIngress("permit tcp from 10.64.1.7/32 port 80-80, deny any")

	// Its CNI DEL on node B: the address leaves node A's rules.
	agents[nodeB].PodReleased(ctx, "default", "cli")
	webIngress("deny any")
	poll.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cli), &vcoilv2.PodEndpoint{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("cli's endpoint after its DEL: %v, want not found", err)
		}
		return nil
	})
}
