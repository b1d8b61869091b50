package vpp

import (
	"bufio"
	"context"
	"errors"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// format1Tags reads testdata/format1/tags.tsv: the tags the driver before
// format versions (commit 2711c05) gave the node's interfaces and the three
// af_packet pods of format1Pods, by VPP interface name, and its hostPort
// tags by container ID.
func format1Tags(t *testing.T) (ifs, hostPorts map[string]string) {
	t.Helper()
	f, err := os.Open("testdata/format1/tags.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ifs, hostPorts = map[string]string{}, map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), "\t")
		switch {
		case fields[0] == "interface" && len(fields) == 4 && fields[3] != "":
			ifs[fields[2]] = fields[3]
		case fields[0] == "hostport" && len(fields) == 4:
			hostPorts[fields[1]] = fields[3]
		}
	}
	return ifs, hostPorts
}

// format1Pods are the pods of the fixture: a short ID (plain tag), a
// containerd ID (base64 tag) and a long ID that is not hex (hashed tag).
var format1Pods = []dataplane.Pod{
	podA,
	{PodKey: dataplane.PodKey{ContainerID: "4f1d2c3b5a6978e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6978e0d1c2b3a4f5e", IfName: "eth0"}, Netns: "/run/netns/pod-c", IPv4: netip.MustParseAddr("10.100.0.4")},
	{PodKey: dataplane.PodKey{ContainerID: "pod-with-a-long-id-that-is-not-hex-and-needs-the-hashed-form-0001", IfName: "eth0"}, Netns: "/run/netns/pod-d", IPv4: netip.MustParseAddr("10.100.0.5")},
}

// restart stands for a new vcoild on the same VPP and kernel, with the
// checkpoint's pods.
func (h *harness) restart(t *testing.T, cfg Config, pods []dataplane.Pod) error {
	t.Helper()
	h.d.Close()
	cfg.Allocations = allocations(pods)
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	h.kernel.take()
	h.d = newDriver(cfg, logr.Discard(), h.vpp.dialer(), h.kernel)
	t.Cleanup(h.d.Close)
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return h.d.Init(c)
}

// The upgrade: a VPP that a vcoild before format versions set up, with its
// interfaces tagged in format 1, is adopted by the first sync. Every
// interface is re-tagged in place, and nothing is deleted or made again:
// the pods' interfaces, and their traffic, stay.
func TestAVPPSetUpInFormat1IsReTaggedInPlaceAndItsPodsKept(t *testing.T) {
	cfg := testConfig()
	cfg.PodInterface = AFPacket
	h := start(t, cfg)
	for _, p := range format1Pods {
		if _, err := h.d.SetupPod(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	// What the earlier vcoild left: the same objects with its tags.
	old, _ := format1Tags(t)
	h.vpp.mu.Lock()
	for name, tag := range old {
		i := h.vpp.byName(name)
		if i == nil {
			h.vpp.mu.Unlock()
			t.Fatalf("the fixture's interface %s is not in VPP: the fixture no longer matches this set-up", name)
		}
		i.tag = tag
	}
	h.vpp.mu.Unlock()

	if err := h.restart(t, cfg, format1Pods); err != nil {
		t.Fatalf("Init over a format 1 VPP: %v", err)
	}
	var retags []string
	for _, m := range h.vpp.take() {
		if strings.HasPrefix(m, "sw_interface_tag_add_del") {
			retags = append(retags, m)
		}
		if strings.Contains(m, "delete") || strings.Contains(m, "create") || strings.Contains(m, "add=false") {
			t.Errorf("the adoption changed an object: %s", m)
		}
	}
	want := []string{
		`sw_interface_tag_add_del add=true 1 "vcoil-loopback@2"`,
		`sw_interface_tag_add_del add=true 2 "vcoil-host@2"`,
		`sw_interface_tag_add_del add=true 3 "vcoil@2 c0ffee eth0"`,
		`sw_interface_tag_add_del add=true 4 "vcoil64@2 Tx0sO1ppeODRwrOk9ebXyLmg8eLTxLWml44NHCs6T14 eth0"`,
		`sw_interface_tag_add_del add=true 5 "vcoil#@2 uE53ZBmyjWx_yc3r3mxEQJfPAMLW0gy2"`,
	}
	wantLines(t, "re-tags", retags, want)
	for _, c := range h.kernel.take() {
		for _, change := range []string{"CreatePodVeth", "CreateHostVeth", "DeleteNodeLink", "ConfigurePod", "MoveToPod"} {
			if strings.HasPrefix(c, change) {
				t.Errorf("the adoption changed the kernel: %s", c)
			}
		}
	}
	pods, err := h.d.ListPods(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var keys []dataplane.PodKey
	for _, p := range pods {
		keys = append(keys, p.PodKey)
	}
	wantKeys := []dataplane.PodKey{format1Pods[1].PodKey, podA.PodKey, format1Pods[2].PodKey}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("ListPods = %v, want %v", keys, wantKeys)
	}
	// A second restart finds the current tags and sends no re-tag.
	if err := h.restart(t, cfg, format1Pods); err != nil {
		t.Fatal(err)
	}
	for _, m := range h.vpp.take() {
		if strings.HasPrefix(m, "sw_interface_tag_add_del") {
			t.Errorf("a restart over current tags re-tagged: %s", m)
		}
	}
}

// HostPort mappings an earlier vcoild made with format 1 tags are kept as
// they are (VPP cannot re-tag a static mapping, and making it again would
// cut its connections).
func TestHostPortMappingsOfFormat1AreKept(t *testing.T) {
	cfg := hostPortConfig()
	h := start(t, cfg, func(h *harness) { withAddressedUplink(h.vpp) })
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	_, old := format1Tags(t)
	h.vpp.mu.Lock()
	n := 0
	for _, m := range h.vpp.static {
		m.Tag = old[podHP.ContainerID]
		n++
	}
	h.vpp.mu.Unlock()
	if n == 0 || old[podHP.ContainerID] != "vcoil-hp c0ffee eth0" {
		t.Fatalf("%d mappings, fixture tag %q", n, old[podHP.ContainerID])
	}
	before := h.vpp.statics()
	if err := h.restart(t, cfg, []dataplane.Pod{podHP}); err != nil {
		t.Fatal(err)
	}
	for _, m := range h.vpp.take() {
		if strings.HasPrefix(m, "nat44_add_del_static_mapping") {
			t.Errorf("the adoption changed a hostPort mapping: %s", m)
		}
	}
	wantLines(t, "VPP's static mappings", h.vpp.statics(), before)
}

// A downgrade: VPP holds an interface tagged by a newer vcoild. The sync
// stops before it changes anything, Init fails with an error naming the
// interface and both versions (vcoild then holds), and the interface and
// its tag stay.
func TestAnInterfaceTaggedByANewerVcoildStopsTheSyncBeforeAnyChange(t *testing.T) {
	cfg := testConfig()
	cfg.PodInterface = AFPacket
	h := start(t, cfg)
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	h.vpp.mu.Lock()
	i := h.vpp.byName("host-" + linkName(vethPrefix, podA.PodKey))
	i.tag = "vcoil@3 c0ffee eth0 and more"
	h.vpp.mu.Unlock()

	err := h.restart(t, cfg, nil)
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 3 || ne.Known != formatversion.VPPTag {
		t.Fatalf("Init = %v, want a refusal of format 3", err)
	}
	for _, want := range []string{"VPP interface 3 (host-" + linkName(vethPrefix, podA.PodKey) + ")", `"vcoil@3 c0ffee eth0 and more"`, "format version 3", "this vcoild's 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q lacks %s", err, want)
		}
	}
	for _, m := range h.vpp.take() {
		if !strings.HasSuffix(strings.Fields(m)[0], "_dump") {
			t.Errorf("the refused sync sent %s", m)
		}
	}
	if k := h.kernel.take(); len(k) != 0 {
		t.Errorf("the refused sync changed the kernel: %v", k)
	}
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if i := h.vpp.byName("host-" + linkName(vethPrefix, podA.PodKey)); i == nil || i.tag != "vcoil@3 c0ffee eth0 and more" {
		t.Fatalf("the newer interface changed: %+v", i)
	}
}
