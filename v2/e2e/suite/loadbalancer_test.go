package suite

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// The LoadBalancer rows of the matrix, in the proposal's order.
var (
	lbPodRows = []string{
		"pod -> own external LB, no remap, policy=local", "pod -> own external LB, no remap, same VM",
		"pod -> own external LB, no remap, other VM", "pod -> own external LB, remap, policy=local",
		"pod -> own external LB, remap, same VM", "pod -> own external LB, remap, other VM",
	}
	lbVMRow      = "VM -> external LB"
	lbPublicRows = []string{
		"public -> external LB, no remap, policy=local", "public -> external LB, no remap, policy=global",
		"public -> external LB, remap, policy=local", "public -> external LB, remap, policy=global",
		"public -> external LB, manual backend",
	}
)

// loadBalancerRows run the LoadBalancer rows: Services of type
// LoadBalancer get an address from vcoil's default LoadBalancer pool
// (vcoil-controller), the nodes that serve them announce it in their export
// table 119 (vcoild), and the network outside the nodes routes it to them
// (in the lab, the fabric router, as BIRD would). The groups mean what they
// mean for the NodePort rows (serviceRows labelled the pods): "own" the
// client a1 is a backend, "same VM"/"other VM" where the other backend
// runs, "policy=local" externalTrafficPolicy Local; "remap" is service port
// 80 to the backends' port, "no remap" the same port on both.
//
// unserved, when set, says why the nodes serve no Service of the family:
// the rows are listed with it, as not implemented.
func loadBalancerRows(t *testing.T, k *cluster, w *world, f family, by, unserved string) {
	g := f.group(groupMatrix)
	all := append(append(append([]string{}, lbPodRows...), lbVMRow), lbPublicRows...)
	if unserved != "" {
		for _, n := range all {
			listed(g, n, statusNotImplemented, unserved)
		}
		return
	}
	if reason := k.noLoadBalancers(t, f, by); reason != "" {
		for _, n := range all {
			listed(g, n, statusNotApplicable, reason)
		}
		return
	}
	// Public rows need a client outside the cluster.
	clientHost, _, err := net.SplitHostPort(k.settings.externalOf(f))
	public := len(k.settings.externalAgent) > 0 && err == nil

	type lb struct {
		group  string
		port   int
		target int
		local  bool
	}
	specs := map[string]lb{
		"own-other/local/no-remap": {"own-other", portTCP, portTCP, true},
		"own-same/no-remap":        {"own-same", portTCP, portTCP, false},
		"own-other/no-remap":       {"own-other", portTCP, portTCP, false},
		"own-other/local/remap":    {"own-other", 80, portTCP, true},
		"own-same/remap":           {"own-same", 80, portTCP, false},
		"own-other/remap":          {"own-other", 80, portTCP, false},
		"vm":                       {"other-other", 80, portTCP, false},
	}
	if public {
		// a2 runs on node A only, b1 on node B: under policy=local only
		// node A may announce, under global both.
		specs["public-local/no-remap"] = lb{"other-same", portHTTP, portHTTP, true}
		specs["public-global/no-remap"] = lb{"other-other", portHTTP, portHTTP, false}
		specs["public-local/remap"] = lb{"other-same", 80, portHTTP, true}
		specs["public-global/remap"] = lb{"other-other", 80, portHTTP, false}
	}
	svcs := map[string]*corev1.Service{}
	for key, s := range specs {
		name := f.prefix() + "lb-" + strings.NewReplacer("/", "-").Replace(key)
		svcs[key] = k.serviceOf(t, &f, w.ns, name, map[string]string{"grp-" + s.group: "yes"}, s.port, s.target, corev1.ServiceTypeLoadBalancer, s.local)
	}
	if public {
		svcs["public-manual"] = k.manualService(t, f, w.ns, f.prefix()+"lb-public-manual", corev1.ServiceTypeLoadBalancer, f.podIP(w.b1), portHTTP)
	}
	ips, err := k.waitIngress(t, f, svcs)
	if err != nil {
		for _, n := range all {
			record(t, g, n, by, func(*testing.T) error { return err })
		}
		return
	}
	at := func(key string) string { return hostPortAddr(ips[key], int(svcs[key].Spec.Ports[0].Port)) }
	row := func(name string, run func(t *testing.T) error) {
		record(t, g, name, by, run)
	}
	pod := func(name, key string, announcedByB bool) {
		row(name, func(t *testing.T) error {
			if err := k.announced(t, w, ips[key], true, announcedByB); err != nil {
				return err
			}
			return k.connect(t, w.a1, "tcp", at(key))
		})
	}
	// own-other has a backend on either node: both announce, also under
	// policy=local.
	pod(lbPodRows[0], "own-other/local/no-remap", true)
	pod(lbPodRows[1], "own-same/no-remap", true)
	pod(lbPodRows[2], "own-other/no-remap", true)
	pod(lbPodRows[3], "own-other/local/remap", true)
	pod(lbPodRows[4], "own-same/remap", true)
	pod(lbPodRows[5], "own-other/remap", true)
	row(lbVMRow, func(t *testing.T) error {
		if err := k.announced(t, w, ips["vm"], true, true); err != nil {
			return err
		}
		return k.connect(t, w.hostA, "tcp", at("vm"))
	})

	if !public {
		for _, n := range lbPublicRows {
			listed(g, n, statusNotApplicable, fmt.Sprintf("no %s client outside the cluster given (VCOIL_E2E_EXTERNAL_AGENT and VCOIL_E2E_EXTERNAL, VCOIL_E2E_EXTERNAL6)", f))
		}
		return
	}
	local := func(name, key string) {
		row(name, func(t *testing.T) error {
			// Only node A has an endpoint (a2): only it announces, so
			// the network sends every client to it, which must not SNAT.
			if err := k.announced(t, w, ips[key], true, false); err != nil {
				return err
			}
			return k.clientIPFromOutside(t, at(key), clientHost)
		})
	}
	global := func(name, key string) {
		row(name, func(t *testing.T) error {
			if err := k.announced(t, w, ips[key], true, true); err != nil {
				return err
			}
			// Several connections, spread by the network's multipath
			// hash over both nodes, all answered.
			for i := range 6 {
				if err := k.fromOutside(t, "connect", "http", at(key), "--timeout", "3s"); err != nil {
					return fmt.Errorf("connection %d: %w", i+1, err)
				}
			}
			return nil
		})
	}
	local(lbPublicRows[0], "public-local/no-remap")
	global(lbPublicRows[1], "public-global/no-remap")
	local(lbPublicRows[2], "public-local/remap")
	global(lbPublicRows[3], "public-global/remap")
	global(lbPublicRows[4], "public-manual")
}

// noLoadBalancers says why the cluster cannot run the LoadBalancer rows of
// family f, or "" when it can: it needs vcoil's default LoadBalancer pool
// with a subnet of the family, and vcoild serving the Services (only then
// does it announce their addresses).
func (k *cluster) noLoadBalancers(t *testing.T, f family, by string) string {
	t.Helper()
	pool := &vcoilv2.AddressPool{}
	err := k.c.Get(ctx(t, 30*time.Second), client.ObjectKey{Name: vcoilv2.DefaultLBPool}, pool)
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the cluster has no LoadBalancer pool (no AddressPool %s)", vcoilv2.DefaultLBPool)
	case err != nil:
		t.Fatalf("get AddressPool %s: %v", vcoilv2.DefaultLBPool, err)
	case !pool.Spec.IsLoadBalancer():
		return fmt.Sprintf("the cluster has no LoadBalancer pool (AddressPool %s has usage %s)", vcoilv2.DefaultLBPool, pool.Spec.Usage)
	}
	hasFamily := false
	for _, sub := range pool.Spec.Subnets {
		if (f.v6 && sub.IPv6 != nil) || (!f.v6 && sub.IPv4 != nil) {
			hasFamily = true
		}
	}
	if !hasFamily {
		return fmt.Sprintf("the LoadBalancer pool %s has no %s subnet", vcoilv2.DefaultLBPool, f)
	}
	if by != byVcoil {
		return "kube-proxy serves the services: vcoild's service renderer is off, and with it the announcement of LoadBalancer addresses"
	}
	return ""
}

// waitIngress waits until every Service has its LoadBalancer address of
// family f (status.loadBalancer.ingress) and, when it has a selector, ready
// endpoints.
func (k *cluster) waitIngress(t *testing.T, f family, svcs map[string]*corev1.Service) (map[string]netip.Addr, error) {
	t.Helper()
	ips := map[string]netip.Addr{}
	err := poll.Until(t.Context(), time.Minute, pollInterval, func(c context.Context) error {
		for key, s := range svcs {
			if err := k.c.Get(c, client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			var ip netip.Addr
			for _, in := range s.Status.LoadBalancer.Ingress {
				if a, err := netip.ParseAddr(in.IP); err == nil && f.has(a) {
					ip = a
				}
			}
			if !ip.IsValid() {
				return fmt.Errorf("service %s has no LoadBalancer address (status.loadBalancer.ingress %v)", s.Name, s.Status.LoadBalancer.Ingress)
			}
			ips[key] = ip
			if s.Spec.Selector == nil {
				continue
			}
			if err := k.readyEndpoints(c, s); err != nil {
				return err
			}
		}
		return nil
	})
	return ips, err
}

// announced checks that node A's and node B's export tables (119, read by
// the hostNetwork agents) hold ip as a LoadBalancer address (protocol 32)
// or not, as wanted, waiting a little for vcoild to catch up.
func (k *cluster) announced(t *testing.T, w *world, ip netip.Addr, byA, byB bool) error {
	t.Helper()
	route := netip.PrefixFrom(ip, ip.BitLen()).String()
	return poll.Until(t.Context(), 15*time.Second, pollInterval, func(c context.Context) error {
		for _, n := range []struct {
			host *corev1.Pod
			node string
			want bool
		}{{w.hostA, w.nodeA.Name, byA}, {w.hostB, w.nodeB.Name, byB}} {
			out, err := k.exec(c, n.host, "/agent", "routes", "--table", "119")
			if err != nil {
				return err
			}
			has := false
			for _, l := range strings.Split(out, "\n") {
				f := strings.Fields(l)
				if len(f) >= 2 && f[0] == "blackhole" && f[1] == route && strings.Contains(l, " proto 32") {
					has = true
				}
			}
			switch {
			case n.want && !has:
				return fmt.Errorf("node %s does not announce %s: its table 119 has no blackhole %s proto 32:\n%s", n.node, ip, route, out)
			case !n.want && has:
				return fmt.Errorf("node %s announces %s, which it must not (no local endpoint under externalTrafficPolicy Local):\n%s", n.node, ip, out)
			}
		}
		return nil
	})
}
