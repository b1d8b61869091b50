package config_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

func podWithPrefixes(ns, name, prefixes string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/router:1"}}},
	}
	if prefixes != "" {
		p.Annotations = map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: prefixes}
	}
	return p
}

// A pod may send from the prefixes of its allowed-source-prefixes annotation
// only when its namespace's grant holds every one of them; the annotation
// never changes after creation.
func TestPodSourcePrefixesNeedTheNamespacesGrant(t *testing.T) {
	e := admissionEnv(t)
	ctx := context.Background()
	// A namespace's own users may create pods, not change Namespaces.
	user := as(t, e, "alice", []string{"system:authenticated"}, nil)
	plain := namespace(t, e, nil)
	granted := namespace(t, e, map[string]string{
		vcoilv2.AnnotationPermittedSourcePrefixes: "10.20.0.0/16, fd00:20::/48",
	})
	for _, ns := range []string{plain, granted} {
		grantPods(t, e, ns, "alice")
	}

	// The policy is in force once this is refused (the apiserver loads
	// policies asynchronously).
	poll.Eventually(t, 30*time.Second, func() error {
		p := podWithPrefixes(plain, "no-grant", "10.20.1.0/24")
		err := user.Create(ctx, p)
		if err == nil {
			if err := e.Client.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
				return poll.Stop(err)
			}
			return errors.New("a pod of a namespace without a grant was admitted with allowed-source-prefixes")
		}
		if !byPolicy(err) {
			return err
		}
		refused(t, "no grant", err, true, "10.20.1.0/24", plain, "not set")
		return nil
	})

	admitted(t, "a pod without the annotation", user.Create(ctx, podWithPrefixes(plain, "plain", "")))
	admitted(t, "a pod with a blank annotation", user.Create(ctx, podWithPrefixes(plain, "blank", " ")))

	for _, tc := range []struct {
		name, prefixes string
		forbidden      bool
		parts          []string
	}{
		{"outside", "10.30.0.0/24", true, []string{"10.30.0.0/24", "10.20.0.0/16, fd00:20::/48"}},
		{"wider", "10.20.0.0/15", true, []string{"10.20.0.0/15"}},
		{"one-outside", "10.20.1.0/24,fd00:30::/64", true, []string{"fd00:30::/64"}},
		{"malformed", "10.20.1.0/24,router", false, []string{`"router"`, "CIDR"}},
		{"host-bits", "10.20.1.7/24", false, []string{`"10.20.1.7/24"`}},
		{"address", "10.20.1.7", false, []string{`"10.20.1.7"`}},
		{"empty", "10.20.1.0/24,", false, []string{`""`}},
		{"ipv4-mapped", "::ffff:10.20.1.0/120", false, []string{`"::ffff:10.20.1.0/120"`}},
		{"everything", "0.0.0.0/0", false, []string{`"0.0.0.0/0"`, "unicast"}},
		{"link-local", "fe80::/64", false, []string{`"fe80::/64"`}},
	} {
		refused(t, tc.name, user.Create(ctx, podWithPrefixes(granted, tc.name, tc.prefixes)), tc.forbidden, tc.parts...)
	}

	inside := podWithPrefixes(granted, "inside", "10.20.1.0/24, fd00:20:0:1::/64,10.20.0.0/16")
	admitted(t, "prefixes inside the grant", user.Create(ctx, inside))

	// Updates: the annotation is immutable, the rest of the pod is not.
	update := func(p *corev1.Pod, mutate func(*corev1.Pod)) error {
		cur := &corev1.Pod{}
		if err := user.Get(ctx, client.ObjectKeyFromObject(p), cur); err != nil {
			t.Fatal(err)
		}
		mutate(cur)
		return user.Update(ctx, cur)
	}
	refused(t, "a changed annotation", update(inside, func(p *corev1.Pod) {
		p.Annotations[vcoilv2.AnnotationAllowedSourcePrefixes] = "10.20.2.0/24"
	}), true, "immutable")
	refused(t, "a removed annotation", update(inside, func(p *corev1.Pod) {
		delete(p.Annotations, vcoilv2.AnnotationAllowedSourcePrefixes)
	}), true, "immutable")
	plainPod := podWithPrefixes(plain, "plain", "")
	refused(t, "an added annotation", update(plainPod, func(p *corev1.Pod) {
		p.Annotations = map[string]string{vcoilv2.AnnotationAllowedSourcePrefixes: "10.20.1.0/24"}
	}), true, "immutable")
	admitted(t, "a label added to a pod with the annotation", update(inside, func(p *corev1.Pod) {
		p.Labels = map[string]string{"role": "router"}
	}))

	// The status subresource takes the pod's metadata too.
	cur := &corev1.Pod{}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(inside), cur); err != nil {
		t.Fatal(err)
	}
	cur.Annotations[vcoilv2.AnnotationAllowedSourcePrefixes] = "10.20.0.0/16"
	refused(t, "a changed annotation through pods/status", e.Client.Status().Update(ctx, cur), true, "immutable")

	// A revoked grant leaves the running pod alone: its status updates (the
	// kubelet's) are admitted.
	nsObj := &corev1.Namespace{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: granted}, nsObj); err != nil {
		t.Fatal(err)
	}
	delete(nsObj.Annotations, vcoilv2.AnnotationPermittedSourcePrefixes)
	if err := e.Client.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Get(ctx, client.ObjectKeyFromObject(inside), cur); err != nil {
		t.Fatal(err)
	}
	cur.Status.Conditions = append(cur.Status.Conditions, corev1.PodCondition{Type: "example.com/ready", Status: corev1.ConditionTrue})
	admitted(t, "a status update after the grant was revoked", e.Client.Status().Update(ctx, cur))
}
