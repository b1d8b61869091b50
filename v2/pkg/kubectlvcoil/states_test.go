package kubectlvcoil

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/vcoil/vcoil/v2/internal/fakekubelet"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

func TestPortForwardReadsTheStateThroughTheApiserver(t *testing.T) {
	state := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != nodestate.Path {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(fixtureState())
	}))
	defer state.Close()
	// The stand-in serves the portforward subresource itself, as the
	// apiserver and the kubelet behind it would.
	fake := &fakekubelet.PortForward{Target: strings.TrimPrefix(state.URL, "http://"), OnlySPDY: true}
	apiserver := httptest.NewServer(fake)
	defer apiserver.Close()

	pf := PortForward{Config: &rest.Config{Host: apiserver.URL}, Port: DefaultStatePort}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "vcoil-daemon-x1"}}
	st, err := pf.read(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "node1" || len(st.Pods) != 2 || st.Policies == nil {
		t.Errorf("state read through the port-forward: %+v", st)
	}
	methods, paths, ports := fake.Seen()
	// kubectl's order: a websocket first (GET), SPDY (POST) after the
	// upgrade failed.
	if strings.Join(methods, ",") != "GET,POST" {
		t.Errorf("requests %v, want a websocket attempt and then SPDY", methods)
	}
	for _, p := range paths {
		if p != "/api/v1/namespaces/kube-system/pods/vcoil-daemon-x1/portforward" {
			t.Errorf("request to %s, want the pod's portforward subresource", p)
		}
	}
	if len(ports) != 1 || ports[0] != "9390" {
		t.Errorf("forwarded ports %v, want vcoild's state port 9390 once", ports)
	}
}

func TestPortForwardRefusesAStateOfAnotherFormat(t *testing.T) {
	state := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"apiVersion":"nodestate.vcoil.io/v9","node":"node1"}`)
	}))
	defer state.Close()
	apiserver := httptest.NewServer(&fakekubelet.PortForward{Target: strings.TrimPrefix(state.URL, "http://"), OnlySPDY: true})
	defer apiserver.Close()
	pf := PortForward{Config: &rest.Config{Host: apiserver.URL}, Port: DefaultStatePort}
	_, err := pf.read(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "vcoil-daemon-x1"}})
	if err == nil || !strings.Contains(err.Error(), `"nodestate.vcoil.io/v9"`) {
		t.Fatalf("a state of apiVersion v9: %v", err)
	}
}
