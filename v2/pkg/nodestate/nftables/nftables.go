// Package nftables is the node state's source of vcoil's nftables tables:
// it prints the tables it is given, as `nft list table` does, from the
// node's network namespace, and leaves out those that do not exist. It
// does not know which tables vcoil makes (vcoild names them) and changes
// nothing.
package nftables

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// Table names one nftables table: its family (inet, ip, ip6) and name.
type Table struct {
	Family, Name string
}

func (t Table) String() string { return t.Family + " " + t.Name }

// Source fills State.NFTables with tables, in their order, read in the
// network namespace at netns (vcoild's own when empty).
func Source(netns string, tables []Table) nodestate.Source {
	return nodestate.SourceFunc(func(ctx context.Context, st *nodestate.State) error {
		var n ns.NetNS
		if netns != "" {
			var err error
			if n, err = ns.GetNS(netns); err != nil {
				return fmt.Errorf("network namespace %s: %w", netns, err)
			}
			defer n.Close()
		}
		return fill(ctx, n, tables, st)
	})
}

func fill(ctx context.Context, n ns.NetNS, tables []Table, st *nodestate.State) error {
	present, err := nft.ListTables(n)
	if err != nil {
		return err
	}
	var errs []string
	for _, t := range tables {
		id := nft.TableID{Family: knftables.Family(t.Family), Name: t.Name}
		if !slices.Contains(present, id) {
			continue
		}
		text, err := tableText(ctx, n, id)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if text != "" { // deleted meanwhile
			st.NFTables = append(st.NFTables, nodestate.NFTable{Family: t.Family, Name: t.Name, Text: text})
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func tableText(ctx context.Context, n ns.NetNS, id nft.TableID) (string, error) {
	tbl, err := nft.Open(n, id.Family, id.Name, nil)
	if err != nil {
		return "", err
	}
	defer tbl.Close()
	return tbl.Text(ctx)
}
