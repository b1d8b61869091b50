// Package nft is vcoil's one way to nftables: running transactions and
// scripts in a network namespace, batching element changes over netlink,
// reading a table back (its sets, chains, rule comments and elements) to
// adopt it, the format set every vcoil table carries, nft's errors turned
// into ones that name the table and the failing statement, and a Fake that
// does all of it in memory for tests without root.
//
// Tables, chains and rules are written through nft (knftables, or a raw
// script for the element commands of many elements knftables cannot
// batch): nft is the only tool that parses rules. Element changes alone
// may go over netlink instead (ApplyElements), as one transaction: nft
// loads every interval set of the namespace before any element command.
// Reads go over netlink: any nft listing prints every element of the
// table, which takes seconds at ten thousand services, while the kernel
// hands them over in milliseconds. The price is encoding and decoding the
// kernel's bytes, which the package does by the layouts its user declares
// (Layouts).
package nft

import (
	"context"
	"errors"
	"strings"

	"sigs.k8s.io/knftables"
)

// Table is one nftables table in one network namespace. Every method may
// be called whether the table exists or not.
type Table interface {
	// Family and Name identify the table.
	Family() knftables.Family
	Name() string
	// NewTransaction starts a knftables transaction on the table.
	NewTransaction() *knftables.Transaction
	// Run applies tx as one nft transaction; Check has nft (and the
	// kernel) check it without committing. Their errors are *Error.
	Run(ctx context.Context, tx *knftables.Transaction) error
	Check(ctx context.Context, tx *knftables.Transaction) error
	// RunScript applies an nft script (nft -f) as one transaction;
	// CheckScript only checks it (nft --check). Their errors are *Error.
	RunScript(ctx context.Context, script string) error
	CheckScript(ctx context.Context, script string) error
	// ApplyElements adds and deletes elements over netlink, all of ops
	// in one transaction, encoded by the sets' layouts. It avoids nft,
	// which loads every interval set of the namespace before any element
	// command.
	ApplyElements(ctx context.Context, ops []ElementOp) error
	// Read lists the table: whether it exists, its sets and maps, its
	// chains with their rules' comments, and its named counters.
	Read(ctx context.Context) (*Contents, error)
	// Elements lists the elements of a set or map in knftables' text
	// form (Key and Value fields as nft lists them), decoded by its
	// layout; a set without a declared layout is an error. The elements
	// of a single-field interval set come as one element per interval:
	// an address, a prefix or a range "a-b".
	Elements(ctx context.Context, set string) ([]*knftables.Element, error)
	// Counters lists the table's named counters with their values.
	Counters(ctx context.Context) ([]Counter, error)
	// ElementCounters lists the elements of a set declared with a
	// counter per element ("counter" in its definition, which knftables
	// cannot write: such sets come from scripts) with their counts,
	// decoded by its layout; a set that is not an interval set.
	ElementCounters(ctx context.Context, set string) ([]ElementCounter, error)
	// Format is the version of the table of kind (FormatComment's word):
	// exists is false for a missing table (version 0), a table without a
	// format set is version 1, and a format set whose comment is not
	// kind's is an error (the table is not the one expected).
	Format(ctx context.Context, kind string) (version int, exists bool, err error)
	// CheckFormat refuses the table when it is of a newer version than
	// known (a *formatversion.NewerError naming the table); a missing
	// table passes.
	CheckFormat(ctx context.Context, kind string, known int) error
	// Delete deletes the table; a missing table is not an error.
	Delete(ctx context.Context) error
	// Text prints the table as `nft list table` does; "" when it does
	// not exist.
	Text(ctx context.Context) (string, error)
	// Close releases the netlink sockets; it does not close the namespace
	// Open was given.
	Close()
}

// Contents is what Read found of a table.
type Contents struct {
	Exists bool
	// Sets holds the sets and maps by name, anonymous ones included.
	Sets map[string]*SetInfo
	// Chains holds the chains by name.
	Chains map[string]*ChainInfo
	// Counters holds the names of the named counters.
	Counters map[string]bool
}

// SetInfo describes a set or map.
type SetInfo struct {
	Name string
	// Map is true for a map (verdict maps included).
	Map       bool
	Anonymous bool
	Interval  bool
	// Dynamic is set for a set rules may add to ("flags dynamic");
	// ElementExprs for one that gives each element expressions of its
	// own (a "counter" in its definition).
	Dynamic      bool
	ElementExprs bool
	// Type is the key's type as nft writes it ("ipv4_addr",
	// "ipv4_addr . inet_proto . inet_service"); ValueType the value's
	// ("verdict", "ipv4_addr . inet_service"), "" for a set. A type nft
	// has no name for is written "type<magic>".
	Type, ValueType string
	Comment         string
}

// ChainInfo describes a chain.
type ChainInfo struct {
	Name string
	// Base is true for a base chain (one with a hook).
	Base bool
	// Rules holds the comments of the chain's rules, in order ("" for a
	// rule without one).
	Rules []string
}

// Counter is a named counter and its values.
type Counter struct {
	Name           string
	Packets, Bytes uint64
}

// ElementCounter is one element of a set with counters: its key in
// knftables' text form and its count.
type ElementCounter struct {
	Key            []string
	Packets, Bytes uint64
}

// MaxApplyOps bounds the element changes one ApplyElements call should
// carry: its batch is one netlink message, which the socket's send buffer
// bounds (about 200 KB: 2,000 elements of the largest layout vcoil writes,
// an IPv6 frontend to an IPv6 endpoint, do not fit; 1,000 do);
// larger changes go to nft, or are split where atomicity does not matter.
const MaxApplyOps = 1000

// ElementOp adds or deletes one element: Key (and Value, when adding to a
// map) in knftables' text form. A delete needs no Value.
type ElementOp struct {
	Delete     bool
	Set        string
	Key, Value []string
}

// TableID names a table.
type TableID struct {
	Family knftables.Family
	Name   string
}

func (t TableID) String() string { return string(t.Family) + " " + t.Name }

// Script is tx's text, for a script that carries more than knftables
// writes (elements batched per command); an error when knftables refused
// one of tx's operations, which Transaction.String only appends as a
// comment that nft would ignore.
func Script(tx *knftables.Transaction) (string, error) {
	text := tx.String()
	if i := strings.Index(text, "# ERROR: "); i >= 0 {
		return "", errors.New(strings.TrimSpace(text[i+len("# ERROR: "):]))
	}
	return text, nil
}

// elementsPerCommand bounds the elements of one command WriteElements
// writes, to keep its lines of a reasonable length; nft's cost is per
// element beyond that.
const elementsPerCommand = 1000

// WriteElements appends ops to b as element commands of table id, for a
// script: consecutive ops of one set and one kind (add or delete) share a
// command ("add element inet t m { k1 : v1, k2 : v2 }"), which knftables
// cannot do. It writes one command per element, and nft parses ten
// thousand services' 110,000 commands seconds slower than the same
// elements in 110.
func WriteElements(b *strings.Builder, id TableID, ops []ElementOp) {
	for start := 0; start < len(ops); {
		first := ops[start]
		end := start + 1
		for end < len(ops) && end-start < elementsPerCommand && ops[end].Set == first.Set && ops[end].Delete == first.Delete {
			end++
		}
		verb := "add"
		if first.Delete {
			verb = "delete"
		}
		b.WriteString(verb + " element " + string(id.Family) + " " + id.Name + " " + first.Set + " { ")
		for i, op := range ops[start:end] {
			if i > 0 {
				b.WriteString(", ")
			}
			writeConcat(b, op.Key)
			if !op.Delete && len(op.Value) > 0 {
				b.WriteString(" : ")
				writeConcat(b, op.Value)
			}
		}
		b.WriteString(" }\n")
		start = end
	}
}

// writeConcat writes an element's fields as nft concatenates them, without
// joining them first: a script may hold a hundred thousand elements.
func writeConcat(b *strings.Builder, fields []string) {
	for i, f := range fields {
		if i > 0 {
			b.WriteString(" . ")
		}
		b.WriteString(f)
	}
}
