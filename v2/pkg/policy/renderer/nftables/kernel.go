package nftables

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	gnft "github.com/google/nftables"
	"sigs.k8s.io/knftables"
)

// kernel runs nft in the node's network namespace. A child process starts
// in the namespace of the thread that forks it, so every call runs on a
// thread locked in the namespace (ns.Do): vcoild may live in another one
// (as in the tests, with Config.Netns).
type kernel struct {
	netns   ns.NetNS // nil: the process's own namespace
	nft     knftables.Interface
	nftPath string
	table   string
	nl      *gnft.Conn // made at the first element batch
}

func openKernel(netnsPath, table string) (*kernel, error) {
	k := &kernel{table: table}
	var err error
	if k.nftPath, err = exec.LookPath("nft"); err != nil {
		return nil, fmt.Errorf("nft binary: %w", err)
	}
	if netnsPath != "" {
		if k.netns, err = ns.GetNS(netnsPath); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", netnsPath, err)
		}
	}
	err = k.do(func() error {
		var err error
		k.nft, err = knftables.New(knftables.InetFamily, table)
		return err
	})
	if err != nil {
		k.close()
		return nil, fmt.Errorf("nftables table inet %s: %w", table, err)
	}
	return k, nil
}

func (k *kernel) close() {
	if k.nl != nil {
		_ = k.nl.CloseLasting()
		k.nl = nil
	}
	if k.netns != nil {
		k.netns.Close()
		k.netns = nil
	}
}

func (k *kernel) do(f func() error) error {
	if k.netns == nil {
		return f()
	}
	return k.netns.Do(func(ns.NetNS) error { return f() })
}

// nftCmd runs nft with args and stdin, returning its output.
func (k *kernel) nftCmd(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	var out []byte
	err := k.do(func() error {
		cmd := exec.CommandContext(ctx, k.nftPath, args...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		out = stdout.Bytes()
		return nil
	})
	return out, err
}

// runScript runs an nft script as one transaction.
func (k *kernel) runScript(ctx context.Context, script string) error {
	_, err := k.nftCmd(ctx, script, "-f", "-")
	return err
}

// errNoTable is what listing reports when the table does not exist.
var errNoTable = errors.New("no table")

// kernelTable is what listing the table found, in the renderer's terms.
type kernelTable struct {
	// format is the comment of the format set (setFormat), "" without it.
	format string
	chains map[string]*kernelChain
	sets   map[string]*kernelSet
	// maps holds the elements of the dispatch maps: address -> group
	// chain jumped to ("" for another verdict).
	maps     map[string]map[netip.Addr]string
	counters map[string]bool
}

type kernelChain struct {
	base  bool
	rules []string // the rules' comments, in order
}

type kernelSet struct {
	typ     string
	comment string
	elems   []any // nft's JSON of each element
}

// list reads the table with nft's JSON output. It is only done to adopt
// the table at the first render of a process and after a failed one.
func (k *kernel) list(ctx context.Context) (*kernelTable, error) {
	out, err := k.nftCmd(ctx, "", "-j", "list", "table", "inet", k.table)
	if err != nil {
		// nft says "No such file or directory" for a missing table.
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil, errNoTable
		}
		return nil, err
	}
	return parseTable(out)
}

// parseTable decodes `nft -j list table` output.
func parseTable(out []byte) (*kernelTable, error) {
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return nil, fmt.Errorf("decode nft's JSON: %w", err)
	}
	t := &kernelTable{chains: map[string]*kernelChain{}, sets: map[string]*kernelSet{}, maps: map[string]map[netip.Addr]string{}, counters: map[string]bool{}}
	for _, obj := range doc.Nftables {
		for kind, raw := range obj {
			var err error
			switch kind {
			case "chain":
				var v struct {
					Name, Hook string
				}
				if err = json.Unmarshal(raw, &v); err == nil {
					t.chains[v.Name] = &kernelChain{base: v.Hook != ""}
				}
			case "rule":
				var v struct {
					Chain, Comment string
				}
				if err = json.Unmarshal(raw, &v); err == nil {
					c := t.chains[v.Chain]
					if c == nil {
						return nil, fmt.Errorf("rule of an unlisted chain %s", v.Chain)
					}
					c.rules = append(c.rules, v.Comment)
				}
			case "set":
				var v struct {
					Name, Comment string
					Type          any
					Elem          []any
				}
				if err = json.Unmarshal(raw, &v); err == nil {
					if v.Name == setFormat {
						t.format = v.Comment
						continue
					}
					t.sets[v.Name] = &kernelSet{typ: typeString(v.Type), comment: v.Comment, elems: v.Elem}
				}
			case "map":
				var v struct {
					Name string
					Elem [][2]any
				}
				if err = json.Unmarshal(raw, &v); err == nil {
					m := map[netip.Addr]string{}
					for _, e := range v.Elem {
						a, aerr := netip.ParseAddr(fmt.Sprint(e[0]))
						if aerr != nil {
							return nil, fmt.Errorf("map %s: element key %v: %w", v.Name, e[0], aerr)
						}
						m[a] = jumpTarget(e[1])
					}
					t.maps[v.Name] = m
				}
			case "counter":
				var v struct{ Name string }
				if err = json.Unmarshal(raw, &v); err == nil {
					t.counters[v.Name] = true
				}
			}
			if err != nil {
				return nil, fmt.Errorf("decode nft's JSON %s: %w", kind, err)
			}
		}
	}
	return t, nil
}

// typeString is a set's type as nft writes it: a name, or a list for a
// concatenation.
func typeString(v any) string {
	switch t := v.(type) {
	case string:
		return t
	case []any:
		parts := make([]string, len(t))
		for i, p := range t {
			parts[i] = fmt.Sprint(p)
		}
		return strings.Join(parts, " . ")
	}
	return fmt.Sprint(v)
}

// jumpTarget is the chain of a {"jump": {"target": c}} verdict, or "".
func jumpTarget(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	j, ok := m["jump"].(map[string]any)
	if !ok {
		return ""
	}
	s, _ := j["target"].(string)
	return s
}

// intervalOf decodes an element of an address interval set: an address, a
// prefix or a range.
func intervalOf(e any) (interval, error) {
	switch v := e.(type) {
	case string:
		a, err := netip.ParseAddr(v)
		return interval{a, a}, err
	case map[string]any:
		if p, ok := v["prefix"].(map[string]any); ok {
			a, err := netip.ParseAddr(fmt.Sprint(p["addr"]))
			if err != nil {
				return interval{}, err
			}
			bits, ok := p["len"].(float64)
			if !ok {
				return interval{}, fmt.Errorf("prefix %v without a length", p)
			}
			pfx := netip.PrefixFrom(a, int(bits))
			if !pfx.IsValid() {
				return interval{}, fmt.Errorf("prefix %v", p)
			}
			return prefixInterval(pfx), nil
		}
		if r, ok := v["range"].([]any); ok && len(r) == 2 {
			a, err := netip.ParseAddr(fmt.Sprint(r[0]))
			if err != nil {
				return interval{}, err
			}
			b, err := netip.ParseAddr(fmt.Sprint(r[1]))
			return interval{a, b}, err
		}
	}
	return interval{}, fmt.Errorf("unexpected interval element %v", e)
}

// hostPortOf decodes an element of a hostPorts set.
func hostPortOf(e any) (hostPort, error) {
	m, ok := e.(map[string]any)
	if !ok {
		return hostPort{}, fmt.Errorf("unexpected element %v", e)
	}
	c, ok := m["concat"].([]any)
	if !ok || len(c) != 3 {
		return hostPort{}, fmt.Errorf("unexpected element %v", e)
	}
	a, err := netip.ParseAddr(fmt.Sprint(c[0]))
	if err != nil {
		return hostPort{}, err
	}
	proto, ok := parseProtocol(c[1])
	if !ok {
		return hostPort{}, fmt.Errorf("element %v: protocol %v", e, c[1])
	}
	port, ok := c[2].(float64)
	if !ok {
		p, err := strconv.Atoi(fmt.Sprint(c[2]))
		if err != nil {
			return hostPort{}, fmt.Errorf("element %v: port %v", e, c[2])
		}
		port = float64(p)
	}
	if port < 0 || port > 65535 {
		return hostPort{}, fmt.Errorf("element %v: port %v", e, c[2])
	}
	return hostPort{addr: a, proto: proto, port: uint16(port)}, nil
}

// selfElemOf decodes an element "a . a" of a self set.
func selfElemOf(e any) (netip.Addr, error) {
	m, ok := e.(map[string]any)
	if !ok {
		return netip.Addr{}, fmt.Errorf("unexpected element %v", e)
	}
	c, ok := m["concat"].([]any)
	if !ok || len(c) != 2 || fmt.Sprint(c[0]) != fmt.Sprint(c[1]) {
		return netip.Addr{}, fmt.Errorf("unexpected element %v", e)
	}
	return netip.ParseAddr(fmt.Sprint(c[0]))
}
