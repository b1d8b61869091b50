// Package format holds the format versions of everything vcoild keeps
// outside its memory (checkpoint files, nftables tables, VPP object tags)
// and the rule by which it treats them: a vcoild adopts what it or the
// previous format wrote, and refuses what a newer vcoild wrote, naming the
// object and both versions and changing nothing, rather than destroying
// state it cannot read. docs/operations.md ("Formats and upgrades") lists
// every artifact.
//
// It does not read or write any artifact: each owner marks and checks its
// own, with the helpers here.
package format

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	gnft "github.com/google/nftables"
	"golang.org/x/sys/unix"
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
	// (interfaces, NAT mappings, ACLs). Version 1 tags carry no version.
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

// NFTVersion reads the format of table (of family, in the network
// namespace open as nsFd, 0 for the process's own) over netlink: 0 when
// there is no table, 1 when it has no format set (the tables vcoil wrote
// before format versions), else the set's version. A format set whose
// comment is not kind's is an error: the table is not the one expected.
func NFTVersion(nsFd int, family gnft.TableFamily, table, kind string) (int, error) {
	var opts []gnft.ConnOption
	if nsFd != 0 {
		opts = append(opts, gnft.WithNetNSFd(nsFd))
	}
	c, err := gnft.New(opts...)
	if err != nil {
		return 0, fmt.Errorf("nftables netlink connection: %w", err)
	}
	defer c.CloseLasting()
	t, err := c.ListTableOfFamily(table, family)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("list nftables table %s: %w", table, err)
	}
	sets, err := c.GetSets(t)
	if err != nil {
		return 0, fmt.Errorf("list the sets of nftables table %s: %w", table, err)
	}
	return NFTVersionOf(table, kind, sets)
}

// NFTVersionOf is NFTVersion of an existing table whose sets are listed.
func NFTVersionOf(table, kind string, sets []*gnft.Set) (int, error) {
	for _, s := range sets {
		if s.Name != NFTSet {
			continue
		}
		v, ok := ParseNFTComment(kind, s.Comment)
		if !ok {
			return 0, fmt.Errorf("nftables table %s: its format set says %q, not a version of a vcoil %s table", table, s.Comment, kind)
		}
		return v, nil
	}
	return 1, nil
}
