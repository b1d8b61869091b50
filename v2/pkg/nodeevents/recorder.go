// Package nodeevents records the Kubernetes Events that vcoild has to say
// about its node as a whole (a service sync that fails, a policy render the
// dataplane refuses, VPP's restarts) on the node's Node object, where
// `kubectl describe node` shows them. Events about one object (a Pod, a
// Service, a NetworkPolicy) go on that object instead; this package does
// not record those.
//
// A failure that repeats at every retry is recorded once per distinct
// message (Failed) until the part recovers (Recovered): the Events API
// would aggregate the repeats, but each would still be a write to the
// apiserver.
package nodeevents

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
)

// Recorder records Events on one Node. A nil *Recorder records nothing, so
// that parts built without one (tests, tools) need no checks.
type Recorder struct {
	rec  events.EventRecorder
	node *corev1.ObjectReference

	mu sync.Mutex
	// failed is the note of the last failure recorded, by reason.
	failed map[string]string
}

// New returns a recorder of Events on Node nodeName, or nil when rec is
// nil. The Events name the Node with its name as UID, as the kubelet's do:
// `kubectl describe node` finds Events by either the Node's UID or its
// name, and vcoild need not read the Node (or reach the apiserver at all)
// before it can report.
func New(rec events.EventRecorder, nodeName string) *Recorder {
	if rec == nil {
		return nil
	}
	return &Recorder{
		rec:    rec,
		node:   &corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: nodeName, UID: types.UID(nodeName)},
		failed: map[string]string{},
	}
}

// Normal records a Normal Event; action is what vcoild was doing
// ("Resync", "Render").
func (r *Recorder) Normal(reason, action, note string) {
	if r == nil {
		return
	}
	r.rec.Eventf(r.node, nil, corev1.EventTypeNormal, reason, action, "%s", note)
}

// Warning records a Warning Event.
func (r *Recorder) Warning(reason, action, note string) {
	if r == nil {
		return
	}
	r.rec.Eventf(r.node, nil, corev1.EventTypeWarning, reason, action, "%s", note)
}

// Failed records a Warning Event for a failure that is retried: once per
// distinct note of the reason, until Recovered(reason).
func (r *Recorder) Failed(reason, action, note string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	same := r.failed[reason] == note
	r.failed[reason] = note
	r.mu.Unlock()
	if !same {
		r.Warning(reason, action, note)
	}
}

// Recovered forgets the failures of reason: the next one is recorded
// again, even with the same note.
func (r *Recorder) Recovered(reason string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	delete(r.failed, reason)
	r.mu.Unlock()
}
