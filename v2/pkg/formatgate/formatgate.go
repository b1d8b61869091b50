// Package formatgate decides, before any of vcoild's writers starts,
// whether the node holds state of a newer format than this vcoild's (a
// downgrade): checkpoint entries, nftables tables, link aliases. Each
// writer refuses a newer object it meets, but the writers run side by side:
// one that meets none of them (the node subnet keeper, the routes, the
// policies) would go on changing the node under a newer vcoild's state. So
// vcoild reads everything first, changing nothing, and when anything is
// newer starts none of them (docs/vcoild.md, "Newer state").
package formatgate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// Check reads one kind of the node's state, changing nothing. Its error
// matches formatversion.ErrNewer when the state is of a newer format.
type Check struct {
	// Name says what is read, for errors.
	Name string
	Run  func(ctx context.Context) error
}

// Scan runs every check. Newer joins the errors of state of a newer format
// (nil when there is none): the caller starts no writer then. Other joins
// the errors of checks that could not read (a missing nft binary, a pod
// namespace that is gone): no reason to hold, the writers meet and report
// them as before.
func Scan(ctx context.Context, checks []Check) (newer, other error) {
	var newers, others []error
	for _, c := range checks {
		err := c.Run(ctx)
		switch {
		case err == nil:
		case errors.Is(err, formatversion.ErrNewer):
			newers = append(newers, err)
		default:
			others = append(others, fmt.Errorf("%s: %w", c.Name, err))
		}
	}
	return errors.Join(newers...), errors.Join(others...)
}

// Checkpoint reads the checkpoint in dir; a missing dir is an empty one
// (it is not made: that would be a write).
func Checkpoint(dir string) Check {
	return Check{Name: "checkpoint " + dir, Run: func(context.Context) error {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		store, err := checkpoint.Open(dir)
		if err != nil {
			return err
		}
		_, err = store.Load()
		if errors.Is(err, formatversion.ErrNewer) {
			return fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		// Unreadable entries are the daemon's to report.
		return nil
	}}
}

// Table is an nftables table of vcoil's and the format version this vcoild
// writes it in.
type Table struct {
	Family knftables.Family
	Name   string
	Known  int
}

// NFTables reads the format sets of tables in the network namespace at
// path ("": vcoild's own); a missing table passes.
func NFTables(path string, tables []Table) Check {
	return Check{Name: "nftables tables in " + nsName(path), Run: func(ctx context.Context) error {
		return inNetns(path, func(n ns.NetNS) error { return checkTables(ctx, n, path, tables) })
	}}
}

func checkTables(ctx context.Context, n ns.NetNS, path string, tables []Table) error {
	present, err := nft.ListTables(n)
	if err != nil {
		return err
	}
	have := map[nft.TableID]bool{}
	for _, id := range present {
		have[id] = true
	}
	var errs []error
	for _, t := range tables {
		id := nft.TableID{Family: t.Family, Name: t.Name}
		if !have[id] {
			continue
		}
		v, err := tableFormat(ctx, n, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := formatversion.Check(fmt.Sprintf("nftables table %s in %s", id, nsName(path)), v, t.Known); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tableFormat is the version a table's format set says, whatever the kind
// of table it names: 1 without a format set (the tables of before format
// versions).
func tableFormat(ctx context.Context, n ns.NetNS, id nft.TableID) (int, error) {
	t, err := nft.Open(n, id.Family, id.Name, nil)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	c, err := t.Read(ctx)
	if err != nil {
		return 0, fmt.Errorf("nftables table %s: %w", id, err)
	}
	s, ok := c.Sets[nft.FormatSet]
	if !c.Exists || !ok {
		return 1, nil
	}
	// "vcoil <kind> v<version>" (nft.FormatComment).
	comment := s.Comment
	v, err := 0, errors.New("no version")
	if i := strings.LastIndex(comment, " v"); i >= 0 {
		v, err = strconv.Atoi(comment[i+2:])
	}
	if !strings.HasPrefix(comment, "vcoil ") || err != nil || v < 1 {
		return 0, fmt.Errorf("nftables table %s: its format set says %q, not a vcoil table's format", id, comment)
	}
	return v, nil
}

// LinkAliases reads the aliases of the links in the network namespace at
// path ("": vcoild's own): vcoil's pod veths carry a versioned tag there.
func LinkAliases(path string) Check {
	return Check{Name: "links in " + nsName(path), Run: func(context.Context) error {
		h, err := handleAt(path)
		if err != nil {
			return err
		}
		defer h.Close()
		links, err := h.LinkList()
		if err != nil {
			return fmt.Errorf("list links in %s: %w", nsName(path), err)
		}
		var errs []error
		for _, l := range links {
			a := l.Attrs()
			if err := formatversion.CheckTag(fmt.Sprintf("link %s in %s, alias", a.Name, nsName(path)), a.Alias); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}}
}

func handleAt(path string) (*netlink.Handle, error) {
	if path == "" {
		return netlink.NewHandle()
	}
	h, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink in %s: %w", path, err)
	}
	return nl, nil
}

func inNetns(path string, f func(ns.NetNS) error) error {
	if path == "" {
		return f(nil)
	}
	n, err := ns.GetNS(path)
	if err != nil {
		return fmt.Errorf("open network namespace %s: %w", path, err)
	}
	defer n.Close()
	return f(n)
}

func nsName(path string) string {
	if path == "" {
		return "vcoild's network namespace"
	}
	return "network namespace " + path
}
