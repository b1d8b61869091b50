package scale

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// churn plays the cluster's steady changes until ctx ends, one event every
// 1/rate s, in turn: a pod created, a pod deleted, a pod's label changed,
// an endpoint moved to another backend pod.
type churn struct {
	s              *Sim
	events, errors atomic.Int64
	lastErr        atomic.Value
	wg             sync.WaitGroup
	cancel         context.CancelFunc
}

func (s *Sim) startChurn(ctx context.Context) *churn {
	ctx, cancel := context.WithCancel(ctx)
	c := &churn{s: s, cancel: cancel}
	if s.o.ChurnRate <= 0 {
		return c
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		t := time.NewTicker(time.Duration(float64(time.Second) / s.o.ChurnRate))
		defer t.Stop()
		// The events run beside each other (a slow answer must not lower
		// the rate), a bounded number at a time.
		slots := make(chan struct{}, 32)
		for k := 0; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			select {
			case slots <- struct{}{}:
			default:
				c.errors.Add(1)
				c.lastErr.Store("churn fell behind: 32 events in flight")
				continue
			}
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				defer func() { <-slots }()
				if err := c.event(ctx, k); err != nil && ctx.Err() == nil {
					c.errors.Add(1)
					c.lastErr.Store(err.Error())
					return
				}
				c.events.Add(1)
			}()
		}
	}()
	return c
}

func (c *churn) stop() (events, errs int64, last string) {
	c.cancel()
	c.wg.Wait()
	l, _ := c.lastErr.Load().(string)
	return c.events.Load(), c.errors.Load(), l
}

func (c *churn) event(ctx context.Context, k int) error {
	s := c.s
	switch k % 4 {
	case 0: // a pod created on a random node
		s.mu.Lock()
		i := s.podSeq
		s.podSeq++
		n := s.nodes[s.rng.IntN(len(s.nodes))]
		s.mu.Unlock()
		ip, err := s.address(ctx, n)
		if err != nil {
			return err
		}
		p := PodSpec{Namespace: Namespace(i % s.o.Namespaces), Name: fmt.Sprintf("c-%06d", i), Node: n.name, App: i % apps, IP: ip}
		if err := s.createPod(ctx, p); err != nil {
			n.release(ip)
			return err
		}
		s.mu.Lock()
		s.churned = append(s.churned, p)
		s.mu.Unlock()
	case 1: // the oldest churned pod deleted, its address given back
		s.mu.Lock()
		if len(s.churned) == 0 {
			s.mu.Unlock()
			return nil
		}
		p := s.churned[0]
		s.churned = s.churned[1:]
		s.mu.Unlock()
		if err := s.deletePod(ctx, p); err != nil {
			return err
		}
		for _, n := range s.nodes {
			if n.name == p.Node {
				n.release(p.IP)
			}
		}
	case 2: // a backend pod's app label changed (policies select it anew)
		s.mu.Lock()
		i := s.rng.IntN(s.o.Pods)
		app := s.rng.IntN(apps)
		s.mu.Unlock()
		if i%3 == 2 {
			i-- // client pods keep their labels: the probes use them
		}
		return s.labelPod(ctx, Namespace(i%s.o.Namespaces), fmt.Sprintf("p-%05d", i), map[string]string{"app": fmt.Sprintf("a%d", app)})
	case 3: // an endpoint moved to another backend pod
		s.mu.Lock()
		i := s.rng.IntN(s.o.Services)
		to := s.backends[s.rng.IntN(len(s.backends))]
		e := s.rng.IntN(EndpointsPerService)
		s.mu.Unlock()
		return s.setEndpoint(ctx, i, e, to)
	}
	return nil
}

// setEndpoint sets the e-th endpoint of the i-th Service to addr.
func (s *Sim) setEndpoint(ctx context.Context, i, e int, addr netip.Addr) error {
	ns := Namespace(i % s.o.Namespaces)
	return retryConflict(ctx, func() error {
		slice := &discoveryv1.EndpointSlice{}
		if err := s.o.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ServiceName(i)}, slice); err != nil {
			return fmt.Errorf("get EndpointSlice %s/%s: %w", ns, ServiceName(i), err)
		}
		slice.Endpoints[e%len(slice.Endpoints)].Addresses = []string{addr.String()}
		return s.o.Client.Update(ctx, slice)
	})
}

func retryConflict(ctx context.Context, f func() error) error {
	var err error
	for range 5 {
		if err = f(); err == nil || !apierrors.IsConflict(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return err
}
