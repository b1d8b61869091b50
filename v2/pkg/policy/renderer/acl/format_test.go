package acl

import (
	"bufio"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// format1Tags reads testdata/format1/tags.tsv: the tags the renderer
// before format versions (commit 2711c05) gave its ACLs, by table ID
// ("reflect" for the reflective ACL).
func format1Tags(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("testdata/format1/tags.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), "\t")
		switch {
		case fields[0] == "table" && len(fields) == 3:
			out[fields[1]] = fields[2]
		case fields[0] == "reflect" && len(fields) == 2:
			out["reflect"] = fields[1]
		}
	}
	return out
}

// retag gives every ACL of the fake VPP the tag tag(old tag).
func (f *fakeVPP) retag(tag func(string) string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.acls {
		a.Tag = tag(a.Tag)
	}
}

// The upgrade: VPP holds the ACLs of a vcoild before format versions,
// with its tags. A new renderer adopts them all (nothing created, replaced
// or deleted: the sessions stay) and sets the lists with them.
func TestACLsOfFormat1AreAdoptedByANewRenderer(t *testing.T) {
	f := newFakeVPP(t)
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}}
	if err := newRenderer(t, f).Render(ctx(t), txn); err != nil {
		t.Fatal(err)
	}
	old := format1Tags(t)
	f.retag(func(tag string) string {
		id := strings.TrimPrefix(tag, "vcoil-pol@2 ")
		if old[id] == "" {
			t.Fatalf("no format 1 tag of %q in the fixture", id)
		}
		return old[id]
	})
	before, _ := f.state()
	f.take()
	if err := newRenderer(t, f).Render(ctx(t), txn); err != nil {
		t.Fatalf("Render over format 1 ACLs: %v", err)
	}
	for _, m := range f.take() {
		if strings.HasPrefix(m, "acl_add_replace") || strings.HasPrefix(m, "acl_del") {
			t.Errorf("the adoption changed an ACL: %s", m)
		}
	}
	after, lists := f.state()
	wantLines(t, "VPP's ACLs", after, before)
	wantLines(t, "the interfaces' lists", lists, []string{"10.1.0.3 in=[1] out=[0]"})
}

// A downgrade: an ACL tagged by a newer vcoild stops the sync before any
// ACL is created or deleted, with an error naming it and both versions.
func TestAnACLOfANewerFormatStopsTheSyncBeforeAnyChange(t *testing.T) {
	f := newFakeVPP(t)
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(podA, ipA), isolated()}}
	if err := newRenderer(t, f).Render(ctx(t), txn); err != nil {
		t.Fatal(err)
	}
	f.retag(func(tag string) string { return strings.Replace(tag, "@2", "@3", 1) })
	before, _ := f.state()
	f.take()
	err := newRenderer(t, f).Render(ctx(t), renderer.Txn{Resync: true})
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 3 || ne.Known != formatversion.VPPTag || !strings.Contains(err.Error(), `VPP ACL 0, tag "vcoil-pol@3 local-1"`) {
		t.Fatalf("Render = %v, want a refusal naming ACL 0", err)
	}
	for _, m := range f.take() {
		if strings.HasPrefix(m, "acl_add_replace") || strings.HasPrefix(m, "acl_del") || strings.HasPrefix(m, "set_acl_lists") {
			t.Errorf("the refused sync sent %s", m)
		}
	}
	after, _ := f.state()
	wantLines(t, "VPP's ACLs", after, before)
}
