package debpkg_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/debpkg"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
)

func TestCompareVersionsOrdersAsDebianPolicySays(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.0.6-2+deb12u2", "1.0.6-2+deb12u2", 0},
		{"1.0.6-2+deb12u1", "1.0.6-2+deb12u2", -1},
		{"1.0.6-2", "1.0.6-2+deb12u1", -1},
		{"1:1.0", "2.0", 1},
		{"3:20221126-1+deb12u1", "20221126-1+deb12u1", 1},
		{"1.0~rc1", "1.0", -1},
		{"1.0~rc1", "1.0~rc2", -1},
		{"1.0~", "1.0", -1},
		{"1.0a", "1.0", 1},
		{"1.0a", "1.0+", -1},
		{"1.0.10", "1.0.9", 1},
		{"1.0.010", "1.0.10", 0},
		{"1.6.20~ds1-1+deb12u3", "1.6.20~ds1-1+deb12u2", 1},
		{"1.0.128+nmu2+deb12u2", "1.0.128", 1},
		{"9.18.49-1~deb12u1", "9.18.49-1", -1},
	} {
		if got := debpkg.CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := debpkg.CompareVersions(tc.b, tc.a); got != -tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
}

// dpkg is the reference: random versions made of the characters that
// matter (digits, letters, ~, +, ., -, :) compare as dpkg compares them.
func TestCompareVersionsAgreesWithDpkg(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Skip("dpkg is not installed: nothing to compare with")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	part := func() string {
		const chars = "0123456789ab~+."
		n := 1 + rng.IntN(5)
		b := []byte{"0123456789"[rng.IntN(10)]} // dpkg wants upstream to start with a digit
		for range n {
			b = append(b, chars[rng.IntN(len(chars))])
		}
		return string(b)
	}
	version := func() string {
		v := part()
		if rng.IntN(3) == 0 {
			v += "-" + part()
		}
		if rng.IntN(5) == 0 {
			v = "1:" + v
		}
		return v
	}
	for range 300 {
		a, b := version(), version()
		want := 0
		for _, c := range []struct {
			op string
			r  int
		}{{"lt", -1}, {"gt", 1}} {
			if exec.Command(dpkg, "--compare-versions", a, c.op, b).Run() == nil {
				want = c.r
			}
		}
		if got := debpkg.CompareVersions(a, b); got != want {
			t.Errorf("CompareVersions(%q, %q) = %d, dpkg says %d", a, b, got, want)
		}
	}
}

func TestParseReadsEveryKindOfRequirement(t *testing.T) {
	reqs, err := debpkg.Parse(strings.NewReader(`
# comment
test  nftables     =1.0.6
conformance debootstrap >=1.0.128
rootfs bash * from=bookworm
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []debpkg.Requirement{
		{Group: "test", Name: "nftables", Kind: debpkg.Upstream, Version: "1.0.6"},
		{Group: "conformance", Name: "debootstrap", Kind: debpkg.AtLeast, Version: "1.0.128"},
		{Group: "rootfs", Name: "bash", Kind: debpkg.Any, Suite: "bookworm"},
	}
	if len(reqs) != len(want) {
		t.Fatalf("got %+v, want %+v", reqs, want)
	}
	for i := range want {
		if reqs[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, reqs[i], want[i])
		}
	}
	if got := debpkg.InGroups(reqs, "rootfs", "test"); len(got) != 2 || got[0].Name != "nftables" || got[1].Name != "bash" {
		t.Errorf("InGroups(rootfs, test) = %+v", got)
	}
}

func TestParseRejectsBadLinesNamingThem(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"test nftables", "got 2 fields"},
		{"test nftables 1.0.6", `version "1.0.6"`},
		{"test nftables =", "names no version"},
		{"test iputils-ping =3:20221126", "without its epoch"},
		{"rootfs bash * bookworm", "want from=SUITE"},
		{"test nft =1\ntest nft =2", "listed twice"},
	} {
		_, err := debpkg.Parse(strings.NewReader(tc.line))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.line, err, tc.want)
		}
	}
}

func TestRequirementsAcceptWhatTheyName(t *testing.T) {
	up := debpkg.Requirement{Name: "iputils-ping", Kind: debpkg.Upstream, Version: "20221126"}
	least := debpkg.Requirement{Name: "debootstrap", Kind: debpkg.AtLeast, Version: "1.0.128"}
	for _, tc := range []struct {
		r       debpkg.Requirement
		version string
		want    bool
	}{
		{up, "3:20221126-1+deb12u1", true},
		{up, "3:20221126-1+deb12u2", true},
		{up, "3:20240905-1", false},
		{least, "1.0.128+nmu2+deb12u2", true},
		{least, "1.0.134", true},
		{least, "1.0.127", false},
		{debpkg.Requirement{Kind: debpkg.Any}, "0.1", true},
	} {
		if got := tc.r.Satisfied(tc.version); got != tc.want {
			t.Errorf("%s (%s) with %s: got %v, want %v", tc.r.Name, tc.r.Want(), tc.version, got, tc.want)
		}
	}
}

const madisonContainerd = `containerd | 1.6.20~ds1-1+deb12u3 | http://deb.debian.org/debian bookworm/main amd64 Packages
containerd | 1.6.20~ds1-1+deb12u2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
containerd | 1.6.20~ds1-1 | http://deb.debian.org/debian bookworm/main Sources
`

func TestPickTakesTheNewestMatchingRevision(t *testing.T) {
	cs := debpkg.ParseMadison("containerd", madisonContainerd)
	if len(cs) != 2 || cs[1].Suite != "bookworm-security/main" {
		t.Fatalf("ParseMadison = %+v, want the two binary package lines", cs)
	}
	r := debpkg.Requirement{Name: "containerd", Kind: debpkg.Upstream, Version: "1.6.20~ds1"}
	if v, ok := debpkg.Pick(r, cs); !ok || v != "1.6.20~ds1-1+deb12u3" {
		t.Errorf("Pick = %q, %v; want the newest revision 1.6.20~ds1-1+deb12u3", v, ok)
	}
	r.Suite = "bookworm"
	if v, ok := debpkg.Pick(r, cs[1:]); ok {
		t.Errorf("Pick from the security archive only, for a release-only requirement = %q, want none", v)
	}
}

func TestCheckArchiveNamesEveryStalePin(t *testing.T) {
	reqs := []debpkg.Requirement{
		{Name: "containerd", Kind: debpkg.Upstream, Version: "1.6.20~ds1"},
		{Name: "containerd", Kind: debpkg.Upstream, Version: "1.7.0"},
		{Name: "gone", Kind: debpkg.Any},
	}
	err := debpkg.CheckArchive(reqs, func(name string) ([]debpkg.Candidate, error) {
		if name == "containerd" {
			return debpkg.ParseMadison(name, madisonContainerd), nil
		}
		return nil, nil
	})
	if !errors.Is(err, debpkg.ErrNotInArchive) {
		t.Fatalf("CheckArchive = %v, want ErrNotInArchive", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"package containerd: wanted upstream version 1.7.0 (any Debian revision), found in the archive: 1.6.20~ds1-1+deb12u3 (bookworm/main), 1.6.20~ds1-1+deb12u2 (bookworm-security/main)",
		"package gone: wanted any version, found in the archive: nothing",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	if strings.Count(msg, "package ") != 2 {
		t.Errorf("error %q should name exactly the two stale pins", msg)
	}
}

// The command against this machine's archive: a wrong pin fails naming the
// package; the project's own list passes (make check-debian-pins runs it
// after apt-get update).
func TestCommandFailsOnAWrongPin(t *testing.T) {
	if _, err := exec.LookPath("apt-cache"); err != nil {
		t.Skip("apt-cache is not installed: no archive to ask")
	}
	// The lists are stored plain or compressed (_Packages.lz4).
	if lists, _ := filepath.Glob("/var/lib/apt/lists/*_Packages*"); len(lists) == 0 {
		t.Skip("apt has no package lists (run apt-get update): no archive to ask")
	}
	list := filepath.Join(t.TempDir(), "packages")
	if err := os.WriteFile(list, []byte("test nftables =0.9.0-stale\ntest iptables =1.8.9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobuild.Program(t, "github.com/vcoil/vcoil/v2/internal/debpkg/cmd"), "check-archive", "--list", list).CombinedOutput()
	if err == nil {
		t.Fatalf("check-archive with a wrong pin succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "package nftables: wanted upstream version 0.9.0-stale") || strings.Contains(string(out), "package iptables") {
		t.Errorf("check-archive should name nftables, and only it:\n%s", out)
	}
}
