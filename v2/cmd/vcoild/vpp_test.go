package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/cnat"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// vcoild with --dataplane=vpp against a real VPP (VCOIL_VPP_BIN) running in
// the node's namespace: pods added through the real CNI path talk (ping
// and TCP) through VPP, VPP is killed and started again, and the same pods
// with the same addresses talk again; DEL leaves nothing in the pods.
func TestVPPDataplanePodsTalkThroughVPPAndSurviveItsRestart(t *testing.T) {
	netnstest.RequireRoot(t)
	vpptest.Binary(t) // skips without a VPP
	defaultPool(t)
	f := newFabric(t)

	// vcoild is ready only once VPP runs in the node's namespace: VPP
	// starts there, with the veth its uplink attaches to, before vcoild.
	n, v := newVPPNode(t, f, 40, "")
	if err := n.status(); err != nil {
		t.Fatalf("STATUS: %v", err)
	}

	a, b := newPod(t, "vpp-a"), newPod(t, "vpp-b")
	n.mustAdd(a)
	n.mustAdd(b)
	for _, p := range []*pod{a, b} {
		if err := n.check(p); err != nil {
			t.Fatalf("CHECK %s: %v", p.name, err)
		}
		if r := p.ns.IP("route", "show"); !strings.Contains(r, "default dev eth0") {
			t.Fatalf("%s's routes lack default dev eth0:\n%s", p.name, r)
		}
	}
	serve(t, a.ns, ":8080")
	serve(t, b.ns, ":8080")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	reach := func(when string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			for _, c := range []struct {
				from *netnstest.NS
				to   string
				port bool
			}{
				{a.ns, b.ipv4().String(), true}, {b.ns, a.ipv4().String(), true},
				{a.ns, b.ipv6().String(), true}, {n.ns, a.ipv4().String(), true},
			} {
				if err := c.from.Ping(ctx, c.to); err != nil {
					return fmt.Errorf("%s: %w", when, err)
				}
				if err := talk(c.from, hostPortString(c.to, 8080)); err != nil {
					return fmt.Errorf("%s: %w", when, err)
				}
			}
			return nil
		})
	}
	reach("before VPP restarts")
	before := []string{a.ipv4().String(), b.ipv4().String(), a.ipv6().String(), b.ipv6().String()}

	restart := time.Now()
	v.Restart()
	reach("after VPP restarted")
	t.Logf("pods reachable again %s after VPP was killed", time.Since(restart))
	poll.Eventually(t, time.Minute, func() error {
		if code, body := testenv.HTTPGet(n.health + "/readyz"); code != http.StatusOK {
			return fmt.Errorf("vcoild not ready after VPP's restart: %d %s", code, body)
		}
		return nil
	})
	after := []string{a.ipv4().String(), b.ipv4().String(), a.ipv6().String(), b.ipv6().String()}
	if strings.Join(before, ",") != strings.Join(after, ",") {
		t.Fatalf("addresses changed: %v -> %v", before, after)
	}
	// The operator sees the restart on the Node: the lost connection, the
	// new incarnation with the pods to resync, the resync; and in the
	// metrics.
	for _, w := range []testenv.EventOf{
		{Type: corev1.EventTypeWarning, Reason: vpp.ReasonConnectionLost, Note: "lost the API connection to VPP"},
		{Type: corev1.EventTypeWarning, Reason: vpp.ReasonRestarted, Note: "VPP restarted (pid "},
		{Type: corev1.EventTypeWarning, Reason: vpp.ReasonRestarted, Note: "); resyncing 2 pods"},
		{Type: corev1.EventTypeNormal, Reason: vpp.ReasonResynced, Note: ": 2 pods, "},
	} {
		w.Kind, w.Name = "Node", n.name
		env.WaitForEvent(t, 30*time.Second, w)
	}
	// Each new incarnation (one, unless a connection attempt raced VPP's
	// start) is counted, and each complete sync observed.
	poll.Eventually(t, 30*time.Second, func() error {
		_, body := testenv.HTTPGet(n.metrics)
		var connected, restarts, syncs float64
		for _, l := range strings.Split(body, "\n") {
			for name, v := range map[string]*float64{"vcoil_vpp_connected ": &connected, "vcoil_vpp_restarts_total ": &restarts, "vcoil_vpp_resync_duration_seconds_count ": &syncs} {
				if rest, ok := strings.CutPrefix(l, name); ok {
					fmt.Sscan(rest, v)
				}
			}
		}
		if connected != 1 || restarts < 1 || syncs != restarts+1 {
			return fmt.Errorf("vcoil_vpp_connected %v, vcoil_vpp_restarts_total %v, vcoil_vpp_resync_duration_seconds_count %v: want 1, at least 1, one more than the restarts", connected, restarts, syncs)
		}
		return nil
	})
	for _, p := range []*pod{a, b} {
		if err := n.check(p); err != nil {
			t.Fatalf("CHECK %s after the restart: %v", p.name, err)
		}
	}

	for _, p := range []*pod{a, b} {
		if err := n.del(p); err != nil {
			t.Fatalf("DEL %s: %v", p.name, err)
		}
		if err := n.del(p); err != nil {
			t.Fatalf("second DEL %s: %v", p.name, err)
		}
		if out := p.ns.IP("link", "show"); strings.Contains(out, "eth0") {
			t.Fatalf("eth0 left in %s after DEL:\n%s", p.name, out)
		}
	}
}

func hostPortString(addr string, port int) string {
	if strings.Contains(addr, ":") {
		return fmt.Sprintf("[%s]:%d", addr, port)
	}
	return fmt.Sprintf("%s:%d", addr, port)
}

// The vpp overlay is the default installation with vcoild on the VPP
// dataplane.
func TestVPPOverlayRunsVcoildOnTheVPPDataplane(t *testing.T) {
	m, err := testenv.Render("overlays/vpp")
	if err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{}
	if err := testenv.Find(m, "DaemonSet", "vcoil-daemon", ds); err != nil {
		t.Fatal(err)
	}
	args := ds.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--dataplane=vpp") || slices.Contains(args, "--dataplane=linux") || !slices.Contains(args, "--vpp-api-socket=/run/vpp/api.sock") {
		t.Fatalf("vcoild's args in the vpp overlay: %v", args)
	}
}

// --dataplane=vpp builds the VPP dataplane from the flags without touching
// VPP, and names the flag of a bad value.
func TestVPPFlagsBuildTheVPPDataplane(t *testing.T) {
	f := flags{dataplane: "vpp", stateDir: t.TempDir(), vpp: vppFlags{apiSocket: "/nonexistent/api.sock", podInterface: "af_packet"}}
	reg := prometheus.NewRegistry()
	dp, local, err := newDataplane(f, reg)
	if err != nil {
		t.Fatal(err)
	}
	if dp.Name() != "vpp" || local == nil {
		t.Fatalf("dataplane %q, block routes %v", dp.Name(), local)
	}
	// The connection's metrics are vcoild's: registered before any
	// connection, not connected yet.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP vcoil_vpp_connected 1 while vcoild holds an API connection to VPP that answers its control ping, else 0.
# TYPE vcoil_vpp_connected gauge
vcoil_vpp_connected 0
# HELP vcoil_vpp_restarts_total New VPP incarnations after the first since vcoild started: VPP restarted, or vcoild connected to it again.
# TYPE vcoil_vpp_restarts_total counter
vcoil_vpp_restarts_total 0
`), "vcoil_vpp_connected", "vcoil_vpp_restarts_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "vcoil_vpp_resync_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("vcoil_vpp_resync_duration_seconds: %d series (%v), want 1", n, err)
	}
	for _, tc := range []struct {
		name string
		set  func(*flags)
		want string
	}{
		{"an unknown pod interface type", func(f *flags) { f.vpp.podInterface = "vhost" }, `PodInterface "vhost"`},
		{"an uplink address that is no prefix", func(f *flags) {
			f.vpp.uplink, f.vpp.uplinkAddresses = "host-eth1", []string{"198.18.0.1"}
		}, "--vpp-uplink-address"},
		{"an IPv6 gateway that is no address", func(f *flags) { f.vpp.uplink, f.vpp.uplinkGatewayIPv6 = "host-eth1", "fe80::1/64" }, "--vpp-uplink-gateway-ipv6"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := f
			tc.set(&bad)
			if _, _, err := newDataplane(bad, prometheus.NewRegistry()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("newDataplane = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// With --dataplane=vpp and the service proxy on, the service proxy gets
// the VPP dataplane and the NAT44 renderer's configuration from the flags
// (the session table goes to the dataplane), and builds the NAT44
// renderer; without VPP nothing of it is set.
func TestVPPServiceProxyFlagsGiveTheNAT44Renderer(t *testing.T) {
	f := flags{
		nodeName: "node-a", dataplane: "vpp", stateDir: t.TempDir(),
		vpp: vppFlags{apiSocket: "/nonexistent/api.sock", podInterface: "af_packet", natSessions: 100000, localBackendWeight: 3},
		services: serviceFlags{
			enabled: true, serviceCIDRs: []string{"10.96.0.1/12", "fd00:96::/112"},
			nodePortAddresses: []string{"198.18.0.0/15"},
		},
	}
	cfg, err := f.vppConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATSessions != 100000 {
		t.Fatalf("NATSessions = %d, want --vpp-nat-sessions", cfg.NATSessions)
	}
	dp, _, err := newDataplane(f, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	vppDP := dp.(vpp.Dataplane)
	o, err := f.services.options(f, vppDP)
	if err != nil {
		t.Fatal(err)
	}
	if o.VPP != vppDP {
		t.Fatal("the service proxy did not get the VPP dataplane")
	}
	want := nat44.Config{
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/112")},
		LocalWeight:  3,
	}
	got := o.NAT44
	got.Registry = nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("NAT44 config = %+v\nwant %+v", got, want)
	}
	if o.NAT44.Registry == nil {
		t.Error("the NAT44 renderer has no metrics registry")
	}
	if _, err := nat44.New(o.VPP, o.NAT44, logr.Discard()); err != nil {
		t.Fatalf("the NAT44 renderer refuses the flags' configuration: %v", err)
	}

	if o.VPPRenderer != proxy.VPPRendererNAT44 {
		t.Errorf("the default VPP service renderer is %q, want nat44", o.VPPRenderer)
	}
	withCnat := f
	withCnat.vpp.serviceRenderer, withCnat.vpp.cnatForeignVIPs = "cnat", []string{"192.168.50.1/24"}
	co, err := withCnat.services.options(withCnat, vppDP)
	if err != nil {
		t.Fatal(err)
	}
	if co.VPPRenderer != proxy.VPPRendererCnat || !reflect.DeepEqual(co.Cnat.ServiceCIDRs, want.ServiceCIDRs) ||
		!reflect.DeepEqual(co.Cnat.ForeignVIPs, []netip.Prefix{netip.MustParsePrefix("192.168.50.0/24")}) || co.Cnat.Registry == nil {
		t.Fatalf("with --vpp-service-renderer=cnat: %q %+v", co.VPPRenderer, co.Cnat)
	}
	if _, err := cnat.New(co.VPP, co.Cnat, logr.Discard()); err != nil {
		t.Fatalf("the cnat renderer refuses the flags' configuration: %v", err)
	}

	linuxOpts, err := f.services.options(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if linuxOpts.VPP != nil || !reflect.DeepEqual(linuxOpts.NAT44, nat44.Config{}) {
		t.Fatalf("without VPP the service proxy got %+v", linuxOpts.NAT44)
	}

	for _, tc := range []struct {
		name string
		set  func(*flags)
		want string
	}{
		{"a local weight of 0", func(f *flags) { f.vpp.localBackendWeight = 0 }, "--vpp-local-backend-weight 0"},
		{"a local weight of 256", func(f *flags) { f.vpp.localBackendWeight = 256 }, "--vpp-local-backend-weight 256"},
		{"a service CIDR that is no prefix", func(f *flags) { f.services.serviceCIDRs = []string{"10.96.0.1"} }, `--service-cidr "10.96.0.1"`},
		{"an unknown service renderer", func(f *flags) { f.vpp.serviceRenderer = "ipvs" }, `--vpp-service-renderer "ipvs"`},
		{"a foreign VIP that is no prefix", func(f *flags) { f.vpp.serviceRenderer, f.vpp.cnatForeignVIPs = "cnat", []string{"x"} }, `--vpp-cnat-foreign-vips "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := f
			tc.set(&bad)
			if _, err := bad.services.options(bad, vppDP); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("options = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// vcoild refuses bad service proxy flags on VPP at start, naming the flag,
// before it reads or changes anything.
func TestVPPServiceProxyFlagsAreCheckedAtStart(t *testing.T) {
	bin := gobuild.Program(t, vcoildPackage)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--vpp-local-backend-weight", "300"}, "--vpp-local-backend-weight 300: want 1..255"},
		{[]string{"--service-cidr", "10.96.0.0/33"}, `--service-cidr "10.96.0.0/33"`},
	} {
		checkVPPFlagRefused(t, bin, tc.args, tc.want)
	}
}

// --vpp-snat needs an uplink with an IPv4 gateway and the cluster's CIDRs:
// vcoild refuses to start without them, naming the flag.
func TestVPPSNATFlagsAreCheckedAtStart(t *testing.T) {
	bin := gobuild.Program(t, vcoildPackage)
	uplink := []string{"--vpp-uplink", "host-up0", "--vpp-uplink-gateway-ipv4", "198.18.0.254"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--vpp-snat", "--cluster-cidr", "10.0.0.0/8"}, "--vpp-snat needs --vpp-uplink"},
		{[]string{"--vpp-snat", "--vpp-uplink", "host-up0", "--cluster-cidr", "10.0.0.0/8"}, "--vpp-snat needs --vpp-uplink-gateway-ipv4"},
		{append([]string{"--vpp-snat"}, uplink...), "--vpp-snat needs --cluster-cidr"},
		{append([]string{"--vpp-snat", "--cluster-cidr", "10.0.0.0/8", "--cluster-cidr", "10.96.0.0/33"}, uplink...), `--cluster-cidr "10.96.0.0/33"`},
		{append([]string{"--vpp-snat", "--cluster-cidr", "fd00::/8"}, uplink...), "--cluster-cidr has no IPv4 prefix"},
	} {
		checkVPPFlagRefused(t, bin, tc.args, tc.want)
	}
}

// --vpp-snat and --cluster-cidr give the VPP dataplane its SNAT
// configuration; without --vpp-snat, --cluster-cidr alone turns nothing on.
func TestVPPSNATFlagsGiveTheSNATConfig(t *testing.T) {
	f := flags{
		dataplane: "vpp", stateDir: t.TempDir(),
		vpp: vppFlags{apiSocket: "/nonexistent/api.sock", podInterface: "af_packet", uplink: "host-up0", uplinkGatewayIPv4: "198.18.0.254",
			snat: true, clusterCIDRs: []string{"10.64.0.0/14", "198.18.0.0/15", "fd00:64::/48"}},
	}
	cfg, err := f.vppConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := &vpp.SNATConfig{ClusterCIDRs: []netip.Prefix{
		netip.MustParsePrefix("10.64.0.0/14"), netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("fd00:64::/48"),
	}}
	if !reflect.DeepEqual(cfg.SNAT, want) {
		t.Fatalf("SNAT = %+v, want %+v", cfg.SNAT, want)
	}
	if _, err := vpp.New(cfg, logr.Discard()); err != nil {
		t.Fatalf("the VPP dataplane refuses the flags' SNAT configuration: %v", err)
	}
	f.vpp.snat = false
	if cfg, err := f.vppConfig(); err != nil || cfg.SNAT != nil {
		t.Fatalf("without --vpp-snat: SNAT = %+v, %v; want none", cfg.SNAT, err)
	}
}

// checkVPPFlagRefused runs vcoild on VPP with extra flags and wants it to
// fail at start with a message that holds want.
func checkVPPFlagRefused(t *testing.T, bin string, extra []string, want string) {
	t.Helper()
	args := append([]string{"--node-name", "x", "--dataplane=vpp", "--vpp-api-socket=/nonexistent/api.sock", "--vpp-pod-interface=af_packet", "--state-dir", t.TempDir()}, extra...)
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("vcoild %s = %v, want it to refuse naming %q:\n%s", extra, err, want, out)
	}
}

// vcoild on VPP serves a ClusterIP Service through the NAT44 renderer, end
// to end through the service proxy's wiring: a pod reaches another pod's
// endpoint through the cluster IP, the backend reaches itself (hairpin),
// the node reaches it through --service-cidr, a Service without endpoints
// is refused; after VPP is killed and started again, the cluster IP works
// again (the new incarnation's prompt resync), and after vcoild restarts
// against the running VPP too; a vcoild without the service proxy removes
// the node's service network.
func TestVPPServiceProxyServesAClusterIPThroughVPP(t *testing.T) {
	netnstest.RequireRoot(t)
	vpptest.Binary(t) // skips without a VPP
	defaultPool(t)
	f := newFabric(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	n, v := newVPPNode(t, f, 42, "", "--service-cidr", "10.0.0.0/24", "--service-min-sync-period", "100ms")
	backend, caller := newPod(t, "vpp-svc-backend"), newPod(t, "vpp-svc-client")
	n.mustAdd(backend)
	n.mustAdd(caller)
	serve(t, backend.ns, ":8080")

	web := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vpp-web"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.77", Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	empty := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "vpp-empty"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.0.0.78", Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "vpp-web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "vpp-web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{backend.ipv4().String()}, NodeName: ptr.To(n.name),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for _, o := range []client.Object{web, empty, slice} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}

	reach := func(when string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			for _, from := range []*netnstest.NS{caller.ns, backend.ns, n.ns} {
				if err := talk(from, "10.0.0.77:80"); err != nil {
					return fmt.Errorf("%s: %w", when, err)
				}
			}
			var conn net.Conn
			err := caller.ns.Do(func() error {
				var err error
				conn, err = net.DialTimeout("tcp", "10.0.0.78:80", 2*time.Second)
				return err
			})
			if err == nil {
				conn.Close()
				return fmt.Errorf("%s: the Service without endpoints accepted a connection", when)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("%s: a Service without endpoints: %w, want connection refused", when, err)
			}
			return nil
		})
	}
	defer func() {
		if t.Failed() {
			// The node's side of the service network, for the diagnosis.
			for _, c := range [][]string{{"ip", "rule"}, {"ip", "route"}, {"ip", "route", "show", "table", "117"}, {"ip", "addr", "show", "vcoilhost"}, {"nft", "list", "ruleset"}} {
				out, err := n.ns.TryExec(context.Background(), c[0], c[1:]...)
				t.Logf("%s: %v\n%s", strings.Join(c, " "), err, out)
			}
		}
	}()
	reach("before VPP restarts")
	restart := time.Now()
	v.Restart()
	reach("after VPP restarted")
	t.Logf("the cluster IP answered again %s after VPP was killed", time.Since(restart))
	// vcoild restarts while VPP keeps running: it adopts what VPP holds.
	n.kill()
	n.start()
	reach("after vcoild restarted")

	// A vcoild that no longer serves Services removes the node's side of
	// the service network.
	if out := n.ns.IP("-4", "route", "show", "proto", "33"); !strings.Contains(out, "10.0.0.0/24") {
		t.Fatalf("no service route while serving:\n%s", out)
	}
	n.kill()
	n.args = append(n.args, "--service-proxy=false")
	n.start()
	poll.Eventually(t, 30*time.Second, func() error {
		if out := strings.TrimSpace(n.ns.IP("-4", "route", "show", "proto", "33")); out != "" {
			return fmt.Errorf("service routes left:\n%s", out)
		}
		if out, err := n.ns.TryExec(ctx, "nft", "list", "table", "ip", "vcoil-vpp"); err == nil {
			return fmt.Errorf("table ip vcoil-vpp left:\n%s", out)
		}
		return nil
	})
	if out := n.ns.IP("-4", "rule"); strings.Contains(out, "lookup 117") {
		t.Fatalf("the sink replies' rule is left:\n%s", out)
	}
}

// newVPPNode starts a node whose dataplane is VPP: VPP runs in the node's
// namespace with its uplink host-vppup on a veth whose peer, vppup-peer,
// stays in the node (addressed peerAddr when not empty), and vcoild starts
// once VPP runs, with --dataplane=vpp and args.
func newVPPNode(t *testing.T, f *fabric, index int, peerAddr string, args ...string) (*node, *vpptest.VPP) {
	t.Helper()
	v := vpptest.Prepare(t, vpptest.Binary(t), "create host-interface name vppup")
	n := newNodeWith(t, f, index, nodeOptions{
		args: append([]string{"--dataplane=vpp", "--vpp-api-socket", v.APISocket, "--vpp-pod-interface", vpptest.PodInterface(),
			"--vpp-uplink", "host-vppup"}, args...),
		beforeStart: func(n *node) {
			n.ns.IP("link", "add", "vppup", "type", "veth", "peer", "name", "vppup-peer")
			if peerAddr != "" {
				n.ns.IP("addr", "add", peerAddr, "dev", "vppup-peer")
			}
			n.ns.IP("link", "set", "vppup", "up")
			n.ns.IP("link", "set", "vppup-peer", "up")
			if err := v.Launch(n.ns.Path()); err != nil {
				t.Fatal(err)
			}
		},
	})
	return n, v
}

// With --network-policies (the default), VPP holds a restarted VPP's pods
// down until the policy agent set their ACLs again; without, it holds none.
func TestVPPHoldsPodsForPoliciesOnlyWhenTheyAreEnforced(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		f := flags{nodeName: "node-a", dataplane: "vpp", stateDir: t.TempDir(), policies: policyFlags{enabled: enabled}}
		cfg, err := f.vppConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HoldPodsForPolicies != enabled {
			t.Fatalf("--network-policies=%t: HoldPodsForPolicies = %t", enabled, cfg.HoldPodsForPolicies)
		}
	}
}
