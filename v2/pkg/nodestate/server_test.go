package nodestate

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		ok         bool
	}{
		{"an empty address turns the server off", "", true},
		{"127.0.0.1 with a port is accepted", "127.0.0.1:9390", true},
		{"any address of 127.0.0.0/8 is accepted", "127.3.2.1:1", true},
		{"::1 is accepted", "[::1]:9390", true},
		{"the IPv4-mapped loopback is accepted", "[::ffff:127.0.0.1]:9390", true},
		{"all addresses are refused", ":9390", false},
		{"0.0.0.0 is refused", "0.0.0.0:9390", false},
		{"the IPv6 unspecified address is refused", "[::]:9390", false},
		{"a node address is refused", "198.18.0.1:9390", false},
		{"a host name is refused", "localhost:9390", false},
		{"an address without a port is refused", "127.0.0.1", false},
		{"an empty port is refused", "127.0.0.1:", false},
		{"a link-local address with a zone is refused", "[fe80::1%lo]:9390", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAddr(tc.addr)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckAddr(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
			}
		})
	}
}

func TestNewServerNamesTheFlagOfANonLoopbackAddress(t *testing.T) {
	_, err := NewServer(ServerConfig{Addr: "0.0.0.0:9390", Flag: "--state-addr"})
	if err == nil || !strings.HasPrefix(err.Error(), `--state-addr "0.0.0.0:9390": `) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("error = %v, want one naming --state-addr, the address and loopback", err)
	}
}

// The sources run in order on one State: a later one sees (and completes)
// what an earlier one filled; a failing one is recorded under its name and
// the others still run; one that outlives the timeout is cut off.
func TestCollectRunsSourcesInOrderAndRecordsErrors(t *testing.T) {
	pod := netip.MustParseAddr("10.1.0.5")
	var sawPods int
	sources := []Named{
		{Name: "daemon", Source: SourceFunc(func(_ context.Context, s *State) error {
			s.Pods = append(s.Pods, Pod{Namespace: "default", Name: "web", ContainerID: "c1", IfName: "eth0", IPs: []netip.Addr{pod}})
			return nil
		})},
		{Name: "interfaces", Source: SourceFunc(func(_ context.Context, s *State) error {
			sawPods = len(s.Pods)
			for i := range s.Pods {
				s.Pods[i].Interface = &Interface{Kind: "veth", Name: "vcoil0123456789", Index: 7}
			}
			return nil
		})},
		{Name: "services", Source: SourceFunc(func(context.Context, *State) error {
			return errors.New("not synced yet")
		})},
		{Name: "vpp", Source: SourceFunc(func(ctx context.Context, s *State) error {
			<-ctx.Done()
			return ctx.Err()
		})},
		{Name: "nftables", Source: SourceFunc(func(ctx context.Context, s *State) error {
			if ctx.Err() == nil {
				t.Error("the source after the timeout got a live context")
			}
			s.NFTables = append(s.NFTables, NFTable{Family: "inet", Name: "vcoil-policy", Text: "table inet vcoil-policy {\n}\n"})
			return nil
		})},
	}
	srv, err := NewServer(ServerConfig{Node: "node1", Dataplane: "linux", Sources: sources, Timeout: 100 * time.Millisecond, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	collected := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	srv.now = func() time.Time { return collected }
	srv.version = "v2.1.0"
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()

	st, err := Get(context.Background(), hs.Client(), hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	if sawPods != 1 {
		t.Errorf("the interfaces source saw %d pods, want the daemon's 1", sawPods)
	}
	want := &State{
		APIVersion: APIVersion, Node: "node1", Dataplane: "linux", Version: "v2.1.0", Collected: collected,
		Pods: []Pod{{Namespace: "default", Name: "web", ContainerID: "c1", IfName: "eth0", IPs: []netip.Addr{pod},
			Interface: &Interface{Kind: "veth", Name: "vcoil0123456789", Index: 7}}},
		NFTables: []NFTable{{Family: "inet", Name: "vcoil-policy", Text: "table inet vcoil-policy {\n}\n"}},
		Errors:   []string{"services: not synced yet", "vpp: context deadline exceeded"},
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("state:\n got %+v\nwant %+v", st, want)
	}
}

func TestHandlerServesOnlyGETOfThePath(t *testing.T) {
	srv, err := NewServer(ServerConfig{Node: "node1", Dataplane: "vpp"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	defer hs.Close()
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{http.MethodGet, Path, http.StatusOK},
		{http.MethodPost, Path, http.StatusMethodNotAllowed},
		{http.MethodGet, "/", http.StatusNotFound},
		{http.MethodGet, "/v2/state", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, hs.URL+tc.path, nil)
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.code)
		}
		if tc.code == http.StatusOK && resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, resp.Header.Get("Content-Type"))
		}
	}
}

// Start listens on the loopback address and stops with its context.
func TestStartServesOnLoopbackUntilStopped(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv, err := NewServer(ServerConfig{Addr: addr, Flag: "--state-addr", Node: "node1", Dataplane: "linux", Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	if srv.NeedLeaderElection() {
		t.Error("NeedLeaderElection() = true; every vcoild serves its node")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()

	var st *State
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = Get(ctx, http.DefaultClient, "http://"+addr+"/")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if st.Node != "node1" || st.Dataplane != "linux" || st.APIVersion != APIVersion || st.Version == "" || st.Collected.IsZero() {
		t.Errorf("state %+v lacks its header", st)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start returned %v after its context ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return after its context ended")
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the address still accepts connections after Start returned")
	}
}

func TestStartWithoutAddressIsOff(t *testing.T) {
	srv, err := NewServer(ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil || ctx.Err() != nil {
		t.Errorf("Start = %v (context: %v), want an immediate nil", err, ctx.Err())
	}
}

func TestDecodeRefusesAnotherAPIVersion(t *testing.T) {
	_, err := Decode(strings.NewReader(`{"apiVersion":"nodestate.vcoil.io/v2","node":"node1"}`))
	if err == nil || !strings.Contains(err.Error(), `"nodestate.vcoil.io/v2"`) || !strings.Contains(err.Error(), `"`+APIVersion+`"`) || !strings.Contains(err.Error(), `"node1"`) {
		t.Fatalf("error = %v, want one naming both versions and the node", err)
	}
	if _, err := Decode(strings.NewReader(`{"node":"node1"}`)); err == nil {
		t.Error("a State without apiVersion was accepted")
	}
	st, err := Decode(strings.NewReader(`{"apiVersion":"` + APIVersion + `","node":"node1","blocks":[{"name":"default-0","pool":"default","prefixes":["10.1.0.0/28"],"inUse":2,"free":14}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{{Name: "default-0", Pool: "default", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/28")}, InUse: 2, Free: 14}}
	if !reflect.DeepEqual(st.Blocks, want) {
		t.Errorf("blocks = %+v, want %+v", st.Blocks, want)
	}
}

func TestGetNamesTheURLOfAFailure(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "forbidden here", http.StatusForbidden)
	}))
	defer hs.Close()
	_, err := Get(context.Background(), hs.Client(), hs.URL)
	if err == nil || !strings.Contains(err.Error(), hs.URL+Path) || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "forbidden here") {
		t.Fatalf("error = %v, want one naming the URL, the status and the body", err)
	}
}

func TestVersionOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"a tagged module gives its version", debug.BuildInfo{Main: debug.Module{Version: "v2.1.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}}}, "v2.1.0"},
		{"a build from a tree gives its revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "2711c05"}, {Key: "vcs.modified", Value: "false"}}}, "2711c05"},
		{"a modified tree is marked dirty", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "2711c05"}, {Key: "vcs.modified", Value: "true"}}}, "2711c05-dirty"},
		{"nothing recorded is unknown", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionOf(&tc.info); got != tc.want {
				t.Errorf("versionOf = %q, want %q", got, tc.want)
			}
		})
	}
}
