package vpp

import (
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

func TestPodTagsFitVPPAndGiveTheKeyBack(t *testing.T) {
	containerd := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		name       string
		key        dataplane.PodKey
		wantPrefix string
		wantHashed bool
	}{
		{"a short ID is written as it is", dataplane.PodKey{ContainerID: "c0ffee", IfName: "eth0"}, "vcoil@2 c0ffee eth0", false},
		{"a containerd ID is written in base64", dataplane.PodKey{ContainerID: containerd, IfName: "eth0"}, "vcoil64@2 ", false},
		{"a long ID that is not hex is hashed", dataplane.PodKey{ContainerID: strings.Repeat("x", 70), IfName: "eth0"}, "vcoil#@2 ", true},
		{"a containerd ID with a long interface name is hashed", dataplane.PodKey{ContainerID: containerd, IfName: "net1234567890ab"}, "vcoil#@2 ", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tag := podTag(tc.key)
			if len(tag) > maxTag || !strings.HasPrefix(tag, tc.wantPrefix) {
				t.Fatalf("tag %q (%d bytes): want at most %d bytes starting %q", tag, len(tag), maxTag, tc.wantPrefix)
			}
			got, ok := parsePodTag(tag)
			if !ok || got.hashed != tc.wantHashed || (!tc.wantHashed && got.key != tc.key) {
				t.Fatalf("parsePodTag(%q) = %+v, %v", tag, got, ok)
			}
			if tc.wantHashed && tag != hashedTag(tc.key) {
				t.Fatalf("hashed tag %q is not hashedTag's", tag)
			}
		})
	}
	for _, other := range []string{"", "vcoil-loopback", "vcoil-host@2", "vcoil a", "vcoil@2 a", "calico 1 eth0", "vcoil64 !! eth0",
		"vcoil@3 c0ffee eth0", "vcoil@x c0ffee eth0"} {
		if _, ok := parsePodTag(other); ok {
			t.Errorf("parsePodTag(%q) took it for a pod's", other)
		}
	}
}

func TestLinkNamesAndMACsDependOnTheKeyOnly(t *testing.T) {
	a, b := dataplane.PodKey{ContainerID: "a", IfName: "eth0"}, dataplane.PodKey{ContainerID: "a", IfName: "eth1"}
	if n := linkName(vethPrefix, a); len(n) != 15 || n != linkName(vethPrefix, a) || n == linkName(vethPrefix, b) {
		t.Fatalf("veth name %q", n)
	}
	mac := podMAC(a)
	if mac[0]&0x01 != 0 || mac[0]&0x02 == 0 || mac.String() == podMAC(b).String() {
		t.Fatalf("pod MAC %s: want a locally administered unicast address per key", mac)
	}
	if k, ok := parseVethAlias(vethAlias(a)); !ok || k != a || vethAlias(a) != "vcoil-vpp@2 a eth0" {
		t.Fatalf("alias round trip of %q: %v %v", vethAlias(a), k, ok)
	}
	// The alias of the fixture's format 1 veth, and a newer one.
	if k, ok := parseVethAlias("vcoil-vpp pod-with-a-long-id-that-is-not-hex-and-needs-the-hashed-form-0001 eth0"); !ok ||
		k != (dataplane.PodKey{ContainerID: "pod-with-a-long-id-that-is-not-hex-and-needs-the-hashed-form-0001", IfName: "eth0"}) {
		t.Fatalf("format 1 alias: %v %v", k, ok)
	}
	if _, ok := parseVethAlias("vcoil-vpp@3 a eth0"); ok {
		t.Fatal("a newer alias was read")
	}
}
