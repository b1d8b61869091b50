package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/go-logr/logr"
)

// retryInterval is the pause between two attempts to open a server's
// address (kube-proxy retries its health server every 5 s too).
const retryInterval = 5 * time.Second

// readHeaderTimeout bounds a client that never finishes its request.
const readHeaderTimeout = 10 * time.Second

// listen opens a TCP listener on addr inside the network namespace at
// netnsPath (empty: the process's own). A socket belongs to the namespace it
// was created in, so only the creation needs a thread in that namespace
// (pkg/ns locks one and restores it); the listener is then served from any
// goroutine.
func listen(netnsPath, addr string) (net.Listener, error) {
	if netnsPath == "" {
		return net.Listen("tcp", addr)
	}
	var l net.Listener
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen on %s in network namespace %s: %w", addr, netnsPath, err)
	}
	return l, nil
}

// serve serves h on addr until ctx ends. An address that cannot be opened
// (another process holds it, kube-proxy during a migration for one) is
// logged and retried every retryInterval rather than stopping vcoild.
func serve(ctx context.Context, netnsPath, addr string, h http.Handler, log logr.Logger) error {
	var l net.Listener
	for {
		var err error
		if l, err = listen(netnsPath, addr); err == nil {
			break
		}
		log.Error(err, "Cannot open the address; retrying", "address", addr, "retryIn", retryInterval)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retryInterval):
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	log.Info("Serving", "address", l.Addr().String())
	select {
	case err := <-done:
		return fmt.Errorf("serve %s: %w", addr, err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return fmt.Errorf("shut down the server on %s: %w", addr, err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", addr, err)
	}
	return nil
}
