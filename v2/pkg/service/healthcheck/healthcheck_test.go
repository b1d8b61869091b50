package healthcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// syncState is the processor's progress as a test sets it.
type syncState struct {
	mu            sync.Mutex
	last, pending time.Time
}

func (s *syncState) LastSync() time.Time     { s.mu.Lock(); defer s.mu.Unlock(); return s.last }
func (s *syncState) PendingSince() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.pending }
func (s *syncState) set(last, pending time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.pending = last, pending
}

// answer is one HTTP response as a test checks it.
type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", a.body, err)
	}
	return m
}

// httpFrom gets URLs from inside n, as a process on the node (or a load
// balancer next to it) would.
func httpFrom(n *netnstest.NS) func(url string) (answer, error) {
	c := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return n.Dial(ctx, network, addr)
			},
		},
	}
	return func(url string) (answer, error) {
		resp, err := c.Get(url)
		if err != nil {
			return answer{}, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}, err
	}
}

// mustGet waits until url answers (a server that has just been started may
// not listen yet) and returns the answer.
func mustGet(t *testing.T, get func(string) (answer, error), url string) answer {
	t.Helper()
	var a answer
	poll.Eventually(t, 10*time.Second, func() error {
		var err error
		a, err = get(url)
		return err
	})
	return a
}

func refused(t *testing.T, get func(string) (answer, error), url string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, func() error {
		_, err := get(url)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
		return fmt.Errorf("GET %s: want connection refused, got %v", url, err)
	})
}

func start(t *testing.T, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
}

func TestTheProxyHealthServerAnswersAsKubeProxyInTheNodesNamespace(t *testing.T) {
	node := netnstest.New(t, "node")
	state := &syncState{}
	eligible := true
	var eligibleMu sync.Mutex
	srv := NewProxyHealthServer(ProxyHealthConfig{
		Netns:         node.Path(),
		HealthTimeout: time.Minute,
		NodeEligible: func(context.Context) bool {
			eligibleMu.Lock()
			defer eligibleMu.Unlock()
			return eligible
		},
	}, state, testr.New(t))
	start(t, srv.Start)
	status := NewProxyStatusServer(ProxyStatusConfig{Netns: node.Path()}, testr.New(t))
	start(t, status.Start)
	get := httpFrom(node)
	const healthz, livez = "http://127.0.0.1:10256/healthz", "http://127.0.0.1:10256/livez"

	t.Run("healthy while nothing is pending, lastUpdated being the current time", func(t *testing.T) {
		a := mustGet(t, get, healthz)
		if a.status != http.StatusOK || a.header.Get("Content-Type") != "application/json" || a.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("want 200 with JSON headers, got %d %v", a.status, a.header)
		}
		m := a.json(t)
		last, err := time.Parse(time.RFC3339, m["lastUpdated"].(string))
		if err != nil || time.Since(last) > time.Minute {
			t.Errorf("lastUpdated %v: want the current time in RFC 3339 (%v)", m["lastUpdated"], err)
		}
		if _, err := time.Parse(time.RFC3339, m["currentTime"].(string)); err != nil {
			t.Errorf("currentTime %v: %v", m["currentTime"], err)
		}
		if m["nodeEligible"] != true || m["healthy"] != true {
			t.Errorf("want nodeEligible and healthy true: %s", a.body)
		}
	})

	t.Run("healthy while the oldest pending change is younger than the timeout", func(t *testing.T) {
		state.set(time.Now().Add(-time.Hour), time.Now().Add(-30*time.Second))
		if a := mustGet(t, get, healthz); a.status != http.StatusOK {
			t.Fatalf("want 200, got %d %s", a.status, a.body)
		}
	})

	t.Run("unhealthy once a change waits longer than the timeout, with the last sync's time", func(t *testing.T) {
		lastSync := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		state.set(lastSync, time.Now().Add(-2*time.Minute))
		for _, url := range []string{healthz, livez} {
			a := mustGet(t, get, url)
			if a.status != http.StatusServiceUnavailable {
				t.Fatalf("%s: want 503, got %d %s", url, a.status, a.body)
			}
			if m := a.json(t); m["lastUpdated"] != lastSync.Format(time.RFC3339) || m["healthy"] != false {
				t.Errorf("%s: want lastUpdated %s and healthy false: %s", url, lastSync.Format(time.RFC3339), a.body)
			}
		}
		if srv.Healthy() {
			t.Error("Healthy() is true")
		}
		state.set(time.Now(), time.Time{})
	})

	t.Run("a node leaving fails healthz but not livez", func(t *testing.T) {
		eligibleMu.Lock()
		eligible = false
		eligibleMu.Unlock()
		a := mustGet(t, get, healthz)
		if a.status != http.StatusServiceUnavailable || a.json(t)["nodeEligible"] != false {
			t.Errorf("healthz: want 503 with nodeEligible false, got %d %s", a.status, a.body)
		}
		a = mustGet(t, get, livez)
		if _, has := a.json(t)["nodeEligible"]; a.status != http.StatusOK || has {
			t.Errorf("livez: want 200 without nodeEligible, got %d %s", a.status, a.body)
		}
	})

	t.Run("proxyMode says nftables", func(t *testing.T) {
		a := mustGet(t, get, "http://127.0.0.1:10249/proxyMode")
		if a.status != http.StatusOK || a.body != "nftables" {
			t.Errorf("want 200 nftables, got %d %q", a.status, a.body)
		}
	})
}

func TestEligibleNode(t *testing.T) {
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{"an unknown node is not eligible", nil, false},
		{"a plain node is eligible", &corev1.Node{}, true},
		{"a node with other taints is eligible", &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated"}}}}, true},
		{"a node being deleted is not eligible", &corev1.Node{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false},
		{"a node the autoscaler will delete is not eligible", &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := EligibleNode(tc.node); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func ep(addr string, port uint16, ready bool) service.Endpoint {
	return service.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, Local: true, Ready: ready, Serving: true, Terminating: !ready}
}

func TestLocalReadyEndpointsCountsAddressesOnceAcrossPortsAndSkipsTerminatingOnes(t *testing.T) {
	svc := &service.Service{Ports: []service.Port{
		{Protocol: service.TCP, Port: 80, Local: []service.Endpoint{ep("10.1.0.1", 8080, true), ep("10.1.0.2", 8080, true)}},
		{Protocol: service.TCP, Port: 443, Local: []service.Endpoint{ep("10.1.0.1", 8443, true), ep("10.1.0.3", 8443, false)}},
		{Protocol: service.UDP, Port: 53, Local: []service.Endpoint{ep("fd00::1", 53, true)}},
	}}
	if got := LocalReadyEndpoints(svc); got != 3 {
		t.Errorf("got %d, want 3 (10.1.0.1, 10.1.0.2, fd00::1)", got)
	}
}

func lbService(name string, port uint16, local ...service.Endpoint) *service.Service {
	return &service.Service{
		ID:                  service.ID{Namespace: "shop", Name: name},
		ExternalLocal:       true,
		HealthCheckNodePort: port,
		Ports:               []service.Port{{Protocol: service.TCP, Port: 80, NodePort: 30080, Local: local, Endpoints: local}},
	}
}

func TestServiceHealthCheckNodePorts(t *testing.T) {
	node := netnstest.New(t, "node")
	lb := netnstest.New(t, "lb")
	netnstest.Veth(t, node, "eth0", lb, "eth0")
	node.AddAddr("eth0", "198.18.0.1/24")
	lb.AddAddr("eth0", "198.18.0.2/24")
	fromLB, fromNode := httpFrom(lb), httpFrom(node)

	state := &syncState{}
	proxy := NewProxyHealthServer(ProxyHealthConfig{HealthTimeout: time.Minute}, state, testr.New(t))
	hc := NewServiceHealthServer(ServiceHealthConfig{Netns: node.Path()}, proxy, testr.New(t))
	t.Cleanup(hc.Close)
	ctx := t.Context()
	nodeInfo := service.Node{Name: "n1", NodePortAddresses: []netip.Addr{netip.MustParseAddr("198.18.0.1")}}
	web := lbService("web", 31001, ep("10.1.0.1", 8080, true), ep("10.1.0.2", 8080, true), ep("10.1.0.3", 8080, false))
	if err := hc.Resync(ctx, &service.State{Node: nodeInfo, Services: map[service.ID]*service.Service{
		web.ID:                               web,
		{Namespace: "shop", Name: "cluster"}: {ID: service.ID{Namespace: "shop", Name: "cluster"}},
	}}); err != nil {
		t.Fatal(err)
	}
	const url = "http://198.18.0.1:31001/any/path"

	t.Run("a service with local ready endpoints answers 200 with its count", func(t *testing.T) {
		a := mustGet(t, fromLB, url)
		if a.status != http.StatusOK {
			t.Fatalf("want 200, got %d %s", a.status, a.body)
		}
		for k, v := range map[string]string{"Content-Type": "application/json", "X-Content-Type-Options": "nosniff", "X-Load-Balancing-Endpoint-Weight": "2"} {
			if a.header.Get(k) != v {
				t.Errorf("header %s: got %q, want %q", k, a.header.Get(k), v)
			}
		}
		var got serviceHealth
		if err := json.Unmarshal([]byte(a.body), &got); err != nil {
			t.Fatal(err)
		}
		if got.Service.Namespace != "shop" || got.Service.Name != "web" || got.LocalEndpoints != 2 || !got.ServiceProxyHealthy {
			t.Errorf("got %s", a.body)
		}
	})

	t.Run("the port is served on the NodePort addresses only", func(t *testing.T) {
		refused(t, fromNode, "http://127.0.0.1:31001/")
	})

	t.Run("a count change shows at once; no local endpoint answers 503", func(t *testing.T) {
		if err := hc.Update(ctx, &service.Changes{Upsert: []*service.Service{lbService("web", 31001, ep("10.1.0.3", 8080, false))}}); err != nil {
			t.Fatal(err)
		}
		a := mustGet(t, fromLB, url)
		if a.status != http.StatusServiceUnavailable || a.json(t)["localEndpoints"] != 0.0 || a.header.Get("X-Load-Balancing-Endpoint-Weight") != "0" {
			t.Errorf("want 503 with 0 endpoints, got %d %v %s", a.status, a.header, a.body)
		}
		if err := hc.Update(ctx, &service.Changes{Upsert: []*service.Service{lbService("web", 31001, ep("10.1.0.4", 8080, true))}}); err != nil {
			t.Fatal(err)
		}
		if a := mustGet(t, fromLB, url); a.status != http.StatusOK || a.json(t)["localEndpoints"] != 1.0 {
			t.Errorf("want 200 with 1 endpoint, got %d %s", a.status, a.body)
		}
	})

	t.Run("a change pending longer than the health timeout answers 503 even with local endpoints", func(t *testing.T) {
		state.set(time.Now().Add(-time.Hour), time.Now().Add(-2*time.Minute))
		defer state.set(time.Now(), time.Time{})
		a := mustGet(t, fromLB, url)
		if a.status != http.StatusServiceUnavailable || a.json(t)["serviceProxyHealthy"] != false {
			t.Errorf("want 503 with serviceProxyHealthy false, got %d %s", a.status, a.body)
		}
	})

	t.Run("a port in use is retried at the next update", func(t *testing.T) {
		holder := node.Listen("tcp", "198.18.0.1:31002")
		api := lbService("api", 31002, ep("10.1.0.5", 8080, true))
		if err := hc.Update(ctx, &service.Changes{Upsert: []*service.Service{api}}); err != nil {
			t.Fatalf("a port in use must not fail the update: %v", err)
		}
		_ = holder.Close()
		if err := hc.Update(ctx, &service.Changes{Delete: []service.ID{{Namespace: "shop", Name: "gone"}}}); err != nil {
			t.Fatal(err)
		}
		a := mustGet(t, fromLB, "http://198.18.0.1:31002/")
		if a.status != http.StatusOK || a.json(t)["service"].(map[string]any)["name"] != "api" {
			t.Errorf("want api's answer, got %d %s", a.status, a.body)
		}
	})

	t.Run("a changed port moves the server", func(t *testing.T) {
		if err := hc.Update(ctx, &service.Changes{Upsert: []*service.Service{lbService("web", 31003, ep("10.1.0.4", 8080, true))}}); err != nil {
			t.Fatal(err)
		}
		refused(t, fromLB, url)
		if a := mustGet(t, fromLB, "http://198.18.0.1:31003/"); a.status != http.StatusOK {
			t.Errorf("want 200 on the new port, got %d %s", a.status, a.body)
		}
	})

	t.Run("a removed service closes its port, and a resync closes the ports of services it lacks", func(t *testing.T) {
		if err := hc.Update(ctx, &service.Changes{Delete: []service.ID{{Namespace: "shop", Name: "web"}}}); err != nil {
			t.Fatal(err)
		}
		refused(t, fromLB, "http://198.18.0.1:31003/")
		if err := hc.Resync(ctx, &service.State{Node: nodeInfo}); err != nil {
			t.Fatal(err)
		}
		refused(t, fromLB, "http://198.18.0.1:31002/")
	})

	t.Run("without NodePort addresses the port is served on every address", func(t *testing.T) {
		web := lbService("web", 31004, ep("10.1.0.1", 8080, true))
		if err := hc.Resync(ctx, &service.State{Node: service.Node{Name: "n1"}, Services: map[service.ID]*service.Service{web.ID: web}}); err != nil {
			t.Fatal(err)
		}
		for _, get := range []func(string) (answer, error){fromLB, fromNode} {
			if a := mustGet(t, get, "http://198.18.0.1:31004/"); a.status != http.StatusOK {
				t.Errorf("want 200, got %d %s", a.status, a.body)
			}
		}
		if a := mustGet(t, fromNode, "http://127.0.0.1:31004/"); a.status != http.StatusOK {
			t.Errorf("want 200 on the loopback, got %d %s", a.status, a.body)
		}
	})
}
