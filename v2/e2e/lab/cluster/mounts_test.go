package cluster

import (
	"strings"
	"testing"
)

func TestParseMountinfoReadsTargetsTypesAndSources(t *testing.T) {
	in := `22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
98 22 0:5 /run/netns /run/netns rw shared:50 - ext4 /dev/vda rw
120 98 0:4 net:[4026532290] /run/netns/vcoil-lab-cp rw shared:50 - nsfs nsfs rw
130 22 0:60 / /var/lib/vcoil\040lab/x rw - tmpfs vcoil-lab-run rw,size=524288k
`
	ms, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []mountPoint{
		{"/", "ext4", "/dev/vda"},
		{"/run/netns", "ext4", "/dev/vda"},
		{"/run/netns/vcoil-lab-cp", "nsfs", "nsfs"},
		{"/var/lib/vcoil lab/x", "tmpfs", "vcoil-lab-run"},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %v", ms)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, ms[i], want[i])
		}
	}
}

func TestIsUnderMatchesWholePathComponents(t *testing.T) {
	for _, c := range []struct {
		path, dir string
		want      bool
	}{
		{"/var/lib/vcoil-lab", "/var/lib/vcoil-lab", true},
		{"/var/lib/vcoil-lab/mntns/node1", "/var/lib/vcoil-lab", true},
		{"/var/lib/vcoil-lab/mntns", "/var/lib/vcoil-lab/", true},
		{"/var/lib/vcoil-lab2", "/var/lib/vcoil-lab", false},
		{"/var/lib/vcoil", "/var/lib/vcoil-lab", false},
	} {
		if got := isUnder(c.path, c.dir); got != c.want {
			t.Errorf("isUnder(%q, %q) = %v", c.path, c.dir, got)
		}
	}
}
