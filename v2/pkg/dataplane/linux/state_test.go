package linux_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// The node state's pod interfaces are the pods' node-side veths with the
// ifindex the kernel reports, and nothing else.
func TestPodInterfacesAreTheNodeSideVeths(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	a, _ := l.addPod("a", "198.19.0.5", "2001:db8:19::5")
	b, _ := l.addPod("b", "198.19.0.6", "")
	l.node.IP("link", "add", "decoy", "alias", "vcoil c-a eth0", "type", "veth", "peer", "name", "x1")

	lister, ok := l.dp.(interface {
		PodInterfaces(context.Context) (map[dataplane.PodKey]nodestate.Interface, error)
	})
	if !ok {
		t.Fatal("the Linux dataplane lists no pod interfaces")
	}
	got, err := lister.PodInterfaces(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[dataplane.PodKey]nodestate.Interface{}
	for _, p := range []dataplane.Pod{a, b} {
		name := linux.HostIfName(p.PodKey)
		var link []struct {
			Ifindex uint32 `json:"ifindex"`
		}
		if err := json.Unmarshal([]byte(l.node.IP("-j", "link", "show", name)), &link); err != nil || len(link) != 1 {
			t.Fatalf("node veth %s: %v", name, err)
		}
		want[p.PodKey] = nodestate.Interface{Kind: "veth", Name: name, Index: link[0].Ifindex}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PodInterfaces:\n got %+v\nwant %+v", got, want)
	}
}
