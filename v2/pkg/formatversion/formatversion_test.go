package formatversion

import (
	"errors"
	"testing"
)

func TestTagsCarryTheirVersionAfterTheirKind(t *testing.T) {
	for _, tc := range []struct {
		name, tag, kind, rest string
		version               int
		ok                    bool
	}{
		{"a version 2 tag", "vcoil@2 c0ffee eth0", "vcoil", "c0ffee eth0", 2, true},
		{"a version 1 tag of the same kind", "vcoil c0ffee eth0", "vcoil", "c0ffee eth0", 1, true},
		{"a version 1 tag of one word", "vcoil-loopback", "vcoil-loopback", "", 1, true},
		{"a version 2 tag of one word", "vcoil-loopback@2", "vcoil-loopback", "", 2, true},
		{"a newer tag", "vcoil-svc@17 anything at all", "vcoil-svc", "anything at all", 17, true},
		{"a hashed kind", "vcoil#@2 uE53ZBmyjWx_yc3r3mxEQJfPAMLW0gy2", "vcoil#", "uE53ZBmyjWx_yc3r3mxEQJfPAMLW0gy2", 2, true},
		{"someone else's tag", "calico-vpp pod", "", "", 0, false},
		{"an empty tag", "", "", "", 0, false},
		{"a version that is not a number", "vcoil@x c0ffee eth0", "", "", 0, false},
		{"version 0", "vcoil@0 c0ffee eth0", "", "", 0, false},
		{"a version with a leading zero", "vcoil@02 c0ffee eth0", "", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, v, rest, ok := ParseTag(tc.tag)
			if kind != tc.kind || v != tc.version || rest != tc.rest || ok != tc.ok {
				t.Fatalf("ParseTag(%q) = %q %d %q %v, want %q %d %q %v", tc.tag, kind, v, rest, ok, tc.kind, tc.version, tc.rest, tc.ok)
			}
		})
	}
	if got := Tag("vcoil-hp", "c0ffee", "eth0"); got != "vcoil-hp@2 c0ffee eth0" {
		t.Fatalf("Tag = %q", got)
	}
	if got := Tag("vcoil-host"); got != "vcoil-host@2" {
		t.Fatalf("Tag = %q", got)
	}
}

func FuzzParseTagReadsWhatTagWrites(f *testing.F) {
	f.Add("vcoil", "c0ffee eth0")
	f.Add("vcoil-svc", "default/web affinity=10")
	f.Fuzz(func(t *testing.T, kind, rest string) {
		if len(kind) < 5 || kind[:5] != "vcoil" || containsAny(kind, " @") {
			return
		}
		tag := Tag(kind, rest)
		k, v, r, ok := ParseTag(tag)
		if !ok || k != kind || v != VPPTag || r != rest {
			t.Fatalf("ParseTag(Tag(%q, %q)) = %q %d %q %v", kind, rest, k, v, r, ok)
		}
	})
}

func containsAny(s, chars string) bool {
	for _, c := range s {
		for _, d := range chars {
			if c == d {
				return true
			}
		}
	}
	return false
}

func TestCheckTagRefusesOnlyNewerTagsOfVcoil(t *testing.T) {
	for _, tag := range []string{"vcoil c0ffee eth0", "vcoil@2 c0ffee eth0", "calico@9 x", ""} {
		if err := CheckTag("VPP interface 3", tag); err != nil {
			t.Errorf("CheckTag(%q) = %v", tag, err)
		}
	}
	err := CheckTag("VPP interface 3 (tap3)", "vcoil@3 c0ffee eth0")
	var ne *NewerError
	if !errors.As(err, &ne) || !errors.Is(err, ErrNewer) || ne.Found != 3 || ne.Known != VPPTag ||
		ne.Object != `VPP interface 3 (tap3), tag "vcoil@3 c0ffee eth0",` {
		t.Fatalf("CheckTag of a newer tag = %#v", err)
	}
}
