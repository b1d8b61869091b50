package suite

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

const (
	groupMatrix   = "Connectivity matrix (kube-proxy IPVS proposal, \"Test validation\")"
	byVcoil       = "vcoil"
	byKubeProxy   = "kube-proxy"
	serviceDetail = "vcoil's own service renderer: not implemented yet; kube-proxy (nftables) serves it"
)

// TestConnectivityMatrix runs every row of the proposal's matrix that the
// cluster can run, in the proposal's order; rows it cannot run are listed
// with the reason.
func TestConnectivityMatrix(t *testing.T) {
	k := need(t)
	w := deployWorld(t, k)
	A, B := nodeIP(w.nodeA), nodeIP(w.nodeB)
	hp := hostPortAddr

	pod := func(name string, from *corev1.Pod, proto, addr string) {
		record(t, groupMatrix, name, byVcoil, func(t *testing.T) error { return k.connect(t, from, proto, addr) })
	}
	pod("pod -> pod, same VM", w.a1, "tcp", hp(podIP(w.a2), portTCP))
	pod("pod -> pod, same VM (UDP)", w.a1, "udp", hp(podIP(w.a2), portUDP))
	pod("pod -> pod, other VM", w.a1, "tcp", hp(podIP(w.b1), portTCP))
	pod("pod -> pod, other VM (UDP)", w.a1, "udp", hp(podIP(w.b1), portUDP))
	pod("pod -> own VM, own hostPort", w.hostPort, "tcp", hp(A, portHost))
	pod("pod -> own VM, other hostPort", w.a1, "tcp", hp(A, portHost))
	pod("pod -> other VM, other hostPort", w.b1, "tcp", hp(A, portHost))
	pod("pod -> own VM", w.a1, "tcp", hp(A, portNodeTCP))
	pod("pod -> other VM", w.a1, "tcp", hp(B, portNodeTCP))
	if k.settings.external != "" {
		pod("pod -> internet (the cluster's external host)", w.a1, "tcp", k.settings.external)
	} else {
		listed(groupMatrix, "pod -> internet", statusNotApplicable, "no external host given (VCOIL_E2E_EXTERNAL)")
	}
	listed(groupMatrix, "pod -> http://metadata", statusNotApplicable, "no metadata server in this cluster")
	pod("VM -> pod, same VM", w.hostA, "tcp", hp(podIP(w.a1), portTCP))
	pod("VM -> pod, other VM", w.hostA, "tcp", hp(podIP(w.b1), portTCP))
	pod("VM -> same VM hostPort", w.hostA, "tcp", hp(A, portHost))
	pod("VM -> other VM hostPort", w.hostB, "tcp", hp(A, portHost))

	serviceRows(t, k, w)

	for _, name := range []string{
		"pod -> own external LB, no remap, policy=local", "pod -> own external LB, no remap, same VM",
		"pod -> own external LB, no remap, other VM", "pod -> own external LB, remap, policy=local",
		"pod -> own external LB, remap, same VM", "pod -> own external LB, remap, other VM",
		"VM -> external LB",
		"public -> external LB, no remap, policy=local", "public -> external LB, no remap, policy=global",
		"public -> external LB, remap, policy=local", "public -> external LB, remap, policy=global",
		"public -> external LB, manual backend",
	} {
		listed(groupMatrix, name, statusNotImplemented, "vcoil implements no LoadBalancer (and renders no services yet)")
	}
	for _, name := range []string{"public -> nodeport, policy=local", "public -> nodeport, policy=global", "public -> nodeport, manual backend"} {
		listed(groupMatrix, name, statusNotImplemented, "vcoil renders no services yet; the suite has no client outside the cluster to run it against kube-proxy")
	}
}

// serviceRows runs the ClusterIP and NodePort rows against kube-proxy. The
// backends of each service are chosen so that "own" (the client is a
// backend), "same VM" and "other VM" (where the other backend runs) and
// "policy=local" (externalTrafficPolicy Local) mean what the proposal says;
// a1 is the client pod, hostA the client VM.
func serviceRows(t *testing.T, k *cluster, w *world) {
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
		s := k.service(t, w.ns, name, map[string]string{"grp-" + group: "yes"}, port, portTCP, typ, local)
		created = append(created, s)
		return s
	}
	cluster := map[string]*corev1.Service{}
	for _, g := range []string{"hairpin", "own-same", "own-other", "other-same", "other-other"} {
		cluster[g+"/remap"] = mk("c-"+g+"-remap", g, 80, corev1.ServiceTypeClusterIP, false)
		cluster[g+"/same"] = mk("c-"+g+"-same", g, portTCP, corev1.ServiceTypeClusterIP, false)
	}
	nodePort := map[string]*corev1.Service{}
	for _, g := range []string{"hairpin", "own-same", "own-other", "other-same", "other-other"} {
		nodePort[g] = mk("n-"+g, g, 80, corev1.ServiceTypeNodePort, false)
		nodePort[g+"/local"] = mk("n-"+g+"-local", g, 80, corev1.ServiceTypeNodePort, true)
	}
	// Wait until every service has its endpoints.
	poll.Eventually(t, time.Minute, func() error {
		for _, s := range created {
			ep := &corev1.Endpoints{}
			if err := k.c.Get(c, client.ObjectKeyFromObject(s), ep); err != nil {
				return err
			}
			n := 0
			for _, ss := range ep.Subsets {
				n += len(ss.Addresses)
			}
			if n == 0 {
				return fmt.Errorf("service %s has no ready endpoints", s.Name)
			}
		}
		return nil
	})
	for _, s := range created {
		if err := k.c.Get(c, client.ObjectKeyFromObject(s), s); err != nil {
			t.Fatal(err)
		}
	}
	A, B := nodeIP(w.nodeA), nodeIP(w.nodeB)
	svc := func(name string, from *corev1.Pod, addr func() string) {
		record(t, groupMatrix, name, byKubeProxy, func(t *testing.T) error {
			if err := k.connect(t, from, "tcp", addr()); err != nil {
				return fmt.Errorf("%w (%s)", err, serviceDetail)
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
	np := func(key string, node func() string) func() string {
		return func() string { return node() + fmt.Sprintf(":%d", nodePort[key].Spec.Ports[0].NodePort) }
	}
	onA := func() string { return A.String() }
	onB := func() string { return B.String() }

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
