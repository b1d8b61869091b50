package podendpoint

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// endpointAsServed is a PodEndpoint as the apiserver serves it: with its
// owner, node label, timestamps and managed fields.
func endpointAsServed(i int, node string) *vcoilv2.PodEndpoint {
	uid := types.UID(fmt.Sprintf("5d0f8a4c-1b2e-4c3d-9e8f-%012d", i))
	return &vcoilv2.PodEndpoint{
		TypeMeta: metav1.TypeMeta{APIVersion: vcoilv2.GroupVersion.String(), Kind: "PodEndpoint"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: fmt.Sprintf("ns%02d", i%20), Name: fmt.Sprintf("web-%05d", i),
			UID: types.UID(fmt.Sprintf("0a1b2c3d-4e5f-4a6b-8c7d-%012d", i)), ResourceVersion: fmt.Sprint(100000 + i),
			Generation: 1, CreationTimestamp: metav1.Now(),
			Labels: map[string]string{vcoilv2.LabelNode: node},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: fmt.Sprintf("web-%05d", i), UID: uid, BlockOwnerDeletion: ptr.To(false),
			}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "vcoild", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "vcoil.io/v2", Time: ptr.To(metav1.Now()), FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{".":{},"f:vcoil.io/node":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"` + string(uid) + `\"}":{}}},"f:spec":{".":{},"f:addresses":{},"f:namedPorts":{},"f:nodeName":{},"f:podLabels":{".":{},"f:app":{}},"f:podUID":{}}}`)}}},
		},
		Spec: vcoilv2.PodEndpointSpec{
			PodUID: uid, NodeName: node,
			PodLabels:  map[string]string{"app": "web", "tier": "frontend"},
			Addresses:  []string{fmt.Sprintf("10.1.%d.%d", i/250%250, i%250+1)},
			NamedPorts: []vcoilv2.NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
		},
	}
}

func TestTrimKeepsWhatEachReaderReads(t *testing.T) {
	trim := Trim("node-a")

	own := endpointAsServed(1, "node-a")
	got, err := trim(own.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	o := got.(*vcoilv2.PodEndpoint)
	if o.ManagedFields != nil {
		t.Error("this node's endpoint keeps its managed fields")
	}
	// The publisher reads these of its own endpoints.
	if o.UID != own.UID || o.ResourceVersion != own.ResourceVersion || o.Labels[vcoilv2.LabelNode] != "node-a" ||
		len(o.OwnerReferences) != 1 || !Same(o, own) {
		t.Errorf("this node's endpoint lost what the publisher reads: %+v", o.ObjectMeta)
	}

	peer := endpointAsServed(2, "node-b")
	got, err = trim(peer.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*vcoilv2.PodEndpoint)
	want := vcoilv2.PodEndpoint{
		TypeMeta:   peer.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: peer.Namespace, Name: peer.Name, ResourceVersion: peer.ResourceVersion},
	}
	if p.TypeMeta != want.TypeMeta || p.Namespace != want.Namespace || p.Name != want.Name || p.ResourceVersion != want.ResourceVersion {
		t.Errorf("another node's endpoint: %+v, want %+v", p.ObjectMeta, want.ObjectMeta)
	}
	if p.UID != "" || p.Labels != nil || p.OwnerReferences != nil || p.ManagedFields != nil || !p.CreationTimestamp.IsZero() {
		t.Errorf("another node's endpoint keeps metadata no reader reads: %+v", p.ObjectMeta)
	}
	// The policy cache reads the pod from the spec.
	if p.Spec.PodUID != peer.Spec.PodUID || p.Spec.NodeName != "node-b" || p.Spec.PodLabels["app"] != "web" ||
		len(p.Spec.Addresses) != 1 || len(p.Spec.NamedPorts) != 1 {
		t.Errorf("another node's endpoint lost its spec: %+v", p.Spec)
	}

	if got, _ := trim("a tombstone"); got != "a tombstone" {
		t.Errorf("a tombstone became %v", got)
	}
}

// BenchmarkEndpointCacheHeap reports what the informer's cache retains per
// PodEndpoint of another node, decoded from the apiserver's JSON, without
// and with Trim (the manager's default transform drops the managed fields
// of every type it does not trim otherwise).
func BenchmarkEndpointCacheHeap(b *testing.B) {
	const n = 10_000
	encoded := make([][]byte, n)
	for i := range encoded {
		var err error
		if encoded[i], err = json.Marshal(endpointAsServed(i, "node-b")); err != nil {
			b.Fatal(err)
		}
	}
	stripManaged := func(obj any) (any, error) {
		obj.(*vcoilv2.PodEndpoint).ManagedFields = nil
		return obj, nil
	}
	for _, tc := range []struct {
		name      string
		transform func(any) (any, error)
	}{{"managed-fields-stripped", stripManaged}, {"trimmed", Trim("node-a")}} {
		b.Run(tc.name, func(b *testing.B) {
			var perEndpoint float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				kept := make([]any, n)
				for i, raw := range encoded {
					ep := &vcoilv2.PodEndpoint{}
					if err := json.Unmarshal(raw, ep); err != nil {
						b.Fatal(err)
					}
					obj, err := tc.transform(ep)
					if err != nil {
						b.Fatal(err)
					}
					kept[i] = obj
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(kept)
				perEndpoint = float64(after.HeapAlloc-before.HeapAlloc) / n
			}
			b.ReportMetric(perEndpoint, "retained-B/endpoint")
		})
	}
}
