package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/fakekubelet"
	"github.com/vcoil/vcoil/v2/pkg/kubectlvcoil"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// The whole read as a user runs it: a viewer's credentials, the real
// apiserver authorizing the port-forward and carrying it (the websocket
// the plugin opens first, translated by the apiserver to SPDY towards the
// kubelet) to the node of the vcoild pod, whose stand-in kubelet connects
// it to a state server.
func TestNodeStateThroughTheApiserversPortForward(t *testing.T) {
	ctx := t.Context()
	st := &nodestate.State{APIVersion: nodestate.APIVersion, Node: "pf-node1", Dataplane: "linux",
		Blocks: []nodestate.Block{{Name: "pf-0", Pool: "pf", InUse: 2, Free: 30}}}
	state := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != nodestate.Path {
			http.NotFound(w, req)
			return
		}
		_ = json.NewEncoder(w).Encode(st)
	}))
	defer state.Close()
	kl := &fakekubelet.PortForward{Target: strings.TrimPrefix(state.URL, "http://")}
	kubeletServer := httptest.NewTLSServer(kl)
	defer kubeletServer.Close()
	u, err := url.Parse(kubeletServer.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())

	n := env.CreateNode(t, "pf-node1", "127.0.0.1")
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if err := env.Client.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "vcoil-daemon-pf", Labels: map[string]string{"app.kubernetes.io/name": "vcoild"}},
		Spec: corev1.PodSpec{NodeName: "pf-node1", HostNetwork: true, Containers: []corev1.Container{{Name: "vcoild", Image: "vcoil"}}}}
	create(t, p)
	p.Status.Phase = corev1.PodRunning
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}

	kubeconfig := viewer(t)
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	sel, _ := labels.Parse(kubectlvcoil.DefaultDaemonSelector)
	reader := kubectlvcoil.PortForward{Config: cfg, Pods: kubectlvcoil.DaemonPods{Client: c, Namespace: "kube-system", Selector: sel}, Port: kubectlvcoil.DefaultStatePort}
	got, err := reader.NodeState(ctx, "pf-node1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Node != "pf-node1" || len(got.Blocks) != 1 || got.Blocks[0].InUse != 2 {
		t.Errorf("state through the apiserver: %+v", got)
	}
	if _, err := reader.NodeState(ctx, "pf-node1"); err != nil {
		t.Fatalf("second read: %v", err)
	}
	if _, paths, ports := kl.Seen(); len(paths) != 2 || paths[0] != "/portForward/kube-system/vcoil-daemon-pf" || strings.Join(ports, ",") != "9390,9390" {
		t.Errorf("the kubelet saw requests %v forwarding ports %v, want two port-forwards of the vcoild pod to 9390", paths, ports)
	}

	// The binary, as the user runs it.
	create(t, addressBlock("pf-0", "pf", "pf-node1", "10.73.0.0/27", 0))
	out, stderr, code := plugin(t, "--kubeconfig", kubeconfig, "blocks", "--node", "pf-node1")
	if want := "pf-node1  pf-0   pf    10.73.0.0/27  -            2       30"; code != 0 || !strings.Contains(out, want) {
		t.Errorf("blocks --node pf-node1 exited %d, want a line %q:\n%s%s", code, want, out, stderr)
	}
	out, stderr, code = plugin(t, "--kubeconfig", kubeconfig, "node", "pf-node1", "-o", "yaml")
	if code != 0 || !strings.Contains(out, "apiVersion: nodestate.vcoil.io/v1") || !strings.Contains(out, "node: pf-node1") {
		t.Errorf("node pf-node1 -o yaml exited %d:\n%s%s", code, out, stderr)
	}

	// Without the Role in vcoil's namespace, the apiserver refuses.
	nobody, err := env.UserKubeConfig("pf-nobody")
	if err != nil {
		t.Fatal(err)
	}
	ncfg, err := clientcmd.RESTConfigFromKubeConfig(nobody)
	if err != nil {
		t.Fatal(err)
	}
	reader.Config = ncfg
	// The pod lookup is the admin's, so that the refusal is the
	// port-forward's.
	reader.Pods.Client = env.Client
	if _, err := reader.NodeState(ctx, "pf-node1"); err == nil || !strings.Contains(err.Error(), "vcoil-daemon-pf") {
		t.Errorf("a user without pods/portforward read the state: %v", err)
	} else {
		t.Logf("refused: %v", err)
	}
}
