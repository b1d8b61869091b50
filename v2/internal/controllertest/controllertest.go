// Package controllertest runs vcoil-controller's reconcilers in a test
// process, against a testenv apiserver, for the tests of the node side
// (nodeipam, the daemon, vcoild) that need blocks to be carved. The
// controller's own tests and its program's tests live in v2/controllers and
// v2/cmd/vcoil-controller.
package controllertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vcoil/vcoil/v2/controllers"
	"github.com/vcoil/vcoil/v2/internal/testenv"
)

// Start runs the reconcilers (no webhooks, no leader election) until ctx
// ends; it has the shape of a testenv.Setup.
func Start(ctx context.Context, e *testenv.Env) (wait func(), err error) {
	mgr, err := NewManager(e)
	if err != nil {
		return nil, err
	}
	m, err := controllers.NewPoolMetrics(prometheus.NewRegistry())
	if err != nil {
		return nil, err
	}
	if err := controllers.Setup(mgr, controllers.Options{NodeGCInterval: time.Hour, BlockRequestConcurrency: 4, Metrics: m}); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Println("controllertest: manager:", err)
		}
	}()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("controller cache did not sync")
	}
	return func() { <-done }, nil
}

// Run starts the reconcilers for one test; stop (also called at cleanup)
// stops them.
func Run(t testing.TB, e *testenv.Env) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := Start(ctx, e)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wait() }) }
	t.Cleanup(stop)
	return stop
}

// NewManager is a manager for tests: no metrics or health servers, and
// controller names may repeat (several managers run in one process).
func NewManager(e *testenv.Env) (ctrl.Manager, error) {
	return ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
}
