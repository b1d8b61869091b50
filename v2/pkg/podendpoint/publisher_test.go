package podendpoint_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/podendpoint"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

// localPods is the node's pods as the policy cache would hold them.
type localPods struct {
	mu   sync.Mutex
	pods map[types.NamespacedName]*corev1.Pod
}

func (l *localPods) get(key types.NamespacedName) *corev1.Pod {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pods[key]
}

func (l *localPods) set(p *corev1.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods[client.ObjectKeyFromObject(p)] = p
}

func (l *localPods) remove(key types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pods, key)
}

// The publisher writes what the apiserver must hold of a node's pods: an
// endpoint when a pod has addresses, updated with its labels, deleted
// when the pod gives them back or is gone (also while vcoild was down);
// a write that fails is retried; another node's endpoint of the same name
// is left to that node.
func TestThePublisherKeepsTheEndpointsOfItsNodesPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := env.Client
	const node, other = "pub-node-a", "pub-node-b"
	ns := "pub-" + fmt.Sprint(time.Now().UnixNano()%100000)
	local := &localPods{pods: map[types.NamespacedName]*corev1.Pod{}}
	pub := podendpoint.NewPublisher(node, local.get, c, c, testr.New(t))

	pod := func(name string, l map[string]string, ips ...string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: l},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
				Name: "c", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	read := func(name string) (*vcoilv2.PodEndpoint, error) {
		ep := &vcoilv2.PodEndpoint{}
		err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, ep)
		return ep, err
	}
	has := func(name string, check func(*vcoilv2.PodEndpoint) error) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, func() error {
			ep, err := read(name)
			if err != nil {
				return err
			}
			return check(ep)
		})
	}
	gone := func(name string) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, func() error {
			if _, err := read(name); !apierrors.IsNotFound(err) {
				return fmt.Errorf("endpoint %s: %v, want not found", name, err)
			}
			return nil
		})
	}
	labelled := func(want map[string]string) func(*vcoilv2.PodEndpoint) error {
		return func(ep *vcoilv2.PodEndpoint) error {
			if !maps.Equal(ep.Spec.PodLabels, want) {
				return fmt.Errorf("labels %v, want %v", ep.Spec.PodLabels, want)
			}
			return nil
		}
	}

	// Its namespace does not exist yet: the first writes fail and are
	// retried until it does.
	web := pod("web", map[string]string{"app": "web"}, "10.1.0.5", "fd00::5")
	local.set(web)
	pub.Enqueue(client.ObjectKeyFromObject(web))
	go pub.Run(ctx, 2)
	time.Sleep(300 * time.Millisecond)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}) })
	has("web", func(ep *vcoilv2.PodEndpoint) error {
		want := vcoilv2.PodEndpointSpec{
			PodUID: "uid-web", NodeName: node, PodLabels: map[string]string{"app": "web"},
			Addresses:  []string{"10.1.0.5", "fd00::5"},
			NamedPorts: []vcoilv2.NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
		}
		if ep.Spec.PodUID != want.PodUID || ep.Spec.NodeName != want.NodeName || !maps.Equal(ep.Spec.PodLabels, want.PodLabels) ||
			!slices.Equal(ep.Spec.Addresses, want.Addresses) || !slices.Equal(ep.Spec.NamedPorts, want.NamedPorts) {
			return fmt.Errorf("spec %+v, want %+v", ep.Spec, want)
		}
		if ep.Labels[vcoilv2.LabelNode] != node {
			return fmt.Errorf("labels %v, want %s=%s", ep.Labels, vcoilv2.LabelNode, node)
		}
		if len(ep.OwnerReferences) != 1 || ep.OwnerReferences[0].UID != "uid-web" || ep.OwnerReferences[0].Kind != "Pod" {
			return fmt.Errorf("owners %+v, want the pod", ep.OwnerReferences)
		}
		return nil
	})

	// A label change is an update.
	relabelled := pod("web", map[string]string{"app": "web", "tier": "front"}, "10.1.0.5", "fd00::5")
	local.set(relabelled)
	pub.Enqueue(client.ObjectKeyFromObject(relabelled))
	has("web", labelled(map[string]string{"app": "web", "tier": "front"}))

	// Its CNI DEL gave the addresses back: the endpoint goes before they
	// can be another pod's.
	local.set(pod("web", map[string]string{"app": "web"}))
	pub.Enqueue(client.ObjectKeyFromObject(web))
	gone("web")

	// A host-network pod has no endpoint.
	host := pod("host", nil, "198.18.0.10")
	host.Spec.HostNetwork = true
	local.set(host)
	pub.Enqueue(client.ObjectKeyFromObject(host))

	// An endpoint of this node whose pod went while vcoild was down is
	// deleted by the sweep at start; another node's is left.
	stale := podendpoint.For(pod("stale", nil, "10.1.0.6"))
	theirs := podendpoint.For(pod("db", map[string]string{"app": "db"}, "10.1.1.7"))
	theirs.Spec.NodeName, theirs.Labels[vcoilv2.LabelNode] = other, other
	for _, ep := range []*vcoilv2.PodEndpoint{stale, theirs} {
		if err := c.Create(ctx, ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.EnqueueOwn(ctx); err != nil {
		t.Fatal(err)
	}
	gone("stale")

	// db moves here while node-b's endpoint is still there: this node
	// waits for it to go, then writes its own.
	db := pod("db", map[string]string{"app": "db", "moved": "yes"}, "10.1.0.7")
	db.UID = "uid-db-2"
	local.set(db)
	pub.Enqueue(client.ObjectKeyFromObject(db))
	time.Sleep(time.Second)
	has("db", func(ep *vcoilv2.PodEndpoint) error {
		if ep.Spec.NodeName != other {
			return poll.Stop(errors.New("another node's endpoint was overwritten"))
		}
		return nil
	})
	if err := c.Delete(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	has("db", func(ep *vcoilv2.PodEndpoint) error {
		if ep.Spec.NodeName != node || ep.Spec.PodUID != "uid-db-2" {
			return fmt.Errorf("endpoint of node %s, pod %s; want this node's new pod", ep.Spec.NodeName, ep.Spec.PodUID)
		}
		return nil
	})
	if _, err := read("host"); !apierrors.IsNotFound(err) {
		t.Fatalf("the host-network pod's endpoint: %v, want not found", err)
	}

	// The pod is gone from the node.
	local.remove(client.ObjectKeyFromObject(db))
	pub.Enqueue(client.ObjectKeyFromObject(db))
	gone("db")
}
