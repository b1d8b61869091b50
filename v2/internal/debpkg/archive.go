package debpkg

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Candidate is one version of a package that an archive offers, as
// `apt-cache madison` lists it.
type Candidate struct {
	Version string
	// Suite is the archive's suite and component, e.g. "bookworm/main" or
	// "bookworm-security/main".
	Suite string
}

// ParseMadison reads the output of `apt-cache madison NAME`: lines of
// "name | version | URI suite/component arch Packages". Lines of other
// packages (madison also lists source packages of that name) are skipped.
func ParseMadison(name, out string) []Candidate {
	var cs []Candidate
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 || strings.TrimSpace(f[0]) != name {
			continue
		}
		src := strings.Fields(f[2])
		if len(src) < 2 || !slices.Contains(src, "Packages") {
			continue
		}
		cs = append(cs, Candidate{Version: strings.TrimSpace(f[1]), Suite: src[1]})
	}
	return cs
}

// inSuite says whether c comes from the release archive of suite: bookworm
// matches "bookworm/main" but not "bookworm-updates/main".
func (c Candidate) inSuite(suite string) bool {
	s, _, _ := strings.Cut(c.Suite, "/")
	return s == suite
}

// Pick returns the newest candidate that satisfies r, or false when none
// does.
func Pick(r Requirement, cs []Candidate) (string, bool) {
	best := ""
	for _, c := range cs {
		if r.Suite != "" && !c.inSuite(r.Suite) {
			continue
		}
		if r.Satisfied(c.Version) && (best == "" || CompareVersions(c.Version, best) > 0) {
			best = c.Version
		}
	}
	return best, best != ""
}

// ErrNotInArchive is wrapped by the errors of requirements the archive
// cannot satisfy.
var ErrNotInArchive = errors.New("the archive has no matching version")

// NotInArchive describes a requirement that no candidate satisfies, naming
// the package, the wanted version and what the archive has.
func NotInArchive(r Requirement, cs []Candidate) error {
	have := make([]string, 0, len(cs))
	for _, c := range cs {
		have = append(have, c.Version+" ("+c.Suite+")")
	}
	found := "nothing"
	if len(have) > 0 {
		found = strings.Join(have, ", ")
	}
	return fmt.Errorf("package %s: wanted %s, found in the archive: %s: %w", r.Name, r.Want(), found, ErrNotInArchive)
}

// CheckArchive asks the archive, through madison, for a version of each
// requirement and returns one error per requirement it cannot satisfy (or
// whose look-up failed).
func CheckArchive(reqs []Requirement, madison func(name string) ([]Candidate, error)) error {
	var errs []error
	for _, r := range reqs {
		cs, err := madison(r.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("package %s: ask the archive: %w", r.Name, err))
			continue
		}
		if _, ok := Pick(r, cs); !ok {
			errs = append(errs, NotInArchive(r, cs))
		}
	}
	return errors.Join(errs...)
}
