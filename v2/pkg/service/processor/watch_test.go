package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

// startProcessor runs a Processor in a manager of its own, with vcoild's
// cache options, and returns its renderer.
func startProcessor(t *testing.T, nodeName string) (*Processor, *recordingRenderer, cache.Cache) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{ByObject: CacheOptions(nodeName)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingRenderer{}
	p, err := Setup(mgr, Options{
		NodeName: nodeName, Renderers: []service.Renderer{r},
		MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: 2 * time.Second, Log: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-p.Synced():
	case <-time.After(30 * time.Second):
		t.Fatal("the processor did not sync")
	}
	return p, r, mgr.GetCache()
}

// watchRenderer folds the calls of a recording renderer into the services
// it holds.
type watchRenderer struct {
	r        *recordingRenderer
	services map[service.ID]*service.Service
	resyncs  int
}

func (w *watchRenderer) catchUp() {
	for _, c := range w.r.take() {
		if c.resync != nil {
			w.resyncs++
			w.services = c.resync.Services
			continue
		}
		for _, u := range c.changes.Upsert {
			w.services[u.ID] = u
		}
		for _, d := range c.changes.Delete {
			delete(w.services, d)
		}
	}
}

func (w *watchRenderer) waitFor(t *testing.T, id service.ID, what string, ok func(*service.Service) bool) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		w.catchUp()
		if s := w.services[id]; !ok(s) {
			return fmt.Errorf("%s: renderer has %+v", what, s)
		}
		return nil
	})
}

func TestWatch(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	env.CleanAtEnd(t)
	env.CreateNode(t, "svc-node", "198.18.0.1")
	p, rec, cch := startProcessor(t, "svc-node")
	w := &watchRenderer{r: rec, services: map[service.ID]*service.Service{}}
	w.catchUp()
	if w.resyncs != 1 {
		t.Fatalf("first call: %d resyncs", w.resyncs)
	}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Annotations: map[string]string{
			"kubectl.kubernetes.io/last-applied-configuration": "{}",
		}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, svc) })
	slice := sliceOf("web-1", ep("10.1.0.1", "svc-node"))
	if err := c.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, slice) })
	id := service.ID{Namespace: "default", Name: "web"}

	t.Log("the service reaches the renderer with its endpoint, local to this node")
	w.waitFor(t, id, "the service", func(s *service.Service) bool {
		return s != nil && len(s.ClusterIPs) == 1 && s.ClusterIPs[0].String() == svc.Spec.ClusterIP &&
			s.Ports[0].NodePort == uint16(svc.Spec.Ports[0].NodePort) && addrs(s.Ports[0].Cluster) == "10.1.0.1" && s.Ports[0].Cluster[0].Local
	})

	t.Log("the cache holds trimmed objects")
	var cached corev1.Service
	if err := cch.Get(ctx, client.ObjectKeyFromObject(svc), &cached); err != nil {
		t.Fatal(err)
	}
	if len(cached.ManagedFields) != 0 || len(cached.Annotations) != 0 {
		t.Errorf("cached service keeps managed fields %d, annotations %v", len(cached.ManagedFields), cached.Annotations)
	}

	t.Log("an endpoint change is an update")
	slice.Endpoints = append(slice.Endpoints, ep("10.1.0.2", "other-node"))
	if err := c.Update(ctx, slice); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, id, "the new endpoint", func(s *service.Service) bool {
		return s != nil && addrs(s.Ports[0].Cluster) == "10.1.0.1 10.1.0.2"
	})

	t.Log("a deleted service is deleted")
	if err := c.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, id, "the deletion", func(s *service.Service) bool { return s == nil })
	if !p.PendingSince().IsZero() && time.Since(p.PendingSince()) > 10*time.Second {
		t.Errorf("pending since %v", p.PendingSince())
	}
}

// TestWatchInvalidService: a Service the model cannot represent gets a
// Warning Event in the apiserver and is skipped. The apiserver refuses every
// such Service this test could create (an IPv4-mapped external IP, a bad
// source range, a duplicate port...), so the invalid version of a real
// Service is fed to the processor directly, as its informer would deliver an
// object that an older apiserver had let through.
func TestWatchInvalidService(t *testing.T) {
	ctx := context.Background()
	c := env.Client
	env.CleanAtEnd(t)
	env.CreateNode(t, "svc-node-2", "198.18.0.2")
	p, rec, _ := startProcessor(t, "svc-node-2")
	w := &watchRenderer{r: rec, services: map[service.ID]*service.Service{}}

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "odd"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(ctx, svc) })
	id := service.ID{Namespace: "default", Name: "odd"}
	w.waitFor(t, id, "the valid service", func(s *service.Service) bool { return s != nil })

	bad := svc.DeepCopy()
	bad.Spec.ExternalIPs = []string{"::ffff:203.0.113.1"}
	p.SetService(bad)
	w.waitFor(t, id, "the invalid service gone", func(s *service.Service) bool { return s == nil })
	poll.Eventually(t, 20*time.Second, func() error {
		var evs eventsv1.EventList
		if err := c.List(ctx, &evs, client.InNamespace("default")); err != nil {
			return err
		}
		if slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == "odd" && e.Regarding.UID == svc.UID && e.Reason == ReasonServiceInvalid && e.Type == corev1.EventTypeWarning
		}) {
			return nil
		}
		return errors.New("no Warning event on service odd")
	})
}
