package controllers

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
)

// env is one kube-apiserver for every test of the package. The webhooks are
// installed and served by a manager that lives as long as the package's tests;
// each test starts its own controller managers and leaves the apiserver empty.
var env *testenv.Env

func TestMain(m *testing.M) {
	// Dual-stack Services for the LoadBalancer allocator's family tests.
	testenv.Main(m, testenv.Options{Webhooks: true, DualStackServices: true}, &env, startWebhookServer)
}

// startWebhookServer serves the AddressPool and Egress webhooks for every test.
func startWebhookServer(ctx context.Context, e *testenv.Env) (func(), error) {
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    e.Webhook.LocalServingHost,
			Port:    e.Webhook.LocalServingPort,
			CertDir: e.Webhook.LocalServingCertDir,
		}),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return nil, err
	}
	if err := (&AddressPoolWebhook{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := (&EgressWebhook{}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			panic(err)
		}
	}()
	wait := func() { <-done }
	// Ready when the webhook server accepts TLS connections.
	addr := net.JoinHostPort(e.Webhook.LocalServingHost, strconv.Itoa(e.Webhook.LocalServingPort))
	err = poll.Until(ctx, 30*time.Second, poll.Interval, func(context.Context) error {
		if err := mgr.GetWebhookServer().StartedChecker()(nil); err != nil {
			return err
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("webhook server did not start: %w", err)
	}
	return wait, nil
}

// controllerInstance is one running vcoil-controller (without leader
// election, so that several can race).
type controllerInstance struct {
	metrics  *PoolMetrics
	registry *prometheus.Registry
	stop     func()
}

func startController(t *testing.T, gcInterval time.Duration) *controllerInstance {
	t.Helper()
	return runController(t, Options{NodeGCInterval: gcInterval, BlockRequestConcurrency: 4})
}

// runController starts a vcoil-controller with opts and metrics of its own.
func runController(t *testing.T, opts Options) *controllerInstance {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics, err := NewPoolMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	opts.Metrics = metrics
	if err := Setup(mgr, opts); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return &controllerInstance{metrics: metrics, registry: reg, stop: stop}
}

// cleanAPIServer removes every vcoil object and Node when the test ends.
func cleanAPIServer(t *testing.T) { env.CleanAtEnd(t) }

func createPool(t *testing.T, name string, bits int32, subnets ...vcoilv2.SubnetSet) *vcoilv2.AddressPool {
	t.Helper()
	p := &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: bits, Subnets: subnets},
	}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatalf("create pool %s: %v", name, err)
	}
	return p
}

func v4(cidr string) vcoilv2.SubnetSet { return vcoilv2.SubnetSet{IPv4: ptr.To(cidr)} }

func dual(cidr4, cidr6 string) vcoilv2.SubnetSet {
	return vcoilv2.SubnetSet{IPv4: ptr.To(cidr4), IPv6: ptr.To(cidr6)}
}

func createRequest(t testing.TB, node, pool string) *vcoilv2.BlockRequest {
	t.Helper()
	r := &vcoilv2.BlockRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-" + pool + "-"},
		Spec:       vcoilv2.BlockRequestSpec{NodeName: node, PoolName: pool},
	}
	if err := env.Client.Create(context.Background(), r); err != nil {
		t.Fatalf("create block request for %s from %s: %v", node, pool, err)
	}
	return r
}

// waitDone waits until the controller has answered the request and returns it.
func waitDone(t testing.TB, r *vcoilv2.BlockRequest) *vcoilv2.BlockRequest {
	t.Helper()
	got := &vcoilv2.BlockRequest{}
	poll.Eventually(t, 20*time.Second, func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(r), got); err != nil {
			return err
		}
		if !got.Done() {
			return fmt.Errorf("block request %s is not answered: %+v", r.Name, got.Status)
		}
		return nil
	})
	return got
}

// allocate requests a block and returns it, failing when the request fails.
func allocate(t testing.TB, node, pool string) *vcoilv2.AddressBlock {
	t.Helper()
	r := waitDone(t, createRequest(t, node, pool))
	if c := r.FailedCondition(); c != nil {
		t.Fatalf("block request for %s from %s failed: %s: %s", node, pool, c.Reason, c.Message)
	}
	b := &vcoilv2.AddressBlock{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: r.Status.AddressBlockName}, b); err != nil {
		t.Fatalf("get block %s: %v", r.Status.AddressBlockName, err)
	}
	return b
}

func releaseBlockNow(t *testing.T, b *vcoilv2.AddressBlock) {
	t.Helper()
	if controllerutil.RemoveFinalizer(b, vcoilv2.Finalizer) {
		if err := env.Client.Update(context.Background(), b); client.IgnoreNotFound(err) != nil {
			t.Fatal(err)
		}
	}
	if err := env.Client.Delete(context.Background(), b); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(b), &vcoilv2.AddressBlock{})
		if err == nil {
			return fmt.Errorf("block %s still exists", b.Name)
		}
		return client.IgnoreNotFound(err)
	})
}
