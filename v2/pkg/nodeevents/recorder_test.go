package nodeevents

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/vcoil/vcoil/v2/internal/controllertest"
	"github.com/vcoil/vcoil/v2/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, &env)
}

// newRecorder is a Recorder on node through a manager's event recorder, as
// in vcoild.
func newRecorder(t *testing.T, node string) *Recorder {
	t.Helper()
	mgr, err := controllertest.NewManager(env)
	if err != nil {
		t.Fatal(err)
	}
	return New(mgr.GetEventRecorder("vcoild"), node)
}

// The Events regard the Node by kind and name, with the name as UID (as
// the kubelet's), in namespace default, where `kubectl describe node`
// finds them.
func TestEventsRegardTheNodeAsTheKubeletsDo(t *testing.T) {
	r := newRecorder(t, "node-events-a")
	r.Warning("VPPRestarted", "Resync", "VPP restarted (pid 7, was 6; incarnation 2); resyncing 3 pods")
	r.Normal("VPPResynced", "Resync", "resynced VPP (pid 7, incarnation 2) in 12ms: 3 pods, 1 blocks")
	w := env.WaitForEvent(t, 10*time.Second, testenv.EventOf{Kind: "Node", Name: "node-events-a", UID: types.UID("node-events-a"),
		Type: corev1.EventTypeWarning, Reason: "VPPRestarted", Note: "resyncing 3 pods"})
	if w.Action != "Resync" || w.ReportingController != "vcoild" || w.Namespace != "default" {
		t.Fatalf("event = action %q, controller %q, namespace %q; want Resync, vcoild, default", w.Action, w.ReportingController, w.Namespace)
	}
	env.WaitForEvent(t, 10*time.Second, testenv.EventOf{Kind: "Node", Name: "node-events-a", Type: corev1.EventTypeNormal, Reason: "VPPResynced", Note: "in 12ms"})

	// kubectl describe node's second query (the kubelet's convention):
	// core/v1 Events of every namespace by kind, name and the name as UID.
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	name, kind, uid := "node-events-a", "Node", "node-events-a"
	events := cs.CoreV1().Events("")
	list, err := events.List(context.Background(), metav1.ListOptions{FieldSelector: events.GetFieldSelector(&name, nil, &kind, &uid).String()})
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		reasons = append(reasons, e.Reason)
	}
	slices.Sort(reasons)
	if !slices.Equal(reasons, []string{"VPPRestarted", "VPPResynced"}) {
		t.Fatalf("kubectl describe node would show %q, want VPPRestarted and VPPResynced", reasons)
	}
}

// calls is an events.EventRecorder that keeps what it is asked to record.
type calls []string

func (c *calls) Eventf(regarding, _ runtime.Object, eventtype, reason, action, note string, args ...any) {
	ref := regarding.(*corev1.ObjectReference)
	*c = append(*c, fmt.Sprintf("%s/%s %s %s %s: %s", ref.Kind, ref.Name, eventtype, reason, action, fmt.Sprintf(note, args...)))
}

// A failure retried with the same message is recorded once; another
// message is recorded; after Recovered the same message is recorded again.
// (The Events API then counts Events of one reason on one object into the
// first one's series for six minutes; docs/operations.md says so.)
func TestFailedRecordsEachDistinctFailureOnceUntilRecovered(t *testing.T) {
	var got calls
	r := New(&got, "node-b")
	for range 5 {
		r.Failed("ServiceSyncFailed", "Sync", "nftables: operation not permitted")
	}
	r.Failed("ServiceSyncFailed", "Sync", "nftables: no buffer space available")
	r.Failed("PolicyRenderFailed", "Render", "nftables: operation not permitted") // another reason: its own
	r.Recovered("ServiceSyncFailed")
	r.Failed("ServiceSyncFailed", "Sync", "nftables: operation not permitted")
	r.Recovered("ServiceSyncFailed") // nothing failed since: still nothing
	r.Warning("VPPRestarted", "Resync", "always recorded")
	r.Warning("VPPRestarted", "Resync", "always recorded")
	want := calls{
		"Node/node-b Warning ServiceSyncFailed Sync: nftables: operation not permitted",
		"Node/node-b Warning ServiceSyncFailed Sync: nftables: no buffer space available",
		"Node/node-b Warning PolicyRenderFailed Render: nftables: operation not permitted",
		"Node/node-b Warning ServiceSyncFailed Sync: nftables: operation not permitted",
		"Node/node-b Warning VPPRestarted Resync: always recorded",
		"Node/node-b Warning VPPRestarted Resync: always recorded",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("recorded:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A note with a percent sign is recorded as it is, not as a format.
func TestANoteIsNotAFormat(t *testing.T) {
	var got calls
	New(&got, "node-c").Warning("ServiceSyncFailed", "Sync", "100% of %s")
	if want := "Node/node-c Warning ServiceSyncFailed Sync: 100% of %s"; len(got) != 1 || got[0] != want {
		t.Fatalf("recorded %q, want %q", got, want)
	}
}

func TestANilRecorderRecordsNothing(t *testing.T) {
	var r *Recorder
	if New(nil, "n") != nil {
		t.Fatal("New(nil) is not nil")
	}
	r.Warning("X", "Y", "z")
	r.Normal("X", "Y", "z")
	r.Failed("X", "Y", "z")
	r.Recovered("X")
}
