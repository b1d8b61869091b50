package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// TestNodeAnnouncesLoadBalancerAddressesUntilItStopsServingThem runs vcoild
// with the daemon's RBAC: it announces a LoadBalancer address of a vcoil
// pool in table 119 (proto 32) beside its blocks (proto 30), and withdraws
// it at start when it no longer announces (--lb-announce=false) or no
// longer serves Services (--service-proxy=false).
func TestNodeAnnouncesLoadBalancerAddressesUntilItStopsServingThem(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	ctx := context.Background()
	pool := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "lb-announce"},
		Spec:       vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsageLoadBalancer, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("203.0.113.0/24")}}},
	}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pool) })
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "lb-announce"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	if err := env.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), svc) })
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.20", IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	if err := env.Client.Status().Update(ctx, svc); err != nil {
		t.Fatal(err)
	}

	f := newFabric(t)
	n := newNode(t, f, 30)
	subnet := nodeSubnet(t, n.name)
	const announced = "blackhole 203.0.113.20 proto 32"
	block := "blackhole " + subnet.IPv4.String() + " proto 30"
	poll.Eventually(t, 30*time.Second, func() error {
		if out := n.ns.IP("route", "show", "table", "119"); !strings.Contains(out, announced) || !strings.Contains(out, block) {
			return fmt.Errorf("table 119 lacks the announcement or the block:\n%s", out)
		}
		return nil
	})

	for _, args := range [][]string{{"--lb-announce=false"}, {"--service-proxy=false"}} {
		n.kill()
		// What a run announced before; the kill left it.
		if out := n.ns.IP("route", "show", "table", "119"); !strings.Contains(out, announced) {
			t.Fatalf("the announcement went with the killed vcoild:\n%s", out)
		}
		n.args = args
		n.start()
		// The withdrawal happens before vcoild is ready.
		if out := n.ns.IP("route", "show", "table", "119"); strings.Contains(out, "proto 32") || !strings.Contains(out, block) {
			t.Fatalf("vcoild %s: table 119, want the blocks and no LoadBalancer address:\n%s", args, out)
		}
		// The next round starts from an announcing node's table.
		n.ns.IP("route", "add", "blackhole", "203.0.113.20/32", "table", "119", "proto", "32")
	}
}

func TestLBExportProtocolMustDifferFromTheOtherRoutes(t *testing.T) {
	bin := gobuild.Program(t, vcoildPackage)
	for _, args := range [][]string{
		{"--lb-export-protocol", "30"},
		{"--lb-export-protocol", "40", "--export-protocol", "40"},
		{"--lb-export-protocol", "31"},
	} {
		out, err := exec.Command(bin, append([]string{"--node-name", "x"}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "--lb-export-protocol "+args[1]+": must differ") {
			t.Errorf("vcoild %s = %v, want it to refuse the protocol:\n%s", args, err, out)
		}
	}
}

func TestBadBlockWatermarkAndACLBudgetAreRefused(t *testing.T) {
	bin := gobuild.Program(t, vcoildPackage)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--block-low-watermark", "1"}, "--block-low-watermark 1: want a fraction"},
		{[]string{"--block-low-watermark", "-0.1"}, "--block-low-watermark -0.1: want a fraction"},
		{[]string{"--vpp-acl-max-rules", "0"}, "--vpp-acl-max-rules 0: want a positive number"},
	} {
		out, err := exec.Command(bin, append([]string{"--node-name", "x"}, c.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("vcoild %s = %v, want %q:\n%s", c.args, err, c.want, out)
		}
	}
}
