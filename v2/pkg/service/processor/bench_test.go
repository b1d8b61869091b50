package processor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// nopRenderer accepts everything: the benchmarks measure the processor.
type nopRenderer struct{}

func (nopRenderer) Resync(context.Context, *service.State) error   { return nil }
func (nopRenderer) Update(context.Context, *service.Changes) error { return nil }

const benchServices, benchEndpoints = 10000, 10

func benchObjects(i int) (*corev1.Service, *discoveryv1.EndpointSlice) {
	name := fmt.Sprintf("svc-%d", i)
	svc := svcOf(named(name), nodePort, func(s *corev1.Service) {
		ip := fmt.Sprintf("10.96.%d.%d", i/256, i%256)
		s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
	})
	var eps []discoveryv1.Endpoint
	for e := range benchEndpoints {
		eps = append(eps, ep(fmt.Sprintf("10.%d.%d.%d", 100+e, (i/256)%256, i%256), fmt.Sprintf("node-%d", e)))
	}
	s := sliceOf(name+"-1", eps...)
	s.Labels[discoveryv1.LabelServiceName] = name
	return svc, s
}

func benchProcessor(b *testing.B) (*Processor, *time.Time) {
	p, err := New(Options{NodeName: "node-0", Renderers: []service.Renderer{nopRenderer{}}, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p.clock = func() time.Time { return now }
	for i := range benchServices {
		svc, s := benchObjects(i)
		p.SetService(svc)
		p.SetEndpointSlice(s)
	}
	return p, &now
}

// BenchmarkFullSync builds 10,000 services of 10 endpoints from scratch and
// hands them to a renderer in one Resync.
func BenchmarkFullSync(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		p, _ := benchProcessor(b)
		b.StartTimer()
		p.step(context.Background())
	}
}

// BenchmarkEndpointChange is one endpoint change among 10,000 services:
// the round that turns it into an Update.
func BenchmarkEndpointChange(b *testing.B) {
	p, now := benchProcessor(b)
	p.step(context.Background())
	_, s := benchObjects(42)
	i := 0
	for b.Loop() {
		i++
		s = s.DeepCopy()
		s.Endpoints[0].Addresses[0] = fmt.Sprintf("10.200.%d.%d", (i/256)%256, i%256)
		*now = now.Add(time.Second)
		p.SetEndpointSlice(s)
		p.step(context.Background())
	}
}

// BenchmarkBuild is Build of one service of 10 endpoints.
func BenchmarkBuild(b *testing.B) {
	svc, s := benchObjects(7)
	slices := []*discoveryv1.EndpointSlice{s}
	for b.Loop() {
		if _, err := Build(svc, slices, here); err != nil {
			b.Fatal(err)
		}
	}
}
