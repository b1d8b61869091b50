package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/routes"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
)

// exportTable lists table 119 of both families as "<type> <dst> proto
// <protocol>" lines, sorted.
func exportTable(n *netnstest.NS) ([]string, error) {
	var lines []string
	for _, family := range []string{"-4", "-6"} {
		out, err := n.TryExec(context.Background(), "ip", "-j", family, "route", "show", "table", "119")
		if err != nil && strings.Contains(err.Error(), "FIB table does not exist") {
			continue
		}
		if err != nil {
			return nil, err
		}
		var rs []struct{ Type, Dst, Protocol string }
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			return nil, fmt.Errorf("ip -j route: %w: %s", err, out)
		}
		for _, r := range rs {
			lines = append(lines, r.Type+" "+r.Dst+" proto "+r.Protocol)
		}
	}
	slices.Sort(lines)
	return lines, nil
}

func eventuallyTable(t *testing.T, what string, n *netnstest.NS, want ...string) {
	t.Helper()
	slices.Sort(want)
	poll.Eventually(t, 30*time.Second, func() error {
		got, err := exportTable(n)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s: table 119 holds %q, want %q", what, got, want)
		}
		return nil
	})
}

func TestWithdrawLoadBalancersRemovesOnlyTheLoadBalancerProtocol(t *testing.T) {
	t.Parallel()
	node := netnstest.New(t, "node")
	node.IP("route", "add", "blackhole", "10.64.0.0/26", "table", "119", "proto", "30")
	node.IP("route", "add", "blackhole", "203.0.113.10/32", "table", "119", "proto", "32")
	node.IP("-6", "route", "add", "blackhole", "fd00:113::10/128", "table", "119", "proto", "32")
	node.IP("route", "add", "blackhole", "203.0.113.11/32", "table", "119", "proto", "bird")
	for range 2 {
		if err := proxy.WithdrawLoadBalancers(t.Context(), routes.ExporterConfig{Netns: node.Path()}, testr.New(t)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := exportTable(node)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"blackhole 10.64.0.0/26 proto 30", "blackhole 203.0.113.11 proto bird"}; !slices.Equal(got, want) {
		t.Errorf("table 119 after the withdrawal: %q, want %q", got, want)
	}
}

// TestSetupAnnouncesTheLoadBalancerAddressesOfVcoilsPools runs the service
// proxy as vcoild wires it, against an apiserver, with a test namespace as
// the node's: a LoadBalancer address is announced once a LoadBalancer
// pool holds it, and withdrawn when its pool or its Service goes; another
// implementation's address and the node's blocks are left alone.
func TestSetupAnnouncesTheLoadBalancerAddressesOfVcoilsPools(t *testing.T) {
	node := netnstest.New(t, "node")
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
	node.IP("route", "add", "blackhole", "10.64.0.0/26", "table", "119", "proto", "30")
	const nodeName = "lb-node"
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: proxy.CacheOptions(nodeName, false)},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.Setup(t.Context(), mgr, proxy.Options{
		NodeName: nodeName, Netns: node.Path(), PodIfPrefix: "lbt", Log: testr.New(t),
		AnnounceLoadBalancers: true,
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

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeLoadBalancer,
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{
		{IP: "203.0.113.10", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
		// Another load balancer's address, outside vcoil's pools.
		{IP: "198.51.100.10", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)},
	}
	if err := c.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Synced():
	case err := <-done:
		t.Fatalf("manager stopped before the first sync: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no first sync within a minute")
	}
	// The node's state shows the frontends the nftables renderer applied:
	// without endpoints, each rejects.
	poll.Eventually(t, 30*time.Second, func() error {
		var st nodestate.State
		if err := p.StateSource().Fill(ctx, &st); err != nil {
			return err
		}
		var got []string
		for _, f := range st.Services.Frontends {
			if f.Kind == nodestate.FrontendLoadBalancer {
				got = append(got, fmt.Sprintf("%s %s:%d %s %s", f.Service, f.Address, f.Port, f.Protocol, f.NoBackends))
			}
		}
		want := []string{"default/web 198.51.100.10:80 TCP reject", "default/web 203.0.113.10:80 TCP reject"}
		if st.Services.Renderer != "nftables" || st.Services.Sync.Last.IsZero() || !slices.Equal(got, want) {
			return fmt.Errorf("services state: renderer %q, sync %+v, LoadBalancer frontends %q; want nftables, a sync and %q", st.Services.Renderer, st.Services.Sync, got, want)
		}
		return nil
	})

	podPool := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "pods"},
		Spec:       vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsagePods, BlockSizeBits: 5, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("198.51.100.0/24")}}},
	}
	lbPool := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec:       vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsageLoadBalancer, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("203.0.113.0/24")}}},
	}
	// A Pods pool holding an address does not make vcoil announce it.
	if err := c.Create(ctx, podPool); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Delete(context.Background(), podPool) }()
	if err := c.Create(ctx, lbPool); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Delete(context.Background(), lbPool) }()
	eventuallyTable(t, "with the LoadBalancer pool", node, "blackhole 10.64.0.0/26 proto 30", "blackhole 203.0.113.10 proto 32")

	if err := c.Delete(ctx, lbPool); err != nil {
		t.Fatal(err)
	}
	eventuallyTable(t, "without the LoadBalancer pool", node, "blackhole 10.64.0.0/26 proto 30")

	lbPool.ResourceVersion = ""
	if err := c.Create(ctx, lbPool); err != nil {
		t.Fatal(err)
	}
	eventuallyTable(t, "with the pool again", node, "blackhole 10.64.0.0/26 proto 30", "blackhole 203.0.113.10 proto 32")
	if err := c.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	eventuallyTable(t, "without the Service", node, "blackhole 10.64.0.0/26 proto 30")
}
