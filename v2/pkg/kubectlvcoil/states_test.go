package kubectlvcoil

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/rest"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// fakePortForward stands in for the apiserver and the kubelet behind it:
// it answers a pod's portforward subresource over SPDY, as the kubelet
// does, and connects every forwarded stream to target, whatever port it
// names. It refuses websockets, so that the client must fall back.
type fakePortForward struct {
	target string

	mu      sync.Mutex
	methods []string
	paths   []string
	ports   []string
}

func (f *fakePortForward) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	f.methods = append(f.methods, req.Method)
	f.paths = append(f.paths, req.URL.Path)
	f.mu.Unlock()
	if req.Method != http.MethodPost {
		http.Error(w, "websockets are not served here", http.StatusBadRequest)
		return
	}
	if _, err := httpstream.Handshake(req, w, []string{"portforward.k8s.io"}); err != nil {
		return
	}
	streams := make(chan httpstream.Stream, 4)
	conn := spdy.NewResponseUpgrader().UpgradeResponse(w, req, func(s httpstream.Stream, _ <-chan struct{}) error {
		streams <- s
		return nil
	})
	if conn == nil {
		return
	}
	defer conn.Close()
	for {
		select {
		case s := <-streams:
			if s.Headers().Get("streamType") != "data" {
				continue // the error stream stays open and silent
			}
			f.mu.Lock()
			f.ports = append(f.ports, s.Headers().Get("port"))
			f.mu.Unlock()
			go func() {
				defer s.Close()
				backend, err := net.Dial("tcp", f.target)
				if err != nil {
					return
				}
				// Either end closing closes both, as the kubelet does.
				go func() { _, _ = io.Copy(backend, s); backend.Close() }()
				_, _ = io.Copy(s, backend)
				backend.Close()
			}()
		case <-conn.CloseChan():
			return
		}
	}
}

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
	fake := &fakePortForward{target: strings.TrimPrefix(state.URL, "http://")}
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
	fake.mu.Lock()
	defer fake.mu.Unlock()
	// kubectl's order: a websocket first (GET), SPDY (POST) after the
	// upgrade failed.
	if strings.Join(fake.methods, ",") != "GET,POST" {
		t.Errorf("requests %v, want a websocket attempt and then SPDY", fake.methods)
	}
	for _, p := range fake.paths {
		if p != "/api/v1/namespaces/kube-system/pods/vcoil-daemon-x1/portforward" {
			t.Errorf("request to %s, want the pod's portforward subresource", p)
		}
	}
	if len(fake.ports) != 1 || fake.ports[0] != "9390" {
		t.Errorf("forwarded ports %v, want vcoild's state port 9390 once", fake.ports)
	}
}

func TestPortForwardRefusesAStateOfAnotherFormat(t *testing.T) {
	state := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"apiVersion":"nodestate.vcoil.io/v9","node":"node1"}`)
	}))
	defer state.Close()
	apiserver := httptest.NewServer(&fakePortForward{target: strings.TrimPrefix(state.URL, "http://")})
	defer apiserver.Close()
	pf := PortForward{Config: &rest.Config{Host: apiserver.URL}, Port: DefaultStatePort}
	_, err := pf.read(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "vcoil-daemon-x1"}})
	if err == nil || !strings.Contains(err.Error(), `"nodestate.vcoil.io/v9"`) {
		t.Fatalf("a state of apiVersion v9: %v", err)
	}
}
