package agent_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
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
		Cache:                  cache.Options{ByObject: agent.CacheOptions()},
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
