// Package formatversion holds the format versions of everything vcoild keeps
// outside its memory (checkpoint files, nftables tables, VPP object tags)
// and the rule by which it treats them: a vcoild adopts what it or the
// previous format wrote, and refuses what a newer vcoild wrote, naming the
// object and both versions and changing nothing, rather than destroying
// state it cannot read. docs/operations.md ("Formats and upgrades") lists
// every artifact.
//
// It does not read or write any artifact: each owner marks and checks its
// own, with the helpers here (nftables tables: package nft's format set).
package formatversion

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The current version of each artifact. A version is raised when a vcoild
// of the previous one could misread what this one writes; the previous
// version is then adopted by the code that reads the artifact.
const (
	// Checkpoint is the version of the checkpoint files (the "format"
	// field; files without it are version 1).
	Checkpoint = 2
	// ServiceTable is the version of the service renderer's nftables
	// table (its format set; a table without one is version 1).
	ServiceTable = 2
	// PolicyTable is the version of the policy renderer's nftables table,
	// which has carried a format set since its first version.
	PolicyTable = 1
	// SourceTable is the version of the Linux dataplane's source
	// validation table (package sourceguard), which has carried a format
	// set since its first version.
	SourceTable = 1
	// KernelTable is the version of the small tables that are replaced
	// whole at every sync: the VPP dataplane's service network and
	// hostPort tables, and the egress tables of routers and clients.
	KernelTable = 2
	// VPPTag is the version of the tags vcoil gives VPP objects
	// (interfaces, NAT mappings, ACLs) and of the aliases of its pods'
	// kernel veths, which share their syntax. Version 1 tags carry no
	// version.
	VPPTag = 2
	// CnatTranslations is the version of the cnat service renderer's
	// translations in VPP, which carry no tag: it is the port of the
	// renderer's marker translation (package cnat).
	CnatTranslations = 1
)

// ErrNewer is what every refusal of a newer format matches (errors.Is).
var ErrNewer = errors.New("format newer than this vcoild's")

// NewerError refuses an artifact of a newer format.
type NewerError struct {
	// Object names the artifact: a file's path, a table, a tag.
	Object string
	// Found is the artifact's version, Known this vcoild's.
	Found, Known int
}

func (e *NewerError) Error() string {
	return fmt.Sprintf("%s has format version %d, newer than this vcoild's %d: left unchanged; run a vcoild that knows format %d (a newer release), or remove the object by hand if it is no longer wanted",
		e.Object, e.Found, e.Known, e.Found)
}

// Is makes errors.Is(err, ErrNewer) true.
func (e *NewerError) Is(target error) bool { return target == ErrNewer }

// Check refuses found when it is newer than known.
func Check(object string, found, known int) error {
	if found > known {
		return &NewerError{Object: object, Found: found, Known: known}
	}
	return nil
}

// VPP tags. A tag's first word names its kind ("vcoil", "vcoil-hp",
// "vcoil-svc"…); from version 2 on, the word ends with "@" and the version
// ("vcoil@2 c0ffee eth0"), and the rest of the tag is the kind's. A first
// word that starts with "vcoil" and has no "@" is a version 1 tag, written
// before format versions. VPP keeps 63 bytes of a tag: the marker costs 2.

// Tag is a tag of kind in the current version (VPPTag), with the words of
// rest after it.
func Tag(kind string, rest ...string) string {
	t := kind + "@" + strconv.Itoa(VPPTag)
	for _, r := range rest {
		t += " " + r
	}
	return t
}

// ParseTag splits a tag of vcoil's into its kind, version and the rest
// (after the first space, "" without one); ok is false for a tag that is
// not vcoil's (its first word does not start with "vcoil", or its version
// is not a number from 1).
func ParseTag(tag string) (kind string, version int, rest string, ok bool) {
	first, rest, _ := strings.Cut(tag, " ")
	if !strings.HasPrefix(first, "vcoil") {
		return "", 0, "", false
	}
	kind, v, versioned := strings.Cut(first, "@")
	if !versioned {
		return kind, 1, rest, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || strconv.Itoa(n) != v {
		return "", 0, "", false
	}
	return kind, n, rest, true
}

// CheckTag refuses a tag of vcoil's of a newer version than VPPTag; what
// names the object that carries it ("VPP interface 3 (tap3)").
func CheckTag(what, tag string) error {
	if _, v, _, ok := ParseTag(tag); ok {
		return Check(fmt.Sprintf("%s, tag %q,", what, tag), v, VPPTag)
	}
	return nil
}
