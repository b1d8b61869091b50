package conntrack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

func TestMaxIsPerCoreTimesCPUsWithAFloor(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"a MaxPerCore of 0 leaves the table alone", Config{Min: 131072, CPUs: 2}, 0},
		{"two CPUs get the floor", Config{MaxPerCore: 32768, Min: 131072, CPUs: 2}, 131072},
		{"eight CPUs get more than the floor", Config{MaxPerCore: 32768, Min: 131072, CPUs: 8}, 262144},
		{"without a floor the product counts", Config{MaxPerCore: 1000, CPUs: 3}, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg.Max(); got != tc.want {
				t.Errorf("got %d, want %d", got, tc.want)
			}
		})
	}
}

// longAgo marks files as untouched: a write sets their modification time to
// now.
var longAgo = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeRoot lays out the settings under a directory, as /proc/sys and /sys
// have them, every file last modified longAgo.
func fakeRoot(t *testing.T, values map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for key, v := range values {
		p := filepath.Join(root, key)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, longAgo, longAgo); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func read(t *testing.T, root, key string) (value string, written bool) {
	t.Helper()
	p := filepath.Join(root, key)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b)), !st.ModTime().Equal(longAgo)
}

var kernelDefaults = map[string]string{
	keyMax:              "65536",
	keyHashSize:         "16384",
	keyTCPEstablished:   "432000",
	keyTCPCloseWait:     "60",
	keyTCPBeLiberal:     "0",
	keyUDPTimeout:       "30",
	keyUDPStreamTimeout: "120",
}

func TestApplyWritesKubeProxysDefaultsAndOnlyWhatDiffers(t *testing.T) {
	cfg := DefaultConfig()
	cfg.CPUs = 2

	t.Run("kube-proxy's defaults over the kernel's", func(t *testing.T) {
		root := fakeRoot(t, kernelDefaults)
		if err := Apply(t.Context(), cfg, Files(root), testr.New(t)); err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]struct {
			value   string
			written bool
		}{
			keyMax:              {"131072", true},
			keyHashSize:         {"32768", true},
			keyTCPEstablished:   {"86400", true},
			keyTCPCloseWait:     {"3600", true},
			keyTCPBeLiberal:     {"0", false},
			keyUDPTimeout:       {"30", false},
			keyUDPStreamTimeout: {"120", false},
		} {
			if v, w := read(t, root, key); v != want.value || w != want.written {
				t.Errorf("%s: got %s (written %v), want %s (written %v)", key, v, w, want.value, want.written)
			}
		}
	})

	t.Run("values already right are not written", func(t *testing.T) {
		root := fakeRoot(t, map[string]string{
			keyMax:              "131072",
			keyHashSize:         "65536",
			keyTCPEstablished:   "86400",
			keyTCPCloseWait:     "3600",
			keyTCPBeLiberal:     "1",
			keyUDPTimeout:       "60",
			keyUDPStreamTimeout: "180",
		})
		cfg := cfg
		cfg.UDPTimeout, cfg.UDPStreamTimeout, cfg.TCPBeLiberal = time.Minute, 3*time.Minute, true
		if err := Apply(t.Context(), cfg, Files(root), testr.New(t)); err != nil {
			t.Fatal(err)
		}
		for key := range kernelDefaults {
			if v, written := read(t, root, key); written {
				t.Errorf("%s was written (now %s)", key, v)
			}
		}
	})

	t.Run("a hash size larger than a quarter of the table is kept", func(t *testing.T) {
		values := map[string]string{}
		for k, v := range kernelDefaults {
			values[k] = v
		}
		values[keyHashSize] = "262144"
		root := fakeRoot(t, values)
		if err := Apply(t.Context(), cfg, Files(root), testr.New(t)); err != nil {
			t.Fatal(err)
		}
		if v, written := read(t, root, keyHashSize); written {
			t.Errorf("hash size was written: %s", v)
		}
	})

	t.Run("a timeout that cannot be set is an error naming the sysctl", func(t *testing.T) {
		values := map[string]string{}
		for k, v := range kernelDefaults {
			values[k] = v
		}
		delete(values, keyUDPStreamTimeout)
		root := fakeRoot(t, values)
		cfg := cfg
		cfg.UDPStreamTimeout = time.Minute
		err := Apply(t.Context(), cfg, Files(root), testr.New(t))
		if err == nil || !strings.Contains(err.Error(), "net.netfilter.nf_conntrack_udp_timeout_stream") {
			t.Errorf("want an error naming net.netfilter.nf_conntrack_udp_timeout_stream, got %v", err)
		}
	})
}

// The kernel's own settings, in a namespace of the test's: the timeouts are
// per namespace and set there; the table size is read-only outside the
// initial namespace and left alone without an error.
func TestApplySetsTheTimeoutsInTheNodesNamespaceAndLeavesTheTableSizeAlone(t *testing.T) {
	node := netnstest.New(t, "node")
	own := Files("/")
	ownEstablished, err := own.Read(keyTCPEstablished)
	if err != nil {
		t.Skipf("skipped: this kernel has no conntrack sysctls (%v)", err)
	}
	maxBefore := node.ReadSysctl("net/netfilter/nf_conntrack_max")

	cfg := DefaultConfig()
	cfg.Netns = node.Path()
	// A table size the namespace surely does not have, so that a write is
	// attempted.
	cfg.MaxPerCore, cfg.Min = 1<<22, 1<<22
	cfg.TCPEstablishedTimeout = 24*time.Hour + time.Second // unlike the lab's own setting, if any
	cfg.UDPTimeout, cfg.UDPStreamTimeout, cfg.TCPBeLiberal = 45*time.Second, 150*time.Second, true
	if err := Apply(t.Context(), cfg, own, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"net/netfilter/nf_conntrack_tcp_timeout_established": "86401",
		"net/netfilter/nf_conntrack_tcp_timeout_close_wait":  "3600",
		"net/netfilter/nf_conntrack_udp_timeout":             "45",
		"net/netfilter/nf_conntrack_udp_timeout_stream":      "150",
		"net/netfilter/nf_conntrack_tcp_be_liberal":          "1",
		"net/netfilter/nf_conntrack_max":                     maxBefore,
	} {
		if got := node.ReadSysctl(key); got != want {
			t.Errorf("%s in the node's namespace: got %s, want %s", key, got, want)
		}
	}
	if now, _ := own.Read(keyTCPEstablished); now != ownEstablished {
		t.Errorf("the test process's own namespace changed: established timeout %s, was %s", now, ownEstablished)
	}
}
