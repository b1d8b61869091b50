package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/egress"
	"github.com/vcoil/vcoil/v2/pkg/egress/agent"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	policyagent "github.com/vcoil/vcoil/v2/pkg/policy/agent"
)

// applied records what the agent asked to apply to each netns.
type applied struct {
	mu    sync.Mutex
	calls []string
	fail  error
}

func (a *applied) apply(_ context.Context, netns string, cfg egress.ClientConfig) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, netns+" "+describe(cfg))
	return a.fail
}

func (a *applied) all() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

func describe(cfg egress.ClientConfig) string {
	s := fmt.Sprintf("pod=%v", cfg.PodIPs)
	for _, e := range cfg.Egresses {
		s += fmt.Sprintf(" egress=%s kind=%s svc=%v dst=%v sportauto=%v", e.Egress, e.Kind, e.ServiceIPs, e.Destinations, e.FoUSourcePortAuto)
	}
	if len(cfg.Egresses) > 0 {
		s += fmt.Sprintf(" excluded=%v", cfg.Excluded)
	}
	return s
}

// TestAgentSetsUpClientPodsAndFollowsTheirEgresses runs the agent against a
// real apiserver, with the netns side recorded: a pod naming a missing
// Egress starts and gets an Event; the Egress's arrival, a change of its
// destinations, of its encapsulation and the annotation's removal are each
// applied to the pod's netns with the complete configuration (the
// Service's ClusterIP, the cluster's networks excluded); a released pod is
// left alone.
func TestAgentSetsUpClientPodsAndFollowsTheirEgresses(t *testing.T) {
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
	const nodeName = "eg-node"
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: policyagent.CacheOptions(nodeName)},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := &applied{}
	a, err := agent.Setup(t.Context(), mgr, agent.Options{
		NodeName: nodeName, Apply: rec.apply,
		FoU:    func() error { return errors.New("the kernel has no module fou") },
		Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("vcoild"),
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/24")},
		Log:          testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()

	pool := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: 5, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr("10.64.0.0/16")}}},
	}
	if err := c.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), pool) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "client",
			Annotations: map[string]string{vcoilv2.AnnotationEgressPrefix + "default": "nat"},
		},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "x"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	podIP := netip.MustParseAddr("10.64.0.5")
	const netns = "/run/netns/client"

	// The Egress does not exist: the pod starts, nothing is applied to its
	// fresh netns, and an Event says why.
	addCtx, addCancel := context.WithTimeout(ctx, 30*time.Second)
	defer addCancel()
	if err := a.PodAdded(addCtx, "default", "client", netns, []netip.Addr{podIP}); err != nil {
		t.Fatalf("ADD of a pod naming a missing Egress: %v, want the pod to start", err)
	}
	if calls := rec.all(); len(calls) != 0 {
		t.Fatalf("applied %q to the fresh netns of a pod whose Egress is missing", calls)
	}
	waitEvent(t, c, pod, agent.ReasonEgressNotFound, "Egress default/nat, named by annotation egress.vcoil.io/default, does not exist")
	checkState(t, a, "default/client: error Egress default/nat, named by annotation egress.vcoil.io/default, does not exist")

	// The Egress and its Service appear: the pod's tunnel is set up.
	eg := &vcoilv2.Egress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nat"},
		Spec: vcoilv2.EgressSpec{
			Destinations:  []string{"203.0.113.0/24"},
			Encapsulation: vcoilv2.EncapsulationAuto,
		},
	}
	if err := c.Create(ctx, eg); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "nat"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "vxlan", Protocol: corev1.ProtocolUDP, Port: vcoilv2.EgressVXLANPort},
		}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	var cidrs networkingv1.ServiceCIDRList
	if err := c.List(ctx, &cidrs); err != nil {
		t.Fatal(err)
	}
	excluded := []netip.Prefix{netip.MustParsePrefix("10.64.0.0/16"), netip.MustParsePrefix("198.18.0.0/24")}
	for _, sc := range cidrs.Items {
		for _, s := range sc.Spec.CIDRs {
			excluded = append(excluded, netip.MustParsePrefix(s))
		}
	}
	slices.SortFunc(excluded, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	want := func(dst, kind string) string {
		return fmt.Sprintf("%s pod=[%s] egress=default/nat kind=%s svc=[%s] dst=%s sportauto=false excluded=%v",
			netns, podIP, kind, svc.Spec.ClusterIP, dst, excluded)
	}
	waitCalls(t, rec, want("[203.0.113.0/24]", "vxlan"))
	waitEvent(t, c, pod, agent.ReasonEgressConfigured, "egress through default/nat (vxlan)")
	checkState(t, a, fmt.Sprintf("default/client: default/nat vxlan router %s [%s] dst [203.0.113.0/24]", svc.Spec.ClusterIP, svc.Spec.ClusterIP))

	// Destinations change: applied to the running pod.
	eg.Spec.Destinations = []string{"203.0.113.0/24", "198.51.100.0/24"}
	if err := c.Update(ctx, eg); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, rec, want("[198.51.100.0/24 203.0.113.0/24]", "vxlan"))

	// fou on a node without it: the Egress cannot be served here; its
	// tunnel goes and an Event says why.
	eg.Spec.Encapsulation = vcoilv2.EncapsulationFoU
	if err := c.Update(ctx, eg); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, rec, fmt.Sprintf("%s pod=[%s]", netns, podIP))
	waitEvent(t, c, pod, agent.ReasonEgressUnsupported, "the kernel has no module fou")
	checkState(t, a, "default/client: error Egress default/nat: encapsulation fou is not available on this node: the kernel has no module fou")
	eg.Spec.Encapsulation = vcoilv2.EncapsulationVXLAN
	if err := c.Update(ctx, eg); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, rec, want("[198.51.100.0/24 203.0.113.0/24]", "vxlan"))

	// The annotation goes: everything of the egress leaves the netns.
	pod.Annotations = nil
	if err := c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitCalls(t, rec, fmt.Sprintf("%s pod=[%s]", netns, podIP))

	// Released at DEL: later changes leave the (gone) netns alone.
	a.PodReleased(ctx, "default", "client")
	n := len(rec.all())
	pod.Annotations = map[string]string{vcoilv2.AnnotationEgressPrefix + "default": "nat"}
	if err := c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a reconcile would come within milliseconds
	if calls := rec.all(); len(calls) != n {
		t.Fatalf("applied %q to a released pod", calls[n:])
	}

	// An ADD whose tunnels cannot be made fails, naming the reason.
	rec.mu.Lock()
	rec.fail = errors.New("create vxlan device: operation not permitted")
	rec.mu.Unlock()
	err = a.PodAdded(addCtx, "default", "client", netns+"2", []netip.Addr{podIP})
	if err == nil || !errors.Is(err, rec.fail) {
		t.Fatalf("ADD whose tunnel fails: %v, want the error", err)
	}
	checkState(t, a, "default/client: error "+err.Error())
}

// checkState checks the node state's egress section, a line per pod.
func checkState(t *testing.T, a *agent.Agent, want ...string) {
	t.Helper()
	var st nodestate.State
	if err := a.StateSource().Fill(t.Context(), &st); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range st.Egress.Pods {
		line := p.Namespace + "/" + p.Name + ":"
		for _, e := range p.Egresses {
			line += fmt.Sprintf(" %s %s router %s %v dst %v", e.Egress, e.Encapsulation, e.Router, e.Routers, e.Destinations)
		}
		if p.Error != "" {
			line += " error " + p.Error
		}
		got = append(got, line)
	}
	if !slices.Equal(got, want) {
		t.Errorf("egress state %q, want %q", got, want)
	}
}

func TestReferencesParsesTheAnnotations(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		"egress.vcoil.io/internet": " nat , proxy,,nat",
		"egress.vcoil.io/other":    "a",
		"egress.vcoil.io/":         "ignored",
		"vcoil.io/pool":            "ignored",
	}}}
	got := agent.References(pod)
	want := []types.NamespacedName{{Namespace: "internet", Name: "nat"}, {Namespace: "internet", Name: "proxy"}, {Namespace: "other", Name: "a"}}
	if !slices.Equal(got, want) {
		t.Fatalf("References = %v, want %v", got, want)
	}
}

func waitCalls(t *testing.T, rec *applied, last string) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		calls := rec.all()
		if len(calls) == 0 || calls[len(calls)-1] != last {
			return fmt.Errorf("applied %q, want last %q", calls, last)
		}
		return nil
	})
}

func waitEvent(t *testing.T, c client.Client, pod *corev1.Pod, reason, note string) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		var evs eventsv1.EventList
		if err := c.List(context.Background(), &evs, client.InNamespace(pod.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, e := range evs.Items {
			if e.Regarding.Name != pod.Name {
				continue
			}
			if e.Reason == reason && strings.Contains(e.Note, note) {
				return nil
			}
			seen = append(seen, e.Reason+": "+e.Note)
		}
		return fmt.Errorf("no Event %s %q on pod %s; seen %q", reason, note, pod.Name, seen)
	})
}

func ptr[T any](v T) *T { return &v }
