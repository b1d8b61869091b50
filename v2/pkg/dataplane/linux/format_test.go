package linux_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// A node whose veths an earlier vcoild aliased in format 1 ("vcoil <ID>
// <ifname>") gives its pods back to a restarted vcoild; a veth aliased by a
// newer vcoild stops ListPods (the daemon's recovery then holds), naming
// the link, and changes nothing.
func TestListPodsReadsFormat1AliasesAndRefusesNewerOnes(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	a, _ := l.addPod("a", "198.19.0.5", "2001:db8:19::5")
	b, _ := l.addPod("b", "198.19.0.6", "")
	for _, p := range []dataplane.Pod{a, b} {
		l.node.IP("link", "set", linux.HostIfName(p.PodKey), "alias", "vcoil "+p.ContainerID+" "+p.IfName)
	}
	restarted := l.newDataplane(linux.Config{})
	got, err := restarted.ListPods(t.Context())
	if err != nil {
		t.Fatalf("ListPods over format 1 aliases: %v", err)
	}
	var want []dataplane.Pod
	for _, p := range []dataplane.Pod{a, b} {
		p.Netns = ""
		want = append(want, p)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("ListPods:\n got %+v\nwant %+v", got, want)
	}

	host := linux.HostIfName(b.PodKey)
	l.node.IP("link", "set", host, "alias", "vcoil@3 "+b.ContainerID+" "+b.IfName+" more")
	before := l.node.IP("-d", "link", "show") + l.node.IP("route", "show", "table", "all")
	_, err = restarted.ListPods(t.Context())
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 3 || !strings.Contains(err.Error(), "link "+host) {
		t.Fatalf("ListPods = %v, want a refusal naming link %s", err, host)
	}
	if after := l.node.IP("-d", "link", "show") + l.node.IP("route", "show", "table", "all"); after != before {
		t.Errorf("the refused ListPods changed the node:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
