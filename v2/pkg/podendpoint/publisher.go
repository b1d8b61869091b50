package podendpoint

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// vcoild writes the PodEndpoints of its node's pods; admission (the
// ValidatingAdmissionPolicy "daemon") holds it to its own node.
//
// +kubebuilder:rbac:groups=vcoil.io,resources=podendpoints,verbs=get;list;watch;create;update;delete

// LocalPod returns a pod of this node as the node knows it (its addresses
// those of its CNI ADD, none once its DEL gave them back), or nil when the
// node has no such pod.
type LocalPod func(key types.NamespacedName) *corev1.Pod

// Publisher keeps the PodEndpoints of one node's pods equal to the pods:
// created when a pod gets its addresses, updated when its labels, ports
// or prefixes change, deleted when it gives them back or is gone. Tell it
// which pod changed with Enqueue; Run writes, retrying failures with
// backoff.
type Publisher struct {
	node   string
	local  LocalPod
	reader client.Reader // the endpoints as the cache has them
	writer client.Writer
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	log    logr.Logger
}

// Backoff bounds of a failed write's retries.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 30 * time.Second
	// foreignWait is how long an endpoint of another pod of the same name
	// is left to its node (or the garbage collector) before looking again.
	foreignWait = 2 * time.Second
)

// NewPublisher returns the publisher of node's pods. reader reads the
// existing endpoints (the manager's cache), writer writes them.
func NewPublisher(node string, local LocalPod, reader client.Reader, writer client.Writer, log logr.Logger) *Publisher {
	return &Publisher{
		node: node, local: local, reader: reader, writer: writer, log: log,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](retryMin, retryMax),
			workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "podendpoints"}),
	}
}

// Enqueue asks for the endpoint of one pod to be brought up to date.
func (p *Publisher) Enqueue(key types.NamespacedName) { p.queue.Add(key) }

// EnqueueOwn enqueues every endpoint the cache holds of this node, so
// that those whose pod is gone are deleted.
func (p *Publisher) EnqueueOwn(ctx context.Context) error {
	var l vcoilv2.PodEndpointList
	if err := p.reader.List(ctx, &l, client.MatchingLabels{vcoilv2.LabelNode: p.node}); err != nil {
		return fmt.Errorf("list the PodEndpoints of node %s: %w", p.node, err)
	}
	for i := range l.Items {
		p.Enqueue(types.NamespacedName{Namespace: l.Items[i].Namespace, Name: l.Items[i].Name})
	}
	return nil
}

// Run writes until ctx ends. Start it once the local pods are known
// (LocalPod answers for all of them): before, a pod not known yet would
// lose its endpoint.
func (p *Publisher) Run(ctx context.Context, workers int) {
	go func() {
		<-ctx.Done()
		p.queue.ShutDown()
	}()
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for p.next(ctx) {
			}
		})
	}
	wg.Wait()
}

func (p *Publisher) next(ctx context.Context) bool {
	key, quit := p.queue.Get()
	if quit {
		return false
	}
	defer p.queue.Done(key)
	again, err := p.publish(ctx, key)
	switch {
	case err != nil:
		p.log.Error(err, "cannot write the pod's endpoint; retrying", "pod", key)
		p.queue.AddRateLimited(key)
	case again > 0:
		p.queue.Forget(key)
		p.queue.AddAfter(key, again)
	default:
		p.queue.Forget(key)
	}
	return true
}

// publish brings one endpoint up to date; again > 0 asks to look again
// after that long.
func (p *Publisher) publish(ctx context.Context, key types.NamespacedName) (again time.Duration, err error) {
	var want *vcoilv2.PodEndpoint
	if pod := p.local(key); pod != nil && pod.Spec.NodeName == p.node {
		want = For(pod)
	}
	have := &vcoilv2.PodEndpoint{}
	switch err := p.reader.Get(ctx, key, have); {
	case apierrors.IsNotFound(err):
		have = nil
	case err != nil:
		return 0, fmt.Errorf("read PodEndpoint %s: %w", key, err)
	}
	switch {
	case have != nil && have.Spec.NodeName != p.node:
		// Another node's pod of the same name (a StatefulSet's pod that
		// moved): that node deletes it, or the garbage collector does
		// once its pod is gone. Admission refuses this node's write.
		if want != nil {
			return foreignWait, nil
		}
		return 0, nil
	case want == nil && have == nil:
		return 0, nil
	case want == nil:
		err := p.writer.Delete(ctx, have, client.Preconditions{UID: &have.UID, ResourceVersion: &have.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("delete PodEndpoint %s: %w", key, err)
		}
		return 0, nil
	case have == nil:
		if err := p.writer.Create(ctx, want); err != nil {
			// AlreadyExists: the cache is behind; the retry reads again.
			return 0, fmt.Errorf("create PodEndpoint %s: %w", key, err)
		}
		return 0, nil
	case Same(have, want):
		return 0, nil
	default:
		want.ResourceVersion = have.ResourceVersion
		if err := p.writer.Update(ctx, want); err != nil {
			return 0, fmt.Errorf("update PodEndpoint %s: %w", key, err)
		}
		return 0, nil
	}
}
