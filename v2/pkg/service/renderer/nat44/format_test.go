package nat44

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/api"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// format1Tags reads testdata/format1/tags.tsv: the mapping tags the
// renderer before format versions (commit 2711c05) wrote, by "ns/name
// affinity", and its source-ranges ACL's tag.
func format1Tags(t *testing.T) (mappings map[string]string, aclTag string) {
	t.Helper()
	f, err := os.Open("testdata/format1/tags.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mappings = map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), "\t")
		switch {
		case fields[0] == "mapping" && len(fields) == 4:
			mappings[fields[1]+" "+fields[2]] = fields[3]
		case fields[0] == "acl" && len(fields) == 2:
			aclTag = fields[1]
		}
	}
	return mappings, aclTag
}

func TestFormat1TagsReadAsTheTagsWrittenNow(t *testing.T) {
	old, _ := format1Tags(t)
	if len(old) != 3 {
		t.Fatalf("fixture: %d mapping tags", len(old))
	}
	for key, tag := range old {
		idText, aff, _ := strings.Cut(key, " ")
		ns, name, _ := strings.Cut(idText, "/")
		affinity, err := strconv.Atoi(aff)
		if err != nil {
			t.Fatal(err)
		}
		want := mappingTag(service.ID{Namespace: ns, Name: name}, uint32(affinity))
		if got := currentTag(tag); got != want || !isOurTag(tag) {
			t.Errorf("currentTag(%q) = %q (ours %v), want %q", tag, got, isOurTag(tag), want)
		}
		if tagAffinity(tag) != uint32(affinity) {
			t.Errorf("tagAffinity(%q) = %d", tag, tagAffinity(tag))
		}
	}
	for _, tag := range []string{"vcoil-hp c0ffee eth0", "vcoil-svc-source-ranges", "someone else", "vcoil-svcx a/b"} {
		if isOurTag(tag) {
			t.Errorf("isOurTag(%q)", tag)
		}
	}
}

// sticky is default/web with ClientIP affinity and two backends.
func sticky() *service.Service {
	s := svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))
	s.AffinityTimeout = 3 * time.Hour
	return s
}

// The upgrade: VPP holds the mappings the renderer before format versions
// made, with its tags. A new renderer keeps them (no delete, no add: the
// sessions and affinity records stay) and later changes write the current
// tags.
func TestMappingsOfFormat1AreKeptByANewRenderer(t *testing.T) {
	h := newHarness(t, Config{})
	h.resync(t, state(sticky()))
	old, _ := format1Tags(t)
	oldTag := old["default/web 10800"]
	for _, m := range h.vpp.lb {
		m.Tag = oldTag
	}
	h.vpp.take()
	r2, err := New(h.dp, h.r.cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Resync(ctx(), state(sticky())); err != nil {
		t.Fatalf("Resync over format 1 mappings: %v", err)
	}
	expectRequests(t, h.vpp.take(), join(fullSyncStart(false), fullSyncEnd()))
	for _, m := range h.vpp.lb {
		if m.Tag != oldTag {
			t.Fatalf("the kept mapping's tag is %q", m.Tag)
		}
	}
	// Affinity switched off: the mapping is made again, in the current
	// format.
	if err := r2.Update(ctx(), &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))}}); err != nil {
		t.Fatal(err)
	}
	expectRequests(t, h.vpp.take(), []api.Message{
		lbDel("10.96.0.10", tcp, 80, self),
		lbAdd("10.96.0.10", tcp, 80, self, 0, "vcoil-svc@2 default/web", lbLocal("10.1.0.2", 8080, 2), lbLocal("10.1.0.3", 8080, 2)),
	})
}

// A downgrade: a mapping tagged by a newer vcoild stops the Resync before
// it changes anything, with an error naming the mapping and both versions.
func TestAMappingOfANewerFormatStopsTheResyncBeforeAnyChange(t *testing.T) {
	h := newHarness(t, Config{})
	h.resync(t, state(sticky()))
	for _, m := range h.vpp.lb {
		m.Tag = "vcoil-svc@3 default/web with things of version 3"
	}
	h.vpp.take()
	h.dp.take()
	r2, err := New(h.dp, h.r.cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	err = r2.Resync(ctx(), state())
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 3 || ne.Known != formatversion.VPPTag {
		t.Fatalf("Resync = %v, want a refusal of format 3", err)
	}
	for _, want := range []string{"VPP load-balancing static mapping tcp/10.96.0.10:80", `"vcoil-svc@3 default/web with things of version 3"`, "format version 3", "this vcoild's 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q lacks %s", err, want)
		}
	}
	for _, m := range h.vpp.take() {
		if !strings.HasSuffix(m.GetMessageName(), "_dump") && m.GetMessageName() != "nat44_forwarding_enable_disable" {
			t.Errorf("the refused Resync sent %s", m.GetMessageName())
		}
	}
	if len(h.vpp.lb) != 1 {
		t.Fatalf("VPP holds %d LB mappings, want the newer one kept", len(h.vpp.lb))
	}
	for _, m := range h.vpp.lb {
		if m.Tag != "vcoil-svc@3 default/web with things of version 3" {
			t.Fatalf("the newer mapping changed: %+v", m)
		}
	}
}

// The source-ranges ACL: one an earlier vcoild tagged in format 1 is
// adopted by a new renderer (its rules are the ones wanted: nothing is
// written, and the interfaces keep it); one of a newer format is refused
// and kept.
func TestTheSourceRangesACLOfFormat1IsAdoptedAndANewerOneRefused(t *testing.T) {
	_, oldTag := format1Tags(t)
	if oldTag != "vcoil-svc-source-ranges" {
		t.Fatalf("fixture ACL tag %q", oldTag)
	}
	ranged := svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))
	ranged.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7")}
	ranged.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	for _, tc := range []struct {
		name, tag string
		newer     bool
	}{{"format 1", oldTag, false}, {"a newer format", "vcoil-svc-source-ranges@3", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.resync(t, state(ranged))
			if len(h.vpp.acls) != 1 {
				t.Fatalf("VPP holds %d ACLs", len(h.vpp.acls))
			}
			var index uint32
			for i, a := range h.vpp.acls {
				index = i
				a.Tag = tc.tag
			}
			h.vpp.take()
			h.dp.take()
			r2, err := New(h.dp, h.r.cfg, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			err = r2.Resync(ctx(), state(ranged))
			sent := h.vpp.take()
			if !tc.newer {
				if err != nil {
					t.Fatal(err)
				}
				expectRequests(t, sent, join(fullSyncStart(false), fullSyncEnd()))
				checkCalls(t, h.dp.take()[4:], []string{fmt.Sprintf("SetInterfaceACLs 1 uplink 2 [%d]", index), fmt.Sprintf("SetInterfaceACLs 1 host 2 [%d]", index)})
				return
			}
			var ne *formatversion.NewerError
			if !errors.As(err, &ne) || ne.Found != 3 || !strings.Contains(err.Error(), fmt.Sprintf("VPP ACL %d", index)) {
				t.Fatalf("Resync = %v, want a refusal of ACL %d's format 3", err, index)
			}
			expectRequests(t, sent, join(fullSyncStart(false), fullSyncEnd()))
			if a := h.vpp.acls[index]; a == nil || a.Tag != tc.tag {
				t.Fatalf("the newer ACL changed: %+v", a)
			}
		})
	}
}
