package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	egressagent "github.com/vcoil/vcoil/v2/pkg/egress/agent"
)

const groupEgress = "Egress"

// uploadSize is what each client sends through an Egress: 1 MiB, many
// full-size packets, so that a tunnel MTU too large for the encapsulation
// cannot pass for working.
const uploadSize = 1 << 20

// TestEgress runs Egresses in a namespace of their own: "nat" (two routers,
// VXLAN) covers the external host's network, "elsewhere" (one router) a
// network the lab has no host in. Clients of "nat" must reach the external
// host from a router's address; every other pod, and a client of
// "elsewhere", from its own, as pods reach it without an Egress (the lab
// routes pod addresses back and does not SNAT them).
func TestEgress(t *testing.T) {
	k := need(t)
	names := []string{
		"a client's 1 MiB uploads to a destination leave from a router pod's address",
		"a pod without the annotation reaches the same host from its own address",
		"a client reaches a host outside its Egress's destinations from its own address",
		"uploads leave through the new routers after kubectl rollout restart of the routers' Deployment",
		"an Egress with a destination that is no CIDR is rejected, naming spec.destinations[0]",
		"a pod naming a missing Egress starts, with an EgressNotFound Event",
		"kubectl scale egress changes the number of routers (scale subresource)",
	}
	extHost, _, err := net.SplitHostPort(k.settings.external)
	if err != nil || len(k.settings.externalAgent) == 0 {
		for _, n := range names {
			listed(groupEgress, n, statusNotApplicable, "no external host given (VCOIL_E2E_EXTERNAL and VCOIL_E2E_EXTERNAL_AGENT)")
		}
		return
	}
	// The external host runs the agent as the suite's pods do: its HTTP
	// server answers uploads on portHTTP. In a dual-stack cluster it has an
	// IPv6 address too, and "nat" covers its IPv6 network as well.
	external := map[family]string{ipv4: hostPortAddr(mustAddr(extHost), portHTTP)}
	natDestinations := []string{"203.0.113.0/24"}
	names6 := []string{
		"IPv6: a client's 1 MiB uploads to an IPv6 destination leave from a router pod's IPv6 address",
		"IPv6: a pod without the annotation reaches the same host from its own IPv6 address",
	}
	if ext6, err := netip.ParseAddrPort(k.settings.external6); err == nil {
		external[ipv6] = hostPortAddr(ext6.Addr(), portHTTP)
		natDestinations = append(natDestinations, netip.PrefixFrom(ext6.Addr(), 64).Masked().String())
	}
	c := ctx(t, 15*time.Minute)
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "vcoil-e2e-egress-"}}
	if err := k.c.Create(c, nsObj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.c.Delete(context.Background(), nsObj) })
	ns := nsObj.Name

	for _, eg := range []*unstructured.Unstructured{
		egressObject(ns, "nat", 2, natDestinations...),
		egressObject(ns, "elsewhere", 1, "198.51.100.0/24"),
	} {
		if err := k.c.Create(c, eg); err != nil {
			t.Fatalf("create egress %s/%s: %v", ns, eg.GetName(), err)
		}
	}
	routers := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "nat"}}
	for _, d := range []*appsv1.Deployment{routers, {ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "elsewhere"}}} {
		if err := poll.Until(c, 3*time.Minute, pollInterval, func(c context.Context) error { return k.rolledOut(c, d) }); err != nil {
			t.Fatalf("the routers of egress %s: %v", d.Name, err)
		}
	}

	// Two clients of "nat", spread over the nodes, so that tunnels cross
	// nodes; one pod without the annotation; one client of "elsewhere".
	clients := k.egressClients(t, ns, "client", "nat", 2)
	plain := k.egressClients(t, ns, "plain", "", 1)[0]
	elsewhere := k.egressClients(t, ns, "client-elsewhere", "elsewhere", 1)[0]

	// throughRouters uploads from each client until one upload left from a
	// ready router's address; an upload from any other address fails at
	// once unless the routers are still changing.
	throughRoutersOf := func(f family) error {
		for _, p := range clients {
			err := poll.Until(c, time.Minute, time.Second, func(c context.Context) error {
				src, err := k.uploadSource(c, p, external[f])
				if err != nil {
					return err
				}
				ips, err := k.routerIPs(c, ns, "nat", f)
				if err != nil {
					return err
				}
				if !slices.Contains(ips, src) {
					return fmt.Errorf("client %s (%s, node %s): the external host saw %s, want one of the routers' %v", p.Name, f.podIP(p), p.Spec.NodeName, src, ips)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	}
	throughRouters := func(*testing.T) error { return throughRoutersOf(ipv4) }
	fromOwnAddressOf := func(f family, p *corev1.Pod) error {
		return poll.Until(c, 30*time.Second, time.Second, func(c context.Context) error {
			src, err := k.uploadSource(c, p, external[f])
			if err != nil {
				return err
			}
			if src != f.podIP(p) {
				return fmt.Errorf("pod %s: the external host saw %s, want the pod's own %s", p.Name, src, f.podIP(p))
			}
			return nil
		})
	}
	fromOwnAddress := func(p *corev1.Pod) error { return fromOwnAddressOf(ipv4, p) }

	record(t, groupEgress, names[0], byVcoil, throughRouters)
	record(t, groupEgress, names[1], byVcoil, func(t *testing.T) error { return fromOwnAddress(plain) })
	record(t, groupEgress, names[2], byVcoil, func(t *testing.T) error { return fromOwnAddress(elsewhere) })
	if _, ok := external[ipv6]; ok {
		record(t, groupEgress, names6[0], byVcoil, func(*testing.T) error { return throughRoutersOf(ipv6) })
		record(t, groupEgress, names6[1], byVcoil, func(*testing.T) error { return fromOwnAddressOf(ipv6, plain) })
	} else {
		for _, n := range names6 {
			listed(groupEgress, n, statusNotApplicable, "no IPv6 external host given (VCOIL_E2E_EXTERNAL6)")
		}
	}
	record(t, groupEgress, names[3], byVcoil, func(t *testing.T) error {
		before, err := k.routerIPs(c, ns, "nat", ipv4)
		if err != nil {
			return err
		}
		if err := k.rolloutRestart(c, routers); err != nil {
			return err
		}
		if err := poll.Until(c, 3*time.Minute, pollInterval, func(c context.Context) error { return k.rolledOut(c, routers) }); err != nil {
			return fmt.Errorf("after the restart: %w", err)
		}
		after, err := k.routerIPs(c, ns, "nat", ipv4)
		if err != nil {
			return err
		}
		t.Logf("routers before the restart %v, after %v", before, after)
		return throughRouters(t)
	})
	record(t, groupEgress, names[4], byVcoil, func(t *testing.T) error {
		bad := egressObject(ns, "bad", 1, "not-a-network")
		err := k.c.Create(c, bad)
		if err == nil {
			_ = k.c.Delete(c, bad)
			return fmt.Errorf("egress %s/bad with destination %q was accepted", ns, "not-a-network")
		}
		if !strings.Contains(err.Error(), "spec.destinations[0]") {
			return fmt.Errorf("egress %s/bad rejected, but the error does not name spec.destinations[0]: %w", ns, err)
		}
		return nil
	})
	record(t, groupEgress, names[5], byVcoil, func(t *testing.T) error {
		p := k.egressClients(t, ns, "client-missing", "missing", 1)[0]
		return poll.Until(c, time.Minute, pollInterval, func(c context.Context) error {
			var events corev1.EventList
			if err := k.c.List(c, &events, client.InNamespace(ns)); err != nil {
				return err
			}
			var seen []string
			for _, e := range events.Items {
				if e.InvolvedObject.UID != p.UID {
					continue
				}
				if e.Reason == egressagent.ReasonEgressNotFound {
					return nil
				}
				seen = append(seen, e.Reason)
			}
			return fmt.Errorf("pod %s: no EgressNotFound Event; its Events: %v", p.Name, seen)
		})
	})
	if k.settings.kubectl == "" {
		listed(groupEgress, names[6], statusNotApplicable, "no kubectl given (VCOIL_E2E_KUBECTL)")
	} else {
		record(t, groupEgress, names[6], byVcoil, func(t *testing.T) error {
			for _, n := range []int{3, 2} {
				out, err := exec.CommandContext(c, k.settings.kubectl, "--kubeconfig", k.settings.kubeconfig,
					"-n", ns, "scale", "egress/nat", fmt.Sprintf("--replicas=%d", n)).CombinedOutput()
				if err != nil {
					return fmt.Errorf("kubectl scale egress/nat --replicas=%d: %v: %s", n, err, out)
				}
				err = poll.Until(c, 3*time.Minute, pollInterval, func(c context.Context) error {
					if err := k.rolledOut(c, routers); err != nil {
						return err
					}
					if got := ptr.Deref(routers.Spec.Replicas, 0); got != int32(n) {
						return fmt.Errorf("the routers' Deployment wants %d replicas, want %d", got, n)
					}
					eg := egressObject(ns, "nat", 0, "")
					if err := k.c.Get(c, client.ObjectKeyFromObject(eg), eg); err != nil {
						return err
					}
					if got, _, _ := unstructured.NestedInt64(eg.Object, "status", "readyReplicas"); got != int64(n) {
						return fmt.Errorf("egress %s/nat reports %d ready routers, want %d", ns, got, n)
					}
					return nil
				})
				if err != nil {
					return fmt.Errorf("after kubectl scale --replicas=%d: %w", n, err)
				}
			}
			return throughRouters(t)
		})
	}
}

// egressObject is an Egress of ns with VXLAN tunnels. It is built as an
// unstructured object so that the suite states the manifest a user writes.
func egressObject(ns, name string, replicas int64, destinations ...string) *unstructured.Unstructured {
	dests := make([]any, len(destinations))
	for i, d := range destinations {
		dests[i] = d
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": vcoilv2.GroupVersion.String(),
		"kind":       "Egress",
		"metadata":   map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{
			"destinations":  dests,
			"replicas":      replicas,
			"encapsulation": string(vcoilv2.EncapsulationVXLAN),
		},
	}}
	return u
}

// egressClients runs a Deployment of agents whose pods name egress (none
// when empty) in their annotation, spread over the nodes, and returns its
// running pods.
func (k *cluster) egressClients(t *testing.T, ns, name, egress string, replicas int32) []*corev1.Pod {
	t.Helper()
	labels := map[string]string{"app": "vcoil-e2e-egress", "name": name}
	var annotations map[string]string
	if egress != "" {
		annotations = map[string]string{vcoilv2.AnnotationEgressPrefix + ns: egress}
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname,
						WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{
						Name:            "agent",
						Image:           k.settings.agentImage,
						ImagePullPolicy: corev1.PullPolicy(k.settings.pullPolicy),
						Command:         []string{"/agent"},
						Args:            []string{"serve"},
					}},
				},
			},
		},
	}
	c := ctx(t, 3*time.Minute)
	if err := k.c.Create(c, d); err != nil {
		t.Fatalf("create deployment %s/%s: %v", ns, name, err)
	}
	if err := poll.Until(c, 3*time.Minute, pollInterval, func(c context.Context) error { return k.rolledOut(c, d) }); err != nil {
		t.Fatalf("deployment %s/%s: %v", ns, name, err)
	}
	pods, err := k.runningPods(c, ns, labels)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

// runningPods are the running, not terminating pods of ns with labels.
func (k *cluster) runningPods(c context.Context, ns string, labels map[string]string) ([]*corev1.Pod, error) {
	var l corev1.PodList
	if err := k.c.List(c, &l, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range l.Items {
		p := &l.Items[i]
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

// routerIPs are the addresses of family f of the Egress's running router
// pods.
func (k *cluster) routerIPs(c context.Context, ns, egress string, f family) ([]netip.Addr, error) {
	pods, err := k.runningPods(c, ns, map[string]string{vcoilv2.LabelEgress: egress})
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	for _, p := range pods {
		ips = append(ips, f.podIP(p))
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("egress %s/%s has no running router pod", ns, egress)
	}
	return ips, nil
}

// rolledOut fails until every replica of the Deployment runs its current
// template and is ready, and no pod of an older one is left.
func (k *cluster) rolledOut(c context.Context, d *appsv1.Deployment) error {
	if err := k.c.Get(c, client.ObjectKeyFromObject(d), d); err != nil {
		return err
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	s := d.Status
	if s.ObservedGeneration < d.Generation || s.UpdatedReplicas != want || s.ReadyReplicas != want || s.Replicas != want {
		return fmt.Errorf("deployment %s/%s: %d replicas wanted, %d updated, %d ready, %d in all", d.Namespace, d.Name, want, s.UpdatedReplicas, s.ReadyReplicas, s.Replicas)
	}
	return nil
}

// rolloutRestart does what `kubectl rollout restart` does: a new template
// annotation, which replaces every pod.
func (k *cluster) rolloutRestart(c context.Context, d *appsv1.Deployment) error {
	if err := k.c.Get(c, client.ObjectKeyFromObject(d), d); err != nil {
		return err
	}
	patch := client.MergeFrom(d.DeepCopy())
	if d.Spec.Template.Annotations == nil {
		d.Spec.Template.Annotations = map[string]string{}
	}
	d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = time.Now().Format(time.RFC3339)
	if err := k.c.Patch(c, d, patch); err != nil {
		return fmt.Errorf("restart deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// uploadSource uploads uploadSize bytes from p to the agent at addr and
// returns the source address the agent saw.
func (k *cluster) uploadSource(c context.Context, p *corev1.Pod, addr string) (netip.Addr, error) {
	out, err := k.exec(c, p, "/agent", "connect", "http", addr, "--upload", fmt.Sprint(uploadSize), "--timeout", "10s")
	if err != nil {
		return netip.Addr{}, err
	}
	var answer struct {
		Client string `json:"client"`
	}
	if err := json.Unmarshal([]byte(out), &answer); err != nil {
		return netip.Addr{}, fmt.Errorf("upload from %s to %s: answer %q: %w", p.Name, addr, out, err)
	}
	src, err := netip.ParseAddrPort(answer.Client)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("upload from %s to %s: client %q: %w", p.Name, addr, answer.Client, err)
	}
	return src.Addr().Unmap(), nil
}
