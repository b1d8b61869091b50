package daemon

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/policy/agent"
)

func createAnnotatedPod(t *testing.T, namespace, name string, annotations map[string]string) {
	t.Helper()
	createLabelledPod(t, namespace, name, nil, annotations)
}

func createLabelledPod(t *testing.T, namespace, name string, labels, annotations map[string]string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
}

// The pod's allowed-source-prefixes annotation, read at ADD, reaches the
// dataplane and the checkpoint, so that a restarted vcoild (and a VPP
// dataplane re-making its pods) wires the pod identically; a malformed
// annotation refuses the ADD before any address is taken.
func TestAllowedSourcePrefixesReachTheDataplaneAndTheCheckpoint(t *testing.T) {
	ensureNode(t, "node-fc")
	state := t.TempDir()
	dp := newFakeDataplane()
	n := startNode(t, "node-fc", state, dp)
	createAnnotatedPod(t, "plain", "pod-s0000001", map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: "198.51.100.0/24, fd00:beef::/64"})
	createAnnotatedPod(t, "plain", "pod-s0000002", map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: "198.51.100.0/24,not-a-prefix"})
	createAnnotatedPod(t, "plain", "pod-s0000003", nil)
	want := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("fd00:beef::/64")}
	k1 := dataplane.PodKey{ContainerID: "s0000001", IfName: "eth0"}

	n.add(t, "s0000001", "plain")
	if got := dp.pods[k1].SourcePrefixes; !reflect.DeepEqual(got, want) {
		t.Fatalf("the dataplane got source prefixes %v, want %v", got, want)
	}
	e, found, err := n.srv.store.Get("s0000001", "eth0")
	if err != nil || !found || !reflect.DeepEqual(e.SourcePrefixes, want) {
		t.Fatalf("checkpoint entry %+v (%v), want source prefixes %v", e, err, want)
	}
	n.add(t, "s0000003", "plain")
	if got := dp.pods[dataplane.PodKey{ContainerID: "s0000003", IfName: "eth0"}].SourcePrefixes; got != nil {
		t.Fatalf("a pod without the annotation got source prefixes %v", got)
	}

	_, err = n.srv.Add(context.Background(), n.args("s0000002", "plain"))
	if cniCode(err) != cnirpc.ErrorCode_INVALID_NETWORK_CONFIG {
		t.Fatalf("ADD of a pod with a malformed annotation: %v, want INVALID_NETWORK_CONFIG", err)
	}
	msg := cnicontract.FromRPCError(err, 0).Msg
	for _, w := range []string{vcoilv2.AnnotationAllowedSourcePrefixes, "plain/pod-s0000002", "not-a-prefix"} {
		if !strings.Contains(msg, w) {
			t.Fatalf("message %q does not name %q", msg, w)
		}
	}
	if _, found, _ := n.srv.store.Get("s0000002", "eth0"); found {
		t.Fatal("a refused ADD left a checkpoint entry")
	}

	// A restart: the dataplane is given the recorded prefixes, whatever
	// the pod says now, and a repeated ADD keeps them.
	n2 := startNode(t, "node-fc", state, dp)
	pods, err := podsOf(n2.srv.store)
	if err != nil {
		t.Fatal(err)
	}
	var restored []netip.Prefix
	for _, p := range pods {
		if p.PodKey == k1 {
			restored = p.SourcePrefixes
		}
	}
	if !reflect.DeepEqual(restored, want) {
		t.Fatalf("after a restart the dataplane is given %v, want %v", restored, want)
	}
	delete(dp.pods, k1)
	n2.add(t, "s0000001", "plain")
	if got := dp.pods[k1].SourcePrefixes; !reflect.DeepEqual(got, want) {
		t.Fatalf("a repeated ADD after the restart wired %v, want %v", got, want)
	}
}

func TestParseSourcePrefixes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []netip.Prefix
		bad  string
	}{
		{in: "", want: nil},
		{in: "10.1.0.0/16", want: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
		{in: " 10.1.0.0/16 ,fd00::/8 ", want: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("fd00::/8")}},
		{in: "10.1.0.1/16", bad: `"10.1.0.1/16"`},
		{in: "10.1.0.0", bad: `"10.1.0.0"`},
		{in: "10.1.0.0/16,", bad: "empty"},
		{in: "::ffff:10.1.0.0/112", bad: `"::ffff:10.1.0.0/112"`},
		{in: "10.1.0.0/16,0.0.0.0/0", bad: "0.0.0.0/0"},
		{in: "fe80::/64", bad: "fe80::/64"},
		{in: "127.0.0.0/8", bad: "127.0.0.0/8"},
	} {
		got, err := parseSourcePrefixes(c.in)
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("parse %q = %v, %v; want an error naming %s", c.in, got, err, c.bad)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parse %q = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// The checksum choice, made at the first ADD from the pod's annotation or,
// without one, from its being an Egress router or client, reaches the
// dataplane and the checkpoint and survives a restart; a malformed
// annotation refuses the ADD naming it.
func TestChecksumChoiceReachesTheDataplaneAndTheCheckpoint(t *testing.T) {
	ensureNode(t, "node-cs")
	state := t.TempDir()
	dp := newFakeDataplane()
	n := startNode(t, "node-cs", state, dp)
	off := map[string]string{vcoilv2.AnnotationChecksumOffload: "off"}
	for _, c := range []struct {
		id                  string
		labels, annotations map[string]string
		want                bool
	}{
		{"c0000001", nil, off, true},
		{"c0000002", nil, nil, false},
		{"c0000003", map[string]string{vcoilv2.LabelEgress: "nat"}, nil, true},                         // a router
		{"c0000004", nil, map[string]string{vcoilv2.AnnotationEgressPrefix + "internet": "nat"}, true}, // a client
		{"c0000005", map[string]string{vcoilv2.LabelEgress: "nat"}, map[string]string{vcoilv2.AnnotationChecksumOffload: " on "}, false},
	} {
		createLabelledPod(t, "plain", "pod-"+c.id, c.labels, c.annotations)
		n.add(t, c.id, "plain")
		k := dataplane.PodKey{ContainerID: c.id, IfName: "eth0"}
		if got := dp.pods[k].NoChecksumOffload; got != c.want {
			t.Fatalf("pod %s (labels %v, annotations %v): the dataplane got NoChecksumOffload %t, want %t", c.id, c.labels, c.annotations, got, c.want)
		}
		e, found, err := n.srv.store.Get(c.id, "eth0")
		if err != nil || !found || e.NoChecksumOffload != c.want {
			t.Fatalf("pod %s: checkpoint entry %+v (%v), want NoChecksumOffload %t", c.id, e, err, c.want)
		}
	}

	createAnnotatedPod(t, "plain", "pod-c0000006", map[string]string{vcoilv2.AnnotationChecksumOffload: "no"})
	_, err := n.srv.Add(context.Background(), n.args("c0000006", "plain"))
	if cniCode(err) != cnirpc.ErrorCode_INVALID_NETWORK_CONFIG {
		t.Fatalf("ADD of a pod with a malformed checksum annotation: %v, want INVALID_NETWORK_CONFIG", err)
	}
	msg := cnicontract.FromRPCError(err, 0).Msg
	for _, w := range []string{vcoilv2.AnnotationChecksumOffload, "plain/pod-c0000006", `"no"`} {
		if !strings.Contains(msg, w) {
			t.Fatalf("message %q does not name %q", msg, w)
		}
	}

	n2 := startNode(t, "node-cs", state, dp)
	pods, err := podsOf(n2.srv.store)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range pods {
		got[p.ContainerID] = p.NoChecksumOffload
	}
	if want := map[string]bool{"c0000001": true, "c0000002": false, "c0000003": true, "c0000004": true, "c0000005": false}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after a restart the dataplane is given %v, want %v", got, want)
	}
}

// countingReader counts the reads that reach the apiserver.
type countingReader struct {
	client.Reader
	gets atomic.Int32
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// An ADD reads its pod from the node's pod cache (as vcoild's policies
// cache it, trimmed) when the cache holds it under the sandbox's UID, and
// the annotations it reads survive the trim; without a UID from the
// runtime, or when the cache holds another pod of the name, it asks the
// apiserver.
func TestAddReadsItsPodFromTheNodesCacheUnderItsUID(t *testing.T) {
	const nodeName = "node-pc"
	ensureNode(t, nodeName)
	dp := newFakeDataplane()
	n := startNode(t, nodeName, t.TempDir(), dp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	podCache, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, ByObject: agent.CacheOptions(nodeName)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := podCache.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = podCache.Start(ctx) }()
	podCache.WaitForCacheSync(ctx)
	api := &countingReader{Reader: n.srv.pods}
	n.srv.pods, n.srv.podCache = api, podCache

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: "pod-p0000001", Annotations: map[string]string{
			vcoilv2.AnnotationAllowedSourcePrefixes: "198.51.100.0/24",
			vcoilv2.AnnotationChecksumOffload:       "off",
		}},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/c"}}},
	}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	poll.Eventually(t, 30*time.Second, func() error {
		return podCache.Get(ctx, client.ObjectKeyFromObject(pod), &corev1.Pod{})
	})

	for _, c := range []struct {
		id, uid   string
		apiReads  int32
		prefixes  []netip.Prefix
		noOffload bool
	}{
		{"p0000001", string(pod.UID), 0, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, true},
		{"p0000001", "", 1, []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, true},
		// The runtime's pod is another one of the name: neither copy is
		// its, so it gets no prefixes.
		{"p0000001", "6b1f0c2e-0000-4000-8000-000000000001", 1, nil, false},
	} {
		before := api.gets.Load()
		args := n.args(c.id, "plain")
		if c.uid != "" {
			args.Args[argPodUID] = c.uid
		}
		if _, err := n.srv.Add(ctx, args); err != nil {
			t.Fatalf("ADD with UID %q: %v", c.uid, err)
		}
		if got := api.gets.Load() - before; got != c.apiReads {
			t.Errorf("ADD with UID %q read the pod from the apiserver %d times, want %d", c.uid, got, c.apiReads)
		}
		got := dp.pods[dataplane.PodKey{ContainerID: c.id, IfName: "eth0"}]
		if !reflect.DeepEqual(got.SourcePrefixes, c.prefixes) || got.NoChecksumOffload != c.noOffload {
			t.Errorf("ADD with UID %q wired source prefixes %v, no checksum offload %t; want %v, %t", c.uid, got.SourcePrefixes, got.NoChecksumOffload, c.prefixes, c.noOffload)
		}
		if _, err := n.srv.Del(ctx, args); err != nil {
			t.Fatalf("DEL: %v", err)
		}
	}
}
