package nft

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	gnft "github.com/google/nftables"
	"sigs.k8s.io/knftables"
)

// kernel is a Table in a network namespace. knftables and nft scripts run
// the nft binary, which starts in the network namespace of the thread that
// forks it: every run is on a thread locked in the namespace (ns.Do), so
// that vcoild itself may live in another namespace (as in the lab, with
// --netns). Netlink sockets are opened in the namespace directly.
type kernel struct {
	netns   ns.NetNS // nil: the process's own namespace
	id      TableID
	layouts Layouts
	nftPath string
	knft    knftables.Interface
	nl      *gnft.Conn // made at the first element operation
}

// Open opens the table family name in netns (nil: the process's own),
// checking that nft runs there; it does not touch the table. layouts
// declares the sets whose elements ApplyElements and Elements encode (nil:
// none). The caller keeps netns open while the Table is in use.
func Open(netns ns.NetNS, family knftables.Family, name string, layouts Layouts) (Table, error) {
	k := &kernel{netns: netns, id: TableID{family, name}, layouts: layouts}
	if _, ok := nfproto[family]; !ok {
		return nil, fmt.Errorf("nftables table %s: unknown family", k.id)
	}
	var err error
	if k.nftPath, err = exec.LookPath("nft"); err != nil {
		return nil, fmt.Errorf("nft binary: %w", err)
	}
	err = k.do(func() error {
		var err error
		k.knft, err = knftables.New(family, name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("nftables table %s: %w", k.id, err)
	}
	return k, nil
}

func (k *kernel) Family() knftables.Family { return k.id.Family }
func (k *kernel) Name() string             { return k.id.Name }

func (k *kernel) NewTransaction() *knftables.Transaction { return k.knft.NewTransaction() }

func (k *kernel) Close() {
	if k.nl != nil {
		_ = k.nl.CloseLasting()
		k.nl = nil
	}
}

func (k *kernel) do(f func() error) error { return inNS(k.netns, f) }

func inNS(netns ns.NetNS, f func() error) error {
	if netns == nil {
		return f()
	}
	return netns.Do(func(ns.NetNS) error { return f() })
}

func (k *kernel) Run(ctx context.Context, tx *knftables.Transaction) error {
	if err := k.do(func() error { return k.knft.Run(ctx, tx) }); err != nil {
		return newError(k.id.String(), tx.String(), "", err)
	}
	return nil
}

func (k *kernel) Check(ctx context.Context, tx *knftables.Transaction) error {
	if err := k.do(func() error { return k.knft.Check(ctx, tx) }); err != nil {
		return newError(k.id.String(), tx.String(), "", err)
	}
	return nil
}

func (k *kernel) RunScript(ctx context.Context, script string) error {
	_, err := k.nft(ctx, script, "-f", "-")
	return err
}

func (k *kernel) CheckScript(ctx context.Context, script string) error {
	_, err := k.nft(ctx, script, "--check", "-f", "-")
	return err
}

// nft runs the nft binary with args and stdin in the namespace.
func (k *kernel) nft(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	return runNFT(ctx, k.netns, k.nftPath, k.id.String(), stdin, args...)
}

func runNFT(ctx context.Context, netns ns.NetNS, path, table, stdin string, args ...string) ([]byte, error) {
	var out []byte
	err := inNS(netns, func() error {
		cmd := exec.CommandContext(ctx, path, args...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			msg := stderr.String()
			if ctx.Err() != nil {
				msg = ""
				err = fmt.Errorf("nft %s: %w (%w)", strings.Join(args, " "), ctx.Err(), err)
			}
			return newError(table, stdin, msg, err)
		}
		out = stdout.Bytes()
		return nil
	})
	return out, err
}

// Delete adds the table before deleting it, in one transaction, so that a
// missing table is no error (nft's destroy needs Linux 6.3).
func (k *kernel) Delete(ctx context.Context) error {
	tx := k.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	return k.Run(ctx, tx)
}

func (k *kernel) Text(ctx context.Context) (string, error) {
	exists, err := k.exists()
	if err != nil || !exists {
		return "", err
	}
	out, err := k.nft(ctx, "", "list", "table", string(k.id.Family), k.id.Name)
	if IsNotFound(err) {
		return "", nil
	}
	return string(out), err
}

func (k *kernel) Format(ctx context.Context, kind string) (int, bool, error) {
	return format(ctx, k, kind)
}

func (k *kernel) CheckFormat(ctx context.Context, kind string, known int) error {
	return checkFormat(ctx, k, kind, known)
}

func (k *kernel) netlink() (*gnft.Conn, error) {
	if k.nl != nil {
		return k.nl, nil
	}
	var opts []gnft.ConnOption
	if k.netns != nil {
		opts = append(opts, gnft.WithNetNSFd(int(k.netns.Fd())))
	}
	conn, err := gnft.New(append(opts, gnft.AsLasting())...)
	if err != nil {
		return nil, fmt.Errorf("nftables netlink connection: %w", err)
	}
	k.nl = conn
	return conn, nil
}

func (k *kernel) gnftSet(name string) *gnft.Set {
	return &gnft.Set{Name: name, Table: &gnft.Table{Name: k.id.Name, Family: gnft.TableFamily(nfproto[k.id.Family])}}
}

func (k *kernel) layout(set string) (Layout, error) { return k.layouts.of(k.id, set) }

// of is the layout of set in table id, an error for a set without one.
func (ls Layouts) of(id TableID, set string) (Layout, error) {
	if ls != nil {
		if l, ok := ls(set); ok {
			return l, nil
		}
	}
	return Layout{}, fmt.Errorf("nftables table %s: set %s has no declared layout", id, set)
}

// ApplyElements sends ops as one netlink batch, grouping the consecutive
// operations of one set and verb into one message.
func (k *kernel) ApplyElements(ctx context.Context, ops []ElementOp) error {
	if len(ops) == 0 {
		return ctx.Err()
	}
	conn, err := k.netlink()
	if err != nil {
		return err
	}
	for start := 0; start < len(ops); {
		end := start
		for end < len(ops) && ops[end].Set == ops[start].Set && ops[end].Delete == ops[start].Delete {
			end++
		}
		elems, err := encodeOps(k.layout, ops[start:end])
		if err != nil {
			return fmt.Errorf("nftables table %s: %w", k.id, err)
		}
		set := k.gnftSet(ops[start].Set)
		if ops[start].Delete {
			err = conn.SetDeleteElements(set, elems)
		} else {
			err = conn.SetAddElements(set, elems)
		}
		if err != nil {
			return fmt.Errorf("nftables table %s: set %s: %w", k.id, ops[start].Set, err)
		}
		start = end
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := conn.Flush(); err != nil {
		return fmt.Errorf("nftables table %s: netlink batch of %d element changes: %w", k.id, len(ops), err)
	}
	return nil
}

// encodeOps encodes ops, all of one set.
func encodeOps(layout func(string) (Layout, error), ops []ElementOp) ([]gnft.SetElement, error) {
	l, err := layout(ops[0].Set)
	if err != nil {
		return nil, err
	}
	// One element per operation (two for an interval's ends): the list
	// grown by appends would be garbage of many times its size.
	elems := make([]gnft.SetElement, 0, len(ops))
	// The arena's first chunk is sized to the ops (up to a full chunk): a
	// change of a few elements, as every endpoint change is, would
	// otherwise allocate and clear 64 KiB per set it touches (under churn
	// at full size, the largest source of vcoild's garbage).
	a := byteArena{chunk: make([]byte, 0, min(arenaChunk, len(ops)*l.maxElementBytes()))}
	for _, op := range ops {
		value := op.Value
		if op.Delete {
			value = nil
		}
		if elems, err = l.appendEncoded(elems, &a, op.Key, value); err != nil {
			return nil, fmt.Errorf("set %s: %w", op.Set, err)
		}
	}
	return elems, nil
}

func (k *kernel) Elements(ctx context.Context, set string) ([]*knftables.Element, error) {
	l, raw, err := k.rawElements(ctx, set)
	if err != nil {
		return nil, err
	}
	return l.elements(k.id, set, raw)
}

func (k *kernel) ElementCounters(ctx context.Context, set string) ([]ElementCounter, error) {
	l, raw, err := k.rawElements(ctx, set)
	if err != nil {
		return nil, err
	}
	if l.interval() {
		return nil, fmt.Errorf("nftables table %s: set %s: an interval set has no element counters here", k.id, set)
	}
	out := make([]ElementCounter, 0, len(raw))
	for i := range raw {
		e, err := l.decodeOne(&raw[i])
		if err != nil {
			return nil, fmt.Errorf("nftables table %s: set %s: element %d: %w", k.id, set, i, err)
		}
		c := ElementCounter{Key: e.Key}
		if raw[i].Counter != nil {
			c.Packets, c.Bytes = raw[i].Counter.Packets, raw[i].Counter.Bytes
		}
		out = append(out, c)
	}
	return out, nil
}

// rawElements lists the kernel's elements of set over netlink, with the
// set's layout.
func (k *kernel) rawElements(ctx context.Context, set string) (Layout, []gnft.SetElement, error) {
	if err := ctx.Err(); err != nil {
		return Layout{}, nil, err
	}
	l, err := k.layout(set)
	if err != nil {
		return Layout{}, nil, err
	}
	conn, err := k.netlink()
	if err != nil {
		return Layout{}, nil, err
	}
	raw, err := conn.GetSetElements(k.gnftSet(set))
	if err != nil {
		return Layout{}, nil, fmt.Errorf("nftables table %s: list set %s: %w", k.id, set, err)
	}
	return l, raw, nil
}

// elements decodes the kernel's elements of set in table id, as
// knftables elements of the set or map.
func (l Layout) elements(id TableID, set string, raw []gnft.SetElement) ([]*knftables.Element, error) {
	elems, err := l.decode(raw)
	if err != nil {
		return nil, fmt.Errorf("nftables table %s: set %s: %w", id, set, err)
	}
	for _, e := range elems {
		if l.Value != nil {
			e.Map = set
		} else {
			e.Set = set
		}
	}
	return elems, nil
}
