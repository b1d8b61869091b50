package kubectlvcoil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	streamhttp "k8s.io/streaming/pkg/httpstream"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// StateReader reads the State a node's vcoild serves.
type StateReader interface {
	NodeState(ctx context.Context, node string) (*nodestate.State, error)
}

// DaemonPods finds the node's running vcoild pod.
type DaemonPods struct {
	Client    client.Client
	Namespace string
	Selector  labels.Selector
}

// ErrNoDaemon is returned for a node without a running vcoild pod.
var ErrNoDaemon = errors.New("no running vcoild pod")

// On returns the running vcoild pod of node.
func (d DaemonPods) On(ctx context.Context, node string) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := d.Client.List(ctx, &pods, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: d.Selector},
		client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, fmt.Errorf("node %s: list vcoild pods in namespace %s with selector %s: %w", node, d.Namespace, d.Selector, err)
	}
	// The newest running one: during a rollout the old pod may still be
	// terminating.
	sort.Slice(pods.Items, func(i, j int) bool {
		return pods.Items[j].CreationTimestamp.Before(&pods.Items[i].CreationTimestamp)
	})
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == node && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("node %s: %w (namespace %s, selector %s, %d pod(s) found)", node, ErrNoDaemon, d.Namespace, d.Selector, len(pods.Items))
}

// PortForward reads states through a port-forward to the node's vcoild
// pod, through the apiserver, as `kubectl port-forward` does: the
// apiserver authenticates and authorizes the user (create on
// pods/portforward in vcoil's namespace), and vcoild's state address on
// the node's loopback answers nobody else.
type PortForward struct {
	Config *rest.Config
	Pods   DaemonPods
	// Port is vcoild's state port (--state-addr) on the node's loopback.
	Port int
	// Timeout bounds one read, port-forward included.
	Timeout time.Duration
}

// NodeState forwards a kernel-chosen local port to the node's vcoild pod,
// reads the state and closes the forward.
func (pf PortForward) NodeState(ctx context.Context, node string) (*nodestate.State, error) {
	if pf.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pf.Timeout)
		defer cancel()
	}
	pod, err := pf.Pods.On(ctx, node)
	if err != nil {
		return nil, err
	}
	st, err := pf.read(ctx, pod)
	if err != nil {
		return nil, fmt.Errorf("node %s: read the state of vcoild pod %s/%s: %w", node, pod.Namespace, pod.Name, err)
	}
	if st.Node != "" && st.Node != node {
		return nil, fmt.Errorf("node %s: vcoild pod %s/%s serves the state of node %s", node, pod.Namespace, pod.Name, st.Node)
	}
	return st, nil
}

func (pf PortForward) read(ctx context.Context, pod *corev1.Pod) (*nodestate.State, error) {
	cs, err := kubernetes.NewForConfig(pf.Config)
	if err != nil {
		return nil, err
	}
	u := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	dialer, err := dialer(pf.Config, u)
	if err != nil {
		return nil, err
	}
	fwCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{})
	fw, err := portforward.NewOnAddressesWithContext(fwCtx, dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(pf.Port)}, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("port-forward to port %d: %w", pf.Port, err)
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return nil, fmt.Errorf("port-forward to port %d: %w", pf.Port, err)
	case <-ctx.Done():
		return nil, fmt.Errorf("port-forward to port %d: %w", pf.Port, ctx.Err())
	}
	defer func() { stop(); <-done }()
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		return nil, fmt.Errorf("port-forward to port %d: no local port (%v)", pf.Port, err)
	}
	// One request, no proxy, no connection kept: the forwarded stream, and
	// vcoild's end of it, close as soon as the state is read.
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	return nodestate.Get(ctx, c, fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local))
}

// dialer is kubectl's: the SPDY stream over a websocket first, plain SPDY
// when the apiserver (or a proxy on the way) does not upgrade to websockets.
func dialer(cfg *rest.Config, u *url.URL) (httpstream.Dialer, error) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("SPDY transport: %w", err)
	}
	spdyDialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	ws, err := portforward.NewSPDYOverWebsocketDialer(u, cfg)
	if err != nil {
		return nil, fmt.Errorf("websocket dialer: %w", err)
	}
	// client-go's websocket transport reports a refused upgrade with the
	// streaming module's error type (apimachinery's is checked too, should
	// it move back).
	return portforward.NewFallbackDialer(ws, spdyDialer, func(err error) bool {
		return streamhttp.IsUpgradeFailure(err) || httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	}), nil
}
