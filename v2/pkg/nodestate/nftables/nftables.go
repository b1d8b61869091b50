// Package nftables is the node state's source of vcoil's nftables tables:
// it prints the tables it is given, as `nft list table` does, from the
// node's network namespace, and leaves out those that do not exist. It
// does not know which tables vcoil makes (vcoild names them) and changes
// nothing.
package nftables

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// Table names one nftables table: its family (inet, ip, ip6) and name.
type Table struct {
	Family, Name string
}

func (t Table) String() string { return t.Family + " " + t.Name }

// Source fills State.NFTables with tables, in their order, read in the
// network namespace at netns (vcoild's own when empty). nft starts in the
// namespace of the thread that forks it, so it runs on a thread locked in
// the namespace.
func Source(netns string, tables []Table) nodestate.Source {
	return nodestate.SourceFunc(func(ctx context.Context, st *nodestate.State) error {
		nft, err := exec.LookPath("nft")
		if err != nil {
			return fmt.Errorf("nft binary: %w", err)
		}
		if netns == "" {
			return fill(ctx, nft, tables, st)
		}
		n, err := ns.GetNS(netns)
		if err != nil {
			return fmt.Errorf("network namespace %s: %w", netns, err)
		}
		defer n.Close()
		return n.Do(func(ns.NetNS) error { return fill(ctx, nft, tables, st) })
	})
}

func fill(ctx context.Context, nft string, tables []Table, st *nodestate.State) error {
	out, err := run(ctx, nft, "list", "tables")
	if err != nil {
		return err
	}
	present := map[Table]bool{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		// "table inet vcoil-policy"
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "table" {
			present[Table{Family: f[1], Name: f[2]}] = true
		}
	}
	var errs []string
	for _, t := range tables {
		if !present[t] {
			continue
		}
		text, err := run(ctx, nft, "list", "table", t.Family, t.Name)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		st.NFTables = append(st.NFTables, nodestate.NFTable{Family: t.Family, Name: t.Name, Text: text})
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func run(ctx context.Context, nft string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, nft, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
