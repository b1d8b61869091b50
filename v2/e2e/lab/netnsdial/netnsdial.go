// Package netnsdial lets a program in the machine's root network namespace
// talk to the local cluster without any route or link there: its dialer
// creates each socket inside a lab network namespace (the control plane's by
// default), after which the connection works from any thread. The lab uses it
// to reach the apiserver. It needs root (setns).
//
// Only what client-go dials through rest.Config.Dial goes this way: requests
// and watches do, but exec, attach and port-forward (SPDY and WebSocket
// upgrades) dial on their own and fail from the root namespace. A test that
// needs those runs whole inside the lab (lab exec, see docs/lab.md).
package netnsdial

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"github.com/vishvananda/netns"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// ControlPlaneNetns is the path of the control plane's network namespace,
// from which the apiserver, the nodes and (through the fabric) the pods and
// the external host are reachable.
const ControlPlaneNetns = "/run/netns/" + topology.ControlPlaneNetns

// DialFunc has the shape of net.Dialer.DialContext and rest.Config.Dial.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// Dialer returns a DialFunc whose sockets are created in the network
// namespace at nsPath. Addresses should be IP literals: name resolution
// would happen in the caller's namespace.
func Dialer(nsPath string) DialFunc {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		target, err := netns.GetFromPath(nsPath)
		if err != nil {
			return nil, fmt.Errorf("open network namespace %s: %w", nsPath, err)
		}
		defer target.Close()
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		// A goroutine of its own, locked to its thread: the thread is
		// switched into the namespace for socket() and connect(), and is
		// thrown away (not unlocked) if it cannot be switched back.
		go func() {
			runtime.LockOSThread()
			orig, err := netns.Get()
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer orig.Close()
			if err := netns.Set(target); err != nil {
				ch <- result{nil, fmt.Errorf("enter network namespace %s: %w", nsPath, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, address)
			if netns.Set(orig) == nil {
				runtime.UnlockOSThread()
			}
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// RESTConfig loads the kubeconfig at path and makes its connections from the
// control plane's network namespace: a client-go configuration usable from
// the root namespace for requests and watches (not for exec: see above).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if _, err := os.Stat(ControlPlaneNetns); err != nil {
		return nil, fmt.Errorf("the lab is not up (%w): run make lab-up", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Dial = Dialer(ControlPlaneNetns)
	return cfg, nil
}
