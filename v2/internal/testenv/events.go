package testenv

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

// EventOf picks Events (events.k8s.io) about one object.
type EventOf struct {
	// Kind and Name of the object the Event regards; Namespace is the
	// object's, empty for a cluster-scoped one (its Events are in
	// "default").
	Kind, Namespace, Name string
	// UID, when set, must be the regarded object's UID as the Event
	// names it (`kubectl describe` matches on it).
	UID types.UID
	// Type ("Normal", "Warning") and Reason, when set, must match.
	Type, Reason string
	// Note, when set, must be part of the Event's note.
	Note string
}

func (w EventOf) matches(e *eventsv1.Event) bool {
	r := e.Regarding
	return r.Kind == w.Kind && r.Name == w.Name && r.Namespace == w.Namespace &&
		(w.UID == "" || r.UID == w.UID) && (w.Type == "" || e.Type == w.Type) &&
		(w.Reason == "" || e.Reason == w.Reason) && strings.Contains(e.Note, w.Note)
}

// Events lists the Events that match w, oldest first.
func (e *Env) Events(ctx context.Context, w EventOf) ([]eventsv1.Event, error) {
	ns := w.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	var list eventsv1.EventList
	if err := e.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for i := range list.Items {
		if w.matches(&list.Items[i]) {
			out = append(out, list.Items[i])
		}
	}
	slices.SortFunc(out, func(a, b eventsv1.Event) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return out, nil
}

// WaitForEvent waits until an Event matches w and returns it. On timeout
// it fails the test naming the Events the object has.
func (e *Env) WaitForEvent(t testing.TB, timeout time.Duration, w EventOf) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	poll.Eventually(t, timeout, func() error {
		got, err := e.Events(context.Background(), w)
		if err != nil {
			return err
		}
		if len(got) > 0 {
			found = got[0]
			return nil
		}
		all, err := e.Events(context.Background(), EventOf{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name})
		if err != nil {
			return err
		}
		seen := make([]string, 0, len(all))
		for _, ev := range all {
			seen = append(seen, fmt.Sprintf("%s %s (uid %s): %s", ev.Type, ev.Reason, ev.Regarding.UID, ev.Note))
		}
		return fmt.Errorf("no %s Event %s on %s %s/%s noting %q; its Events: %q", w.Type, w.Reason, w.Kind, w.Namespace, w.Name, w.Note, seen)
	})
	return found
}
