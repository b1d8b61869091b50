package scale

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// The stage file must hold kwok Stages for nodes and pods, and the pod
// stage must take the address from the benchmark's annotation, never from
// kwok's own range.
func TestKwokStagesTakeThePodAddressFromTheAnnotation(t *testing.T) {
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(KwokStages), 4096)
	kinds := map[string]string{}
	var podRunning string
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatal(err)
		}
		if u.Object == nil {
			continue
		}
		if u.GetKind() != "Stage" || u.GetAPIVersion() != "kwok.x-k8s.io/v1alpha1" {
			t.Fatalf("%s %s: want kwok.x-k8s.io/v1alpha1 Stage", u.GetAPIVersion(), u.GetKind())
		}
		kind, _, _ := unstructured.NestedString(u.Object, "spec", "resourceRef", "kind")
		kinds[u.GetName()] = kind
		if u.GetName() == "scale-pod-running" {
			podRunning, _, _ = unstructured.NestedString(u.Object, "spec", "next", "statusTemplate")
		}
	}
	want := map[string]string{"scale-node-ready": "Node", "scale-pod-running": "Pod", "scale-pod-delete": "Pod"}
	for name, kind := range want {
		if kinds[name] != kind {
			t.Errorf("stage %s: kind %q, want %q (stages %v)", name, kinds[name], kind, kinds)
		}
	}
	if !strings.Contains(podRunning, `"`+IPAnnotation+`"`) || strings.Contains(podRunning, "PodIP") {
		t.Errorf("the pod stage must write the annotation's address and never kwok's PodIP:\n%s", podRunning)
	}
}

// A node's blocks give every address but the last, each once.
func TestSimNodeGivesEachAddressOfItsBlocksOnce(t *testing.T) {
	n := &simNode{name: "n"}
	if _, ok := n.take(); ok {
		t.Fatal("a node without blocks gave an address")
	}
	n.addBlock(netip.MustParsePrefix("10.200.0.32/27"))
	seen := map[netip.Addr]bool{}
	for {
		a, ok := n.take()
		if !ok {
			break
		}
		if seen[a] || !netip.MustParsePrefix("10.200.0.32/27").Contains(a) {
			t.Fatalf("address %s given twice or outside the block", a)
		}
		seen[a] = true
	}
	if len(seen) != 31 || seen[netip.MustParseAddr("10.200.0.63")] {
		t.Fatalf("%d addresses given (last one given: %v), want 31 without 10.200.0.63", len(seen), seen[netip.MustParseAddr("10.200.0.63")])
	}
	n.release(netip.MustParseAddr("10.200.0.40"))
	if a, ok := n.take(); !ok || a != netip.MustParseAddr("10.200.0.40") {
		t.Fatalf("released address not given again: %s %v", a, ok)
	}
}

func TestObjectsStayInTheirRanges(t *testing.T) {
	if !NodeNet.Contains(NodeIP(MaxNodes-1)) || NodeNet.Contains(addrPlus(NodeNet.Addr(), 1<<14)) {
		t.Error("node addresses leave NodeNet")
	}
	last := NewService("ns", MaxServices-1)
	if !ServiceCIDR.Contains(netip.MustParseAddr(last.Spec.ClusterIP)) {
		t.Errorf("ClusterIP %s outside %s", last.Spec.ClusterIP, ServiceCIDR)
	}
	// The fresh endpoint addresses of the changes are never pod addresses.
	if PoolSubnet.Contains(ChangeBase) {
		t.Errorf("change addresses %s inside the pool %s", ChangeBase, PoolSubnet)
	}
	p := PodSpec{Namespace: "ns", Name: "p", Node: "scale-0001", App: 3, IP: netip.MustParseAddr("10.200.0.1"), Client: true}.Object()
	if p.Annotations[IPAnnotation] != "10.200.0.1" || p.Labels["role"] != "client" || p.Spec.NodeName != "scale-0001" || p.Labels[BenchLabel] != "1" {
		t.Errorf("pod %+v", p.ObjectMeta)
	}
	n := NewNode(7)
	if n.Annotations[KwokAnnotation] != "fake" || len(n.Spec.Taints) != 1 || n.Status.Addresses[0].Address != NodeIP(7).String() {
		t.Errorf("node %+v", n)
	}
}

func TestPercentileAndMarkdown(t *testing.T) {
	d := []time.Duration{5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	if p := percentileMS(d, 50); p != 3 {
		t.Errorf("p50 = %v, want 3", p)
	}
	if p := percentileMS(d, 99); p != 5 {
		t.Errorf("p99 = %v, want 5", p)
	}
	if d[0] != 5*time.Millisecond {
		t.Error("percentile sorted its argument")
	}
	md := Markdown(Options{Nodes: 10}, []Record{
		{Phase: PhaseNode, Metric: "vcoild_ready_s", Value: 42, Unit: "s", Target: "≤ 30 s", Status: StatusOK, Context: Context{CPUIdlePct: 20, APILatencyP50MS: 3, APILatencyP99MS: 9}},
		{Phase: PhaseController, Metric: "blocks_checked", Status: StatusFailed, Detail: "a|b"},
	})
	for _, want := range []string{"**≤ 30 s (missed)**", "20 %", "3.0 / 9.0 ms", "**failed**", "a/b"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}

// The protobuf watch stream's frames are counted however the reads cut
// them.
func TestFrameCounterCountsFramesAcrossReads(t *testing.T) {
	var stream []byte
	for _, n := range []int{0, 5, 300, 70000, 1} {
		stream = append(stream, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
		stream = append(stream, make([]byte, n)...)
	}
	for _, cut := range []int{1, 2, 3, 7, 4096, len(stream)} {
		var f frameCounter
		var got int64
		for b := stream; len(b) > 0; {
			n := min(cut, len(b))
			got += f.feed(b[:n])
			b = b[n:]
		}
		if got != 5 || f.left != 0 || f.have != 0 {
			t.Errorf("reads of %d bytes: %d frames (left %d, header %d), want 5", cut, got, f.left, f.have)
		}
	}
}

// vcoild's share of the probe's ADDs is the difference of its histograms
// over the ADDs the probe made; a phase no ADD reached is left out.
func TestAddSharesAreMeansOverTheProbesADDs(t *testing.T) {
	// sum, count of the request; then sum, count of each phase.
	before := []float64{1.0, 10, 0.1, 10, 0.2, 10, 0.3, 10, 0.4, 10, 0, 0}
	after := []float64{1.5, 20, 0.12, 20, 0.25, 20, 0.4, 20, 0.6, 20, 0, 0}
	mean, detail, ok := addShares(before, after)
	if !ok || mean != 50 {
		t.Fatalf("mean %v (ok %v), want 50 ms", mean, ok)
	}
	want := "vcoild's mean by phase (ms): read 2.0, allocate 5.0, wire 10.0, policies 20.0"
	if detail != want {
		t.Errorf("detail %q, want %q", detail, want)
	}
	if _, _, ok := addShares(after, after); ok {
		t.Error("no ADD between the two scrapes, yet a mean")
	}
}
