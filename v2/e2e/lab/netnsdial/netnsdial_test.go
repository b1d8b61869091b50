package netnsdial

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// listenIn opens a TCP listener on the loopback of the namespace at path.
func listenIn(t *testing.T, path string) net.Listener {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // the thread is discarded: it is never switched back
		ns, err := netns.GetFromPath(path)
		if err != nil {
			ch <- result{nil, err}
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			ch <- result{nil, err}
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		ch <- result{l, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.l
}

func TestDialerConnectsInsideTheNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	name := fmt.Sprintf("vcoil-dialtest-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	path := "/run/netns/" + name
	l := listenIn(t, path)
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "inside")
			c.Close()
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dialer(path)(ctx, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("dial through the namespace: %v", err)
	}
	b, _ := io.ReadAll(c)
	c.Close()
	if string(b) != "inside" {
		t.Errorf("read %q", b)
	}
	// The caller's own namespace is unchanged: the listener is not there.
	if c, err := net.DialTimeout("tcp", l.Addr().String(), time.Second); err == nil {
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) == "inside" {
			t.Error("the listener inside the namespace answered a dial from the caller's namespace")
		}
	}
	if _, err := Dialer("/run/netns/no-such-namespace")(ctx, "tcp", l.Addr().String()); err == nil {
		t.Error("dial through a missing namespace succeeded")
	}
}
