// Package fakekubelet stands in, in tests, for the kubelet's side of a
// pod's port-forward: the kubectl plugin's tests reach it directly or
// through a real apiserver.
package fakekubelet

import (
	"io"
	"net"
	"net/http"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/httpstream/spdy"
)

// PortForward serves a pod's port-forward over SPDY, as the kubelet does,
// and connects every forwarded stream to Target, whatever port it names.
// With OnlySPDY it refuses every request but SPDY's POST (a websocket
// upgrade is a GET), so that a client must fall back.
type PortForward struct {
	Target   string
	OnlySPDY bool

	mu      sync.Mutex
	methods []string
	paths   []string
	ports   []string
}

// Seen returns the methods and paths of the requests, and the ports their
// data streams named, in order.
func (f *PortForward) Seen() (methods, paths, ports []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.methods), slices.Clone(f.paths), slices.Clone(f.ports)
}

func (f *PortForward) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	f.mu.Lock()
	f.methods = append(f.methods, req.Method)
	f.paths = append(f.paths, req.URL.Path)
	f.mu.Unlock()
	if f.OnlySPDY && req.Method != http.MethodPost {
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
				backend, err := net.Dial("tcp", f.Target)
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
