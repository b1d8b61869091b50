package agent_test

import (
	"cmp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/egress/agent"
	"github.com/vcoil/vcoil/v2/pkg/egress/routerwatch"
)

// FuzzReferences feeds the parser of the egress.vcoil.io/<namespace>
// annotations any keys and values. References must never panic, must
// return every Egress named (trimmed, not empty) once and in order, and
// nothing else; and the Egress's routers, which read the same annotation
// through routerwatch.Names from the pod as their cache trims it, must take
// the pod for a client of exactly the Egresses the pod's own vcoild sets up.
func FuzzReferences(f *testing.F) {
	for _, s := range [][4]string{
		// TestReferencesParsesTheAnnotations: spaces, empty items and
		// repeats, an empty namespace, another prefix.
		{"internet", " nat , proxy,,nat", "other", "a"},
		{"", "ignored", "internet", "nat"},
		{"internet", "nat", "vcoil.io/pool", "ignored"},
		// Empty values, separators only, whitespace of every kind.
		{"internet", "", "internet ", ","},
		{"internet", " , ,\t,\n", "x", "\u00a0nat\u00a0"},
		// Names and namespaces with spaces, slashes, upper case, dots, and
		// bytes that are not UTF-8.
		{"a b", "n a t", "a/b", "c/d,e"},
		{"Internet", "NAT", "x.y", "..,."},
		{"\xff", "\xfe,nat", "internet/extra", "nat"},
		// A very long list.
		{"internet", strings.Repeat("nat,", 300), "y", strings.Repeat(" ", 100)},
	} {
		f.Add(s[0], s[1], s[2], s[3], "nat")
	}
	f.Fuzz(func(t *testing.T, ns1, v1, ns2, v2, probe string) {
		annotations := map[string]string{
			vcoilv2.AnnotationEgressPrefix + ns1: v1,
			vcoilv2.AnnotationEgressPrefix + ns2: v2,
			// Not an egress annotation, whatever its value.
			"vcoil.io/pool": v1,
			ns1:             v2,
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "client", Name: "p", Annotations: annotations}}
		refs := agent.References(pod)

		if !slices.IsSortedFunc(refs, compareRefs) || len(slices.CompactFunc(slices.Clone(refs), func(a, b types.NamespacedName) bool { return a == b })) != len(refs) {
			t.Fatalf("References = %q: not sorted or not unique", refs)
		}
		want := map[types.NamespacedName]bool{}
		for k, v := range annotations {
			ns, ok := strings.CutPrefix(k, vcoilv2.AnnotationEgressPrefix)
			if !ok || ns == "" {
				continue
			}
			for _, n := range strings.Split(v, ",") {
				if n = strings.TrimSpace(n); n != "" {
					want[types.NamespacedName{Namespace: ns, Name: n}] = true
				}
			}
		}
		for _, r := range refs {
			if !want[r] || r.Name != strings.TrimSpace(r.Name) || strings.Contains(r.Name, ",") {
				t.Fatalf("References = %q names %q, which the annotations %q do not", refs, r, annotations)
			}
		}
		if len(refs) != len(want) {
			t.Fatalf("References = %q, want the %d Egresses of %q", refs, len(want), annotations)
		}

		// The routers of an Egress of namespace ns read the pod trimmed to
		// that namespace's annotation, and agree with the client side.
		for _, ns := range []string{ns1, ns2} {
			if ns == "" {
				continue
			}
			trimmed, err := routerwatch.TrimPod(ns)(pod.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			value := trimmed.(*corev1.Pod).Annotations[vcoilv2.AnnotationEgressPrefix+ns]
			names := []string{probe}
			for _, r := range refs {
				names = append(names, r.Name)
			}
			for _, n := range names {
				if n == "" {
					continue // no Egress has an empty name
				}
				client := slices.Contains(refs, types.NamespacedName{Namespace: ns, Name: n})
				if routed := routerwatch.Names(value, n); routed != client {
					t.Fatalf("Egress %s/%s: the pod's vcoild takes it for a client (%v), its routers (%v) do not agree; annotations %q",
						ns, n, client, routed, annotations)
				}
			}
		}
	})
}

func compareRefs(a, b types.NamespacedName) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}
