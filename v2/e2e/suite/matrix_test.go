package suite

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

const (
	groupMatrix = "Connectivity matrix (kube-proxy IPVS proposal, \"Test validation\")"
	byVcoil     = "vcoil"
	byKubeProxy = "kube-proxy"
)

// TestConnectivityMatrix runs every row of the proposal's matrix that the
// cluster can run, in the proposal's order; rows it cannot run are listed
// with the reason. A dual-stack cluster runs it once per family: IPv4 first,
// then the same rows over IPv6 (subtest IPv6, report group "... (IPv6)"),
// with Services of that family alone.
func TestConnectivityMatrix(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	by, why := k.serviceProxy(t, w)
	for i, f := range w.families() {
		if i == 0 {
			matrix(t, k, w, f, by, why)
			continue
		}
		t.Run(f.String(), func(t *testing.T) { matrix(t, k, w, f, by, why) })
	}
}

// matrix runs the matrix's rows in family f.
func matrix(t *testing.T, k *cluster, w *world, f family, by, why string) {
	A, B := f.nodeIP(w.nodeA), f.nodeIP(w.nodeB)
	hp := hostPortAddr
	g := f.group(groupMatrix)

	pod := func(name string, from *corev1.Pod, proto, addr string) {
		record(t, g, name, byVcoil, func(t *testing.T) error { return k.connect(t, from, proto, addr) })
	}
	pod("pod -> pod, same VM", w.a1, "tcp", hp(f.podIP(w.a2), portTCP))
	pod("pod -> pod, same VM (UDP)", w.a1, "udp", hp(f.podIP(w.a2), portUDP))
	pod("pod -> pod, other VM", w.a1, "tcp", hp(f.podIP(w.b1), portTCP))
	pod("pod -> pod, other VM (UDP)", w.a1, "udp", hp(f.podIP(w.b1), portUDP))
	// Where the nodes serve no Service or hostPort of the family, those
	// rows are listed with the reason.
	unserved, noHostPorts := k.noServicesOf(t, w, f), k.noHostPortsOf(t, w, f)
	hostPort := func(name string, from *corev1.Pod, addr string) {
		if noHostPorts != "" {
			listed(g, name, statusNotImplemented, noHostPorts)
			return
		}
		pod(name, from, "tcp", addr)
	}
	hostPort("pod -> own VM, own hostPort", w.hostPort, hp(A, portHost))
	hostPort("pod -> own VM, other hostPort", w.a1, hp(A, portHost))
	hostPort("pod -> other VM, other hostPort", w.b1, hp(A, portHost))
	pod("pod -> own VM", w.a1, "tcp", hp(A, portNodeTCP))
	pod("pod -> other VM", w.a1, "tcp", hp(B, portNodeTCP))
	if ext := k.settings.externalOf(f); ext != "" {
		pod("pod -> internet (the cluster's external host)", w.a1, "tcp", ext)
	} else {
		listed(g, "pod -> internet", statusNotApplicable, fmt.Sprintf("no %s external host given (VCOIL_E2E_EXTERNAL, VCOIL_E2E_EXTERNAL6)", f))
	}
	listed(g, "pod -> http://metadata", statusNotApplicable, "no metadata server in this cluster")
	pod("VM -> pod, same VM", w.hostA, "tcp", hp(f.podIP(w.a1), portTCP))
	pod("VM -> pod, other VM", w.hostA, "tcp", hp(f.podIP(w.b1), portTCP))
	hostPort("VM -> same VM hostPort", w.hostA, hp(A, portHost))
	hostPort("VM -> other VM hostPort", w.hostB, hp(A, portHost))

	serviceRows(t, k, w, f, by, why, unserved)
	loadBalancerRows(t, k, w, f, by, unserved)
	publicNodePortRows(t, k, w, f, by, why, unserved)
}

// serviceRows runs the ClusterIP and NodePort rows against the proxy that
// serves the cluster's services (by; why says how the suite knows). The
// backends of each service are chosen so that "own" (the client is a
// backend), "same VM" and "other VM" (where the other backend runs) and
// "policy=local" (externalTrafficPolicy Local) mean what the proposal says;
// a1 is the client pod, hostA the client VM. When unserved says why the
// nodes serve no Service of the family, the rows are listed with it.
func serviceRows(t *testing.T, k *cluster, w *world, f family, by, why, unserved string) {
	// Services only where the nodes serve the family.
	cluster, nodePort := map[string]*corev1.Service{}, map[string]*corev1.Service{}
	if unserved == "" {
		cluster, nodePort = serviceRowServices(t, k, w, f)
	}
	onA, onB := f.nodeIP(w.nodeA), f.nodeIP(w.nodeB)
	svc := func(name string, from *corev1.Pod, addr func() string) {
		if unserved != "" {
			listed(f.group(groupMatrix), name, statusNotImplemented, unserved)
			return
		}
		record(t, f.group(groupMatrix), name, by, func(t *testing.T) error {
			if err := k.connect(t, from, "tcp", addr()); err != nil {
				return fmt.Errorf("%w (served by %s: %s)", err, by, why)
			}
			return nil
		})
	}
	cip := func(key string) func() string {
		return func() string {
			s := cluster[key]
			return hostPortAddr(mustAddr(s.Spec.ClusterIP), int(s.Spec.Ports[0].Port))
		}
	}
	np := func(key string, node netip.Addr) func() string {
		return func() string { return hostPortAddr(node, int(nodePort[key].Spec.Ports[0].NodePort)) }
	}

	svc("pod -> own clusterIP, hairpin", w.a1, cip("hairpin/remap"))
	svc("pod -> own clusterIP, same VM, other pod, no port remap", w.a1, cip("own-same/same"))
	svc("pod -> own clusterIP, same VM, other pod, port remap", w.a1, cip("own-same/remap"))
	svc("pod -> own clusterIP, other VM, other pod, no port remap", w.a1, cip("own-other/same"))
	svc("pod -> own clusterIP, other VM, other pod, port remap", w.a1, cip("own-other/remap"))
	svc("pod -> other clusterIP, same VM, no port remap", w.a1, cip("other-same/same"))
	svc("pod -> other clusterIP, same VM, port remap", w.a1, cip("other-same/remap"))
	svc("pod -> other clusterIP, other VM, no port remap", w.a1, cip("other-other/same"))
	svc("pod -> other clusterIP, other VM, port remap", w.a1, cip("other-other/remap"))
	svc("pod -> own node, own nodePort, hairpin", w.a1, np("hairpin", onA))
	svc("pod -> own node, own nodePort, policy=local", w.a1, np("own-other/local", onA))
	svc("pod -> own node, own nodePort, same VM", w.a1, np("own-same", onA))
	svc("pod -> own node, own nodePort, other VM", w.a1, np("own-other", onA))
	svc("pod -> own node, other nodePort, policy=local", w.a1, np("other-same/local", onA))
	svc("pod -> own node, other nodePort, same VM", w.a1, np("other-same", onA))
	svc("pod -> own node, other nodePort, other VM", w.a1, np("other-other", onA))
	svc("pod -> other node, own nodeport, policy=local", w.a1, np("own-other/local", onB))
	svc("pod -> other node, own nodeport, same VM", w.a1, np("own-same", onB))
	svc("pod -> other node, own nodeport, other VM", w.a1, np("own-other", onB))
	svc("pod -> other node, other nodeport, policy=local", w.a1, np("other-other/local", onB))
	svc("pod -> other node, other nodeport, same VM", w.a1, np("other-same", onB))
	svc("pod -> other node, other nodeport, other VM", w.a1, np("other-other", onB))
	svc("VM -> same VM nodePort, policy=local", w.hostA, np("other-same/local", onA))
	svc("VM -> same VM nodePort, same VM", w.hostA, np("other-same", onA))
	svc("VM -> same VM nodePort, other VM", w.hostA, np("other-other", onA))
	svc("VM -> other VM nodePort, policy=local", w.hostA, np("other-other/local", onB))
	svc("VM -> other VM nodePort, same VM", w.hostA, np("other-same", onB))
	svc("VM -> other VM nodePort, other VM", w.hostA, np("other-other", onB))
}

// serviceRowServices labels the suite's pods into the backend groups of
// the matrix and makes, in family f, a ClusterIP Service per group with and
// without port remap (cluster, by "group/remap" and "group/same") and a
// NodePort Service per group with either traffic policy (nodePort, by
// "group" and "group/local"), once each has endpoints.
func serviceRowServices(t *testing.T, k *cluster, w *world, f family) (cluster, nodePort map[string]*corev1.Service) {
	c := ctx(t, 2*time.Minute)
	// Group labels select the backends of each service.
	groups := map[string][]*corev1.Pod{
		"hairpin":     {w.a1},
		"own-same":    {w.a1, w.a2},
		"own-other":   {w.a1, w.b1},
		"other-same":  {w.a2},
		"other-other": {w.b1},
	}
	for g, pods := range groups {
		for _, p := range pods {
			cur := &corev1.Pod{}
			if err := k.c.Get(c, client.ObjectKeyFromObject(p), cur); err != nil {
				t.Fatal(err)
			}
			patch := client.MergeFrom(cur.DeepCopy())
			cur.Labels["grp-"+g] = "yes"
			if err := k.c.Patch(c, cur, patch); err != nil {
				t.Fatal(err)
			}
		}
	}
	var created []*corev1.Service
	mk := func(name, group string, port int, typ corev1.ServiceType, local bool) *corev1.Service {
		s := k.serviceOf(t, &f, w.ns, f.prefix()+name, map[string]string{"grp-" + group: "yes"}, port, portTCP, typ, local)
		created = append(created, s)
		return s
	}
	cluster = map[string]*corev1.Service{}
	for _, g := range []string{"hairpin", "own-same", "own-other", "other-same", "other-other"} {
		cluster[g+"/remap"] = mk("c-"+g+"-remap", g, 80, corev1.ServiceTypeClusterIP, false)
		cluster[g+"/same"] = mk("c-"+g+"-same", g, portTCP, corev1.ServiceTypeClusterIP, false)
	}
	nodePort = map[string]*corev1.Service{}
	for _, g := range []string{"hairpin", "own-same", "own-other", "other-same", "other-other"} {
		nodePort[g] = mk("n-"+g, g, 80, corev1.ServiceTypeNodePort, false)
		nodePort[g+"/local"] = mk("n-"+g+"-local", g, 80, corev1.ServiceTypeNodePort, true)
	}
	// Wait until every service has its endpoints.
	poll.Eventually(t, time.Minute, func() error {
		for _, s := range created {
			if err := k.readyEndpoints(c, s); err != nil {
				return err
			}
		}
		return nil
	})
	for _, s := range created {
		if err := k.c.Get(c, client.ObjectKeyFromObject(s), s); err != nil {
			t.Fatal(err)
		}
	}
	return cluster, nodePort
}

// serviceProxy tells which proxy serves the services on the suite's two
// nodes, from what the cluster says: vcoild renders them unless its pod on
// the node runs with --service-proxy=false or the node is labelled
// vcoil.io/service-proxy=disabled (what vcoild itself reads when it
// starts); otherwise another proxy, kube-proxy, must.
func (k *cluster) serviceProxy(t *testing.T, w *world) (by, why string) {
	t.Helper()
	c := ctx(t, 30*time.Second)
	var pods corev1.PodList
	if err := k.c.List(c, &pods, client.MatchingLabels{"app.kubernetes.io/name": "vcoild"}); err != nil {
		t.Fatal(err)
	}
	renders := map[string]string{}
	for _, n := range []*corev1.Node{w.nodeA, w.nodeB} {
		renders[n.Name] = "no vcoild pod"
		for _, p := range pods.Items {
			if p.Spec.NodeName != n.Name || p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
				continue
			}
			switch {
			case slices.Contains(p.Spec.Containers[0].Args, "--service-proxy=false"):
				renders[n.Name] = "vcoild runs with --service-proxy=false"
			case n.Labels["vcoil.io/service-proxy"] == "disabled":
				renders[n.Name] = "the node is labelled vcoil.io/service-proxy=disabled"
			default:
				renders[n.Name] = ""
			}
		}
	}
	a, b := renders[w.nodeA.Name], renders[w.nodeB.Name]
	switch {
	case a == "" && b == "":
		return byVcoil, "vcoild's service renderer runs on both nodes"
	case a != "" && b != "":
		return byKubeProxy, "vcoil's service renderer is off (" + a + "); kube-proxy serves the services"
	default:
		t.Fatalf("vcoil renders services on one of the suite's nodes only (%s: %q, %s: %q): the matrix needs one proxy on both", w.nodeA.Name, a, w.nodeB.Name, b)
		return "", ""
	}
}

// publicNodePortRows run from a client outside the cluster (the agent on
// the external host) to the nodes' NodePorts. The services answer HTTP, so
// that the backend tells the client address it saw: with
// externalTrafficPolicy Local it must be the client's own.
// unserved, when set, says why the nodes serve no Service of the family.
func publicNodePortRows(t *testing.T, k *cluster, w *world, f family, by, why, unserved string) {
	g := f.group(groupMatrix)
	names := []string{"public -> nodeport, policy=local", "public -> nodeport, policy=global", "public -> nodeport, manual backend"}
	if unserved != "" {
		for _, n := range names {
			listed(g, n, statusNotImplemented, unserved)
		}
		return
	}
	clientHost, _, err := net.SplitHostPort(k.settings.externalOf(f))
	if len(k.settings.externalAgent) == 0 || err != nil {
		for _, n := range names {
			listed(g, n, statusNotApplicable, fmt.Sprintf("no %s client outside the cluster given (VCOIL_E2E_EXTERNAL_AGENT and VCOIL_E2E_EXTERNAL, VCOIL_E2E_EXTERNAL6)", f))
		}
		return
	}
	c := ctx(t, 2*time.Minute)
	// a2 runs on node A, b1 on node B (serviceRows labelled them).
	local := k.serviceOf(t, &f, w.ns, f.prefix()+"p-local", map[string]string{"grp-other-same": "yes"}, 80, portHTTP, corev1.ServiceTypeNodePort, true)
	global := k.serviceOf(t, &f, w.ns, f.prefix()+"p-global", map[string]string{"grp-other-other": "yes"}, 80, portHTTP, corev1.ServiceTypeNodePort, false)
	manual := k.manualService(t, f, w.ns, f.prefix()+"p-manual", corev1.ServiceTypeNodePort, f.podIP(w.b1), portHTTP)
	nodePort := map[string]int32{}
	poll.Eventually(t, time.Minute, func() error {
		for _, s := range []*corev1.Service{local, global, manual} {
			if err := k.c.Get(c, client.ObjectKeyFromObject(s), s); err != nil {
				return err
			}
			nodePort[s.Name] = s.Spec.Ports[0].NodePort
			if s.Spec.Selector == nil {
				continue
			}
			if err := k.readyEndpoints(c, s); err != nil {
				return err
			}
		}
		return nil
	})
	A, B := f.nodeIP(w.nodeA), f.nodeIP(w.nodeB)
	at := func(node netip.Addr, svc string) string { return hostPortAddr(node, int(nodePort[svc])) }
	row := func(name string, run func(t *testing.T) error) {
		record(t, g, name, by, func(t *testing.T) error {
			if err := run(t); err != nil {
				return fmt.Errorf("%w (served by %s: %s)", err, by, why)
			}
			return nil
		})
	}
	row(names[0], func(t *testing.T) error {
		if err := k.clientIPFromOutside(t, at(A, local.Name), clientHost); err != nil {
			return err
		}
		// Node B has no endpoint of the service: it must not forward.
		if out, err := k.fromOutsideOnce(ctx(t, 10*time.Second), "connect", "http", at(B, local.Name), "--timeout", "2s"); err == nil {
			return fmt.Errorf("node %s, which has no endpoint of the policy=local service, answered: %s", B, out)
		}
		return nil
	})
	row(names[1], func(t *testing.T) error {
		for _, node := range []netip.Addr{A, B} {
			if err := k.fromOutside(t, "connect", "http", at(node, global.Name), "--timeout", "3s"); err != nil {
				return err
			}
		}
		return nil
	})
	row(names[2], func(t *testing.T) error {
		for _, node := range []netip.Addr{A, B} {
			if err := k.fromOutside(t, "connect", "http", at(node, manual.Name), "--timeout", "3s"); err != nil {
				return err
			}
		}
		return nil
	})
}

// manualService is a NodePort or LoadBalancer service of family f without
// selector whose one endpoint, addr:port, the suite writes itself ("manual
// backend").
func (k *cluster) manualService(t *testing.T, f family, ns, name string, typ corev1.ServiceType, addr netip.Addr, port int) *corev1.Service {
	t.Helper()
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:           typ,
			IPFamilies:     []corev1.IPFamily{f.k8s()},
			IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			Ports:          []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt(port)}},
		},
	}
	addressType := discoveryv1.AddressTypeIPv4
	if f.v6 {
		addressType = discoveryv1.AddressTypeIPv6
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-manual", Labels: map[string]string{
			discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "e2e.vcoil.io",
		}},
		AddressType: addressType,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(port))}},
	}
	for _, o := range []client.Object{s, slice} {
		if err := k.c.Create(ctx(t, 30*time.Second), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %s: %v", o.GetName(), err)
		}
	}
	return s
}

// fromOutside runs the agent on the host outside the cluster, for a few
// attempts (a new service's rules may still be on their way).
func (k *cluster) fromOutside(t *testing.T, args ...string) error {
	t.Helper()
	return poll.Until(t.Context(), 15*time.Second, time.Second, func(c context.Context) error {
		_, err := k.fromOutsideOnce(c, args...)
		return err
	})
}

func (k *cluster) fromOutsideOnce(c context.Context, args ...string) (string, error) {
	a := k.settings.externalAgent
	out, err := exec.CommandContext(c, a[0], append(append([]string{}, a[1:]...), args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("outside the cluster: agent %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// clientIPFromOutside asks the backend behind addr, from outside the
// cluster, which client address it saw, and wants the client's own.
func (k *cluster) clientIPFromOutside(t *testing.T, addr, want string) error {
	t.Helper()
	return poll.Until(t.Context(), 15*time.Second, time.Second, func(c context.Context) error {
		out, err := k.fromOutsideOnce(c, "connect", "http", addr, "--path", "/clientip", "--timeout", "3s")
		if err != nil {
			return err
		}
		got, err := netip.ParseAddrPort(strings.TrimSpace(out))
		if err != nil {
			return fmt.Errorf("the backend behind %s answered %q: %w", addr, out, err)
		}
		if got.Addr().String() != want {
			return fmt.Errorf("the backend behind %s saw the client as %s, want the client's own %s (no SNAT under externalTrafficPolicy: Local)", addr, got.Addr(), want)
		}
		return nil
	})
}

// readyEndpoints fails until the Service has a ready endpoint.
func (k *cluster) readyEndpoints(c context.Context, s *corev1.Service) error {
	ep := &corev1.Endpoints{}
	if err := k.c.Get(c, client.ObjectKeyFromObject(s), ep); err != nil {
		return err
	}
	for _, ss := range ep.Subsets {
		if len(ss.Addresses) > 0 {
			return nil
		}
	}
	return fmt.Errorf("service %s has no ready endpoints", s.Name)
}
