package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// CleanAtEnd removes every vcoil object and Node when the test ends, after
// the cleanups registered later (such as the test's controllers) ran.
func (e *Env) CleanAtEnd(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		c := e.Client
		_ = c.DeleteAllOf(ctx, &vcoilv2.BlockRequest{})
		var blocks vcoilv2.AddressBlockList
		_ = c.List(ctx, &blocks)
		for i := range blocks.Items {
			unfinalize(ctx, c, &blocks.Items[i])
		}
		_ = c.DeleteAllOf(ctx, &vcoilv2.AddressBlock{})
		var pools vcoilv2.AddressPoolList
		_ = c.List(ctx, &pools)
		for i := range pools.Items {
			unfinalize(ctx, c, &pools.Items[i])
		}
		_ = c.DeleteAllOf(ctx, &vcoilv2.AddressPool{})
		_ = c.DeleteAllOf(ctx, &corev1.Node{})
		poll.Eventually(t, 10*time.Second, func() error {
			var p vcoilv2.AddressPoolList
			var b vcoilv2.AddressBlockList
			var r vcoilv2.BlockRequestList
			var n corev1.NodeList
			for _, l := range []client.ObjectList{&p, &b, &r, &n} {
				if err := c.List(ctx, l); err != nil {
					return err
				}
			}
			if k := len(p.Items) + len(b.Items) + len(r.Items) + len(n.Items); k > 0 {
				return fmt.Errorf("%d pools, %d blocks, %d requests, %d nodes left", len(p.Items), len(b.Items), len(r.Items), len(n.Items))
			}
			return nil
		})
	})
}

func unfinalize(ctx context.Context, c client.Client, o client.Object) {
	if controllerutil.RemoveFinalizer(o, vcoilv2.Finalizer) {
		_ = c.Update(ctx, o)
	}
}

// LogBuffer collects a process's output for a test to read while it runs.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// FreePort returns a TCP port of 127.0.0.1 that nothing listens on.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// HTTPGet returns the status and body of a GET (0 and the error text when
// the request fails).
func HTTPGet(url string) (int, string) {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String()
}
