// Package formatversion holds the format versions of everything vcoild keeps
// outside its memory (checkpoint files, nftables tables, VPP object tags)
// and the rule by which it treats them: a vcoild adopts what it or the
// previous format wrote, and refuses what a newer vcoild wrote, naming the
// object and both versions and changing nothing, rather than destroying
// state it cannot read. docs/operations.md ("Formats and upgrades") lists
// every artifact.
//
// It does not read or write any artifact: each owner marks and checks its
// own, with the helpers here.
package formatversion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"
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
	// KernelTable is the version of the small tables that are replaced
	// whole at every sync: the VPP dataplane's service network and
	// hostPort tables, and the egress tables of routers and clients.
	KernelTable = 2
	// VPPTag is the version of the tags vcoil gives VPP objects
	// (interfaces, NAT mappings, ACLs) and of the aliases of its pods'
	// kernel veths, which share their syntax. Version 1 tags carry no
	// version.
	VPPTag = 2
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

// NFTSet is the name of the empty set that carries an nftables table's
// format in its comment: nft's JSON output shows no table or chain
// comments, and a set's comment survives every listing.
const NFTSet = "format"

// NFTComment is the format set's comment of a table of kind (a word:
// "services", "policy", "egress") and version v.
func NFTComment(kind string, v int) string { return "vcoil " + kind + " v" + strconv.Itoa(v) }

// ParseNFTComment reads the version of a format set's comment; false when
// the comment is not one of kind's.
func ParseNFTComment(kind, comment string) (int, bool) {
	s, ok := strings.CutPrefix(comment, "vcoil "+kind+" v")
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || strconv.Itoa(v) != s {
		return 0, false
	}
	return v, true
}

// NFTVersion is the format of an existing table: 1 when it has no format
// set (hasSet false: the tables vcoil wrote before format versions), else
// the version the set's comment says, which comment reads. A format set
// whose comment is not kind's is an error: the table is not the one
// expected, and is left alone.
func NFTVersion(table, kind string, hasSet bool, comment func() (string, error)) (int, error) {
	if !hasSet {
		return 1, nil
	}
	c, err := comment()
	if err != nil {
		return 0, fmt.Errorf("read the format of nftables table %s: %w", table, err)
	}
	v, ok := ParseNFTComment(kind, c)
	if !ok {
		return 0, fmt.Errorf("nftables table %s: its format set says %q, not a version of a vcoil %s table", table, c, kind)
	}
	return v, nil
}

// ReadNFTSetComment returns the comment of the format set of table (of
// family: "inet", "ip") with `nft -j list set`, in the network namespace
// of the calling thread. It is nft's JSON and not netlink because the
// netlink library vcoil uses does not decode set comments; the set is
// empty, so the listing is small whatever the table holds.
func ReadNFTSetComment(ctx context.Context, family, table string) (string, error) {
	out, err := exec.CommandContext(ctx, "nft", "-j", "list", "set", family, table, NFTSet).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("nft -j list set %s %s %s: %w: %s", family, table, NFTSet, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("nft -j list set %s %s %s: %w", family, table, NFTSet, err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return "", fmt.Errorf("decode nft's JSON listing of set %s %s %s: %w", family, table, NFTSet, err)
	}
	for _, obj := range doc.Nftables {
		if raw, ok := obj["set"]; ok {
			var set struct{ Name, Comment string }
			if err := json.Unmarshal(raw, &set); err != nil {
				return "", fmt.Errorf("decode nft's JSON listing of set %s %s %s: %w", family, table, NFTSet, err)
			}
			return set.Comment, nil
		}
	}
	return "", fmt.Errorf("nft listed no set %s in table %s %s", NFTSet, family, table)
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

// CheckKnftTable refuses the table that nft manages (knftables, bound to
// family and table) when its format set says a newer version than known
// (a NewerError naming the table). A missing table, and a table without a
// format set (format 1), pass. It runs nft: call it on a thread in the
// table's network namespace, before the transaction that replaces the
// table.
func CheckKnftTable(ctx context.Context, nft knftables.Interface, family knftables.Family, table, kind string, known int) error {
	sets, err := nft.List(ctx, "sets")
	if knftables.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the sets of nftables table %s %s: %w", family, table, err)
	}
	name := string(family) + " " + table
	v, err := NFTVersion(name, kind, slices.Contains(sets, NFTSet), func() (string, error) {
		return ReadNFTSetComment(ctx, string(family), table)
	})
	if err != nil {
		return err
	}
	return Check("nftables table "+name, v, known)
}

// KnftSet is the format set of a table of kind in version v, for a
// knftables transaction.
func KnftSet(kind string, v int) *knftables.Set {
	return &knftables.Set{Name: NFTSet, Type: "ipv4_addr", Comment: knftables.PtrTo(NFTComment(kind, v))}
}
