package nft

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// FormatSet is the name of the empty set that carries a table's format in
// its comment: nft's JSON output shows no table or chain comments, and a
// set's comment survives every listing.
const FormatSet = "format"

// FormatComment is the format set's comment of a table of kind (a word:
// "services", "policy", "egress") and version v.
func FormatComment(kind string, v int) string { return "vcoil " + kind + " v" + strconv.Itoa(v) }

// ParseFormatComment reads the version of a format set's comment; false
// when the comment is not one of kind's.
func ParseFormatComment(kind, comment string) (int, bool) {
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

// NewFormatSet is the format set of a table of kind in version v, for a
// transaction that makes the table.
func NewFormatSet(kind string, v int) *knftables.Set {
	return &knftables.Set{Name: FormatSet, Type: "ipv4_addr", Comment: knftables.PtrTo(FormatComment(kind, v))}
}

// FormatOf is the format of a table from what Read found: 0 for a missing
// table, 1 for one without a format set (the tables vcoil wrote before
// format versions), else the version the set's comment says. A comment
// that is not kind's is an error: the table is not the one expected, and
// is left alone.
func FormatOf(table TableID, c *Contents, kind string) (int, error) {
	if !c.Exists {
		return 0, nil
	}
	s, ok := c.Sets[FormatSet]
	if !ok {
		return 1, nil
	}
	v, ok := ParseFormatComment(kind, s.Comment)
	if !ok {
		return 0, fmt.Errorf("nftables table %s: its format set says %q, not a version of a vcoil %s table", table, s.Comment, kind)
	}
	return v, nil
}

// format and checkFormat implement Table's Format and CheckFormat on its
// Read.
func format(ctx context.Context, t Table, kind string) (int, bool, error) {
	c, err := t.Read(ctx)
	if err != nil {
		return 0, false, err
	}
	v, err := FormatOf(TableID{t.Family(), t.Name()}, c, kind)
	return v, c.Exists, err
}

func checkFormat(ctx context.Context, t Table, kind string, known int) error {
	v, exists, err := format(ctx, t, kind)
	if err != nil || !exists {
		return err
	}
	return formatversion.Check("nftables table "+TableID{t.Family(), t.Name()}.String(), v, known)
}

// Replace replaces table t in one transaction (deleted and made again)
// with a table commented comment, its format set (kind, version) and what
// fill adds; with a nil fill it only deletes t. A table of a newer format
// than version is refused (a *formatversion.NewerError) and left
// unchanged. It suits the small tables that hold nothing but what is
// rendered at each sync.
func Replace(ctx context.Context, t Table, kind string, version int, comment string, fill func(*knftables.Transaction)) error {
	if err := t.CheckFormat(ctx, kind, version); err != nil {
		return err
	}
	tx := t.NewTransaction()
	// Adding first makes the delete succeed when there is no table.
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if fill != nil {
		tx.Add(&knftables.Table{Comment: knftables.PtrTo(comment)})
		tx.Add(NewFormatSet(kind, version))
		fill(tx)
	}
	return t.Run(ctx, tx)
}
