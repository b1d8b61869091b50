// Package debpkg reads the list of Debian packages vcoil's Makefile installs
// (hack/debian-packages) and decides, from what dpkg and the archive report,
// which versions satisfy it.
//
// Pins name what the archive keeps: Debian's security and point-release
// updates replace a package's revision (1.0.6-2+deb12u1 becomes
// 1.0.6-2+deb12u2, and the old one is gone), so a pin names an upstream
// version and accepts any Debian revision of it, or a minimum version for
// packages that stable moves to new upstream releases. The package does no
// I/O but through the functions it is given; cmd/ runs dpkg, apt-cache and
// apt-get.
package debpkg

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Kind is how a requirement constrains the version.
type Kind uint8

const (
	// Upstream accepts every version whose upstream part is the wanted one,
	// whatever its epoch and Debian revision.
	Upstream Kind = iota
	// AtLeast accepts the wanted version and every newer one.
	AtLeast
	// Any accepts every version.
	Any
)

// Requirement is one line of the package list.
type Requirement struct {
	// Group says which make target installs the package (test, lab,
	// conformance) or, for rootfs, that debootstrap puts it into the e2e
	// images' root file system.
	Group string
	Name  string
	Kind  Kind
	// Version is the wanted upstream version (Upstream) or the minimum
	// version (AtLeast); empty for Any.
	Version string
	// Suite, when set, restricts the versions that count to those of this
	// suite's release archive (not its -updates or -security archives):
	// debootstrap sees only the release.
	Suite string
}

// Satisfied says whether version v meets the requirement.
func (r Requirement) Satisfied(v string) bool {
	switch r.Kind {
	case Upstream:
		return ParseVersion(v).Upstream == r.Version
	case AtLeast:
		return CompareVersions(v, r.Version) >= 0
	}
	return true
}

// Want says in words what the requirement accepts, for error messages.
func (r Requirement) Want() string {
	var s string
	switch r.Kind {
	case Upstream:
		s = "upstream version " + r.Version + " (any Debian revision)"
	case AtLeast:
		s = "version " + r.Version + " or newer"
	default:
		s = "any version"
	}
	if r.Suite != "" {
		s += " from the " + r.Suite + " release archive"
	}
	return s
}

// Parse reads a package list: one requirement a line, as
//
//	GROUP PACKAGE WANT [from=SUITE]
//
// where WANT is =UPSTREAM, >=VERSION or *. Blank lines and lines starting
// with # are skipped. A package may appear once per group.
func Parse(r io.Reader) ([]Requirement, error) {
	var reqs []Requirement
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		req, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, line, err)
		}
		key := req.Group + " " + req.Name
		if seen[key] {
			return nil, fmt.Errorf("line %d: package %s is listed twice in group %s", n, req.Name, req.Group)
		}
		seen[key] = true
		reqs = append(reqs, req)
	}
	return reqs, sc.Err()
}

func parseLine(line string) (Requirement, error) {
	f := strings.Fields(line)
	if len(f) < 3 || len(f) > 4 {
		return Requirement{}, fmt.Errorf("want GROUP PACKAGE WANT [from=SUITE], got %d fields", len(f))
	}
	req := Requirement{Group: f[0], Name: f[1]}
	switch want := f[2]; {
	case want == "*":
		req.Kind = Any
	case strings.HasPrefix(want, ">="):
		req.Kind, req.Version = AtLeast, want[2:]
	case strings.HasPrefix(want, "="):
		req.Kind, req.Version = Upstream, want[1:]
		if strings.Contains(req.Version, ":") {
			return Requirement{}, fmt.Errorf("%s: name the upstream version without its epoch", want)
		}
	default:
		return Requirement{}, fmt.Errorf("version %q: want =UPSTREAM, >=VERSION or *", want)
	}
	if req.Kind != Any && req.Version == "" {
		return Requirement{}, fmt.Errorf("version %q names no version", f[2])
	}
	if len(f) == 4 {
		suite, ok := strings.CutPrefix(f[3], "from=")
		if !ok || suite == "" {
			return Requirement{}, fmt.Errorf("%q: want from=SUITE", f[3])
		}
		req.Suite = suite
	}
	return req, nil
}

// InGroups returns the requirements of the named groups, all of them when
// groups is empty.
func InGroups(reqs []Requirement, groups ...string) []Requirement {
	if len(groups) == 0 {
		return reqs
	}
	var out []Requirement
	for _, r := range reqs {
		for _, g := range groups {
			if r.Group == g {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
