package netnstest_test

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

func TestNamedNamespaceIsVisibleWhileTheTestRunsAndGoneAfterwards(t *testing.T) {
	netnstest.RequireRoot(t)
	var path string
	t.Run("creator", func(t *testing.T) {
		n := netnstest.New(t, "named")
		path = n.Path()
		if !strings.HasPrefix(n.Name(), "vcoiltest-") || !strings.HasSuffix(path, "/"+n.Name()) {
			t.Fatalf("namespace %q at %q: want a vcoiltest- name under /run/netns", n.Name(), path)
		}
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("namespace file while the test runs: %v", err)
		}
		out := n.IP("-o", "link", "show")
		if !strings.Contains(out, "lo:") || strings.Count(out, "\n") != 1 {
			t.Fatalf("a new namespace holds only lo, got:\n%s", out)
		}
		if !strings.Contains(out, "UP") {
			t.Fatalf("lo is down in a new namespace:\n%s", out)
		}
	})
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("namespace file %s after the test: %v, want it gone", path, err)
	}
}

func TestAnonymousNamespaceHasAPathUsableByOtherCode(t *testing.T) {
	n := netnstest.NewAnonymous(t, "anon")
	if n.Name() != "" {
		t.Fatalf("anonymous namespace has name %q", n.Name())
	}
	n.IP("link", "add", "probe0", "type", "veth", "peer", "name", "probe1")
	if out := n.IP("-o", "link", "show", "probe0"); !strings.Contains(out, "probe0@probe1") {
		t.Fatalf("probe link in the anonymous namespace: %s", out)
	}
}

func TestRemoveIsIdempotentAndEndsTheNamespace(t *testing.T) {
	n := netnstest.New(t, "gone")
	n.Remove()
	n.Remove()
	if _, err := os.Stat(n.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("namespace file after Remove: %v", err)
	}
	if err := n.Do(func() error { return nil }); err == nil {
		t.Fatal("Do in a removed namespace succeeded")
	}
}

func TestVethCarriesTCPBetweenTwoNamespaces(t *testing.T) {
	a := netnstest.New(t, "a")
	b := netnstest.NewAnonymous(t, "b")
	netnstest.Veth(t, a, "to-b", b, "to-a")
	a.AddAddr("to-b", "198.18.5.1/24")
	b.AddAddr("to-a", "198.18.5.2/24")
	a.AddAddr("to-b", "2001:db8:5::1/64")
	b.AddAddr("to-a", "2001:db8:5::2/64")

	for _, tc := range []struct{ name, listen, dial string }{
		{"over IPv4", "198.18.5.2:7000", "198.18.5.2:7000"},
		{"over IPv6", "[2001:db8:5::2]:7000", "[2001:db8:5::2]:7000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := b.Listen("tcp", tc.listen)
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				_, _ = c.Write([]byte("hello"))
			}()
			var got []byte
			poll.Eventually(t, 5*time.Second, func() error {
				c, err := a.Dial(t.Context(), "tcp", tc.dial)
				if err != nil {
					return err
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(2 * time.Second))
				got, err = io.ReadAll(c)
				return err
			})
			if string(got) != "hello" {
				t.Fatalf("read %q, want hello", got)
			}
		})
	}
	if err := a.Ping(t.Context(), "198.18.5.2"); err != nil {
		t.Fatal(err)
	}
}
