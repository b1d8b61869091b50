package nfteval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Table is one nftables table, read from `nft -j list table` and compiled
// for evaluation.
type Table struct {
	Family string
	Name   string
	chains map[string]*chain
	sets   map[string]*set
	// updated are the sets rules add to ("set" statements): their
	// elements come from the traffic, so no rule may match them here.
	updated map[string]bool
}

type chain struct {
	name   string
	handle int
	// base chains only
	base   bool
	typ    string
	hook   Hook
	prio   int
	policy string
	rules  []*rule
}

type rule struct {
	chain   string
	handle  int
	comment string
	stmts   []stmt
}

// stmt is one statement of a rule; exactly one field is set, except for
// statements that change nothing (counter, log), which have none.
type stmt struct {
	match   *match
	vmap    *vmap
	verdict *verdict
}

type match struct {
	sels  []selector
	op    string
	right []element
	// named is the set that right comes from, for messages.
	named string
}

type vmap struct {
	sels  []selector
	elems []element
	named string
}

type verdict struct {
	kind   string // accept, drop, reject, continue, return, jump, goto
	target string // jump and goto
}

func (v verdict) String() string {
	if v.target != "" {
		return v.kind + " " + v.target
	}
	return v.kind
}

type set struct {
	name  string
	kinds []kind
	// data is the type of a map's values ("verdict"), empty for a set.
	data  string
	elems []element
}

// Parse reads the JSON that `nft -j list table <family> <name>` prints and
// compiles every rule; a rule it does not understand is an error naming it.
func Parse(data []byte) (*Table, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("read nft JSON: %w", err)
	}
	t := &Table{chains: map[string]*chain{}, sets: map[string]*set{}, updated: map[string]bool{}}
	var rules []map[string]any
	for _, obj := range doc.Nftables {
		if len(obj) != 1 {
			return nil, fmt.Errorf("read nft JSON: an object with %d keys, want 1", len(obj))
		}
		for key, raw := range obj {
			var m map[string]any
			if err := decode(raw, &m); err != nil {
				return nil, fmt.Errorf("read nft JSON %s: %w", key, err)
			}
			switch key {
			case "metainfo":
			case "table":
				if t.Name != "" {
					return nil, fmt.Errorf("read nft JSON: tables %q and %v, want the listing of one table", t.Name, m["name"])
				}
				t.Family, _ = m["family"].(string)
				t.Name, _ = m["name"].(string)
				switch t.Family {
				case "inet", "ip", "ip6":
				default:
					return nil, fmt.Errorf("table %s %s: only the families inet, ip and ip6 are modelled", t.Family, t.Name)
				}
			case "chain":
				c, err := parseChain(m)
				if err != nil {
					return nil, err
				}
				t.chains[c.name] = c
			case "set", "map":
				s, err := parseSet(m)
				if err != nil {
					return nil, err
				}
				t.sets[s.name] = s
			case "rule":
				rules = append(rules, m)
			case "counter":
				// Named counters change nothing.
			default:
				return nil, fmt.Errorf("read nft JSON: %q objects are not modelled", key)
			}
		}
	}
	if t.Name == "" {
		return nil, errors.New("read nft JSON: no table")
	}
	for _, m := range rules {
		r, err := t.parseRule(m)
		if err != nil {
			return nil, err
		}
		c := t.chains[r.chain]
		if c == nil {
			return nil, fmt.Errorf("rule %d: chain %q is not in table %s", r.handle, r.chain, t.Name)
		}
		c.rules = append(c.rules, r)
	}
	// A set the traffic fills (a "set" statement's) changes no verdict as
	// long as no rule looks it up: the model holds no traffic's history.
	for _, c := range t.chains {
		for _, r := range c.rules {
			for _, s := range r.stmts {
				if s.match != nil && t.updated[strings.TrimPrefix(s.match.named, "@")] {
					return nil, fmt.Errorf("rule %d of chain %s: it looks up set %s, which rules add to: lookups of what the traffic added are not modelled", r.handle, c.name, s.match.named)
				}
				if s.vmap != nil && t.updated[strings.TrimPrefix(s.vmap.named, "@")] {
					return nil, fmt.Errorf("rule %d of chain %s: map %s is one rules add to: not modelled", r.handle, c.name, s.vmap.named)
				}
			}
		}
	}
	// Jump and goto targets must exist.
	for _, c := range t.chains {
		for _, r := range c.rules {
			for _, s := range r.stmts {
				var vs []verdict
				if s.verdict != nil {
					vs = append(vs, *s.verdict)
				}
				if s.vmap != nil {
					for _, e := range s.vmap.elems {
						vs = append(vs, *e.verdict)
					}
				}
				for _, v := range vs {
					if v.target == "" {
						continue
					}
					if tc := t.chains[v.target]; tc == nil || tc.base {
						return nil, fmt.Errorf("rule %d of chain %s: %s: no such regular chain", r.handle, c.name, v)
					}
				}
			}
		}
	}
	return t, nil
}

func decode(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

func number(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(string(n))
	return i, err == nil
}

func parseChain(m map[string]any) (*chain, error) {
	c := &chain{}
	c.name, _ = m["name"].(string)
	c.handle, _ = number(m["handle"])
	hook, ok := m["hook"].(string)
	if !ok {
		return c, nil
	}
	c.base = true
	c.hook = Hook(hook)
	c.typ, _ = m["type"].(string)
	c.policy, _ = m["policy"].(string)
	var okPrio bool
	c.prio, okPrio = number(m["prio"])
	if !okPrio {
		return nil, fmt.Errorf("base chain %s: priority %v is not a number", c.name, m["prio"])
	}
	switch c.hook {
	case Prerouting, Input, Forward, Output, Postrouting:
	default:
		return nil, fmt.Errorf("base chain %s: hook %q is not modelled", c.name, hook)
	}
	if _, ok := m["dev"]; ok {
		return nil, fmt.Errorf("base chain %s: a chain bound to a device is not modelled", c.name)
	}
	switch c.policy {
	case "accept", "drop":
	default:
		return nil, fmt.Errorf("base chain %s: policy %q", c.name, c.policy)
	}
	return c, nil
}

func parseSet(m map[string]any) (*set, error) {
	s := &set{}
	s.name, _ = m["name"].(string)
	var types []any
	switch t := m["type"].(type) {
	case string:
		types = []any{t}
	case []any:
		types = t
	default:
		return nil, fmt.Errorf("set %s: type %v is not modelled", s.name, m["type"])
	}
	for _, ty := range types {
		name, _ := ty.(string)
		k, ok := setTypes[name]
		if !ok {
			return nil, fmt.Errorf("set %s: key type %v is not modelled", s.name, ty)
		}
		s.kinds = append(s.kinds, k)
	}
	if d, ok := m["map"]; ok {
		s.data, _ = d.(string)
		if s.data == "" {
			return nil, fmt.Errorf("map %s: data type %v is not modelled", s.name, d)
		}
	}
	elems, _ := m["elem"].([]any)
	for _, raw := range elems {
		if s.data == "" {
			e, err := parseElement(s.kinds, raw)
			if err != nil {
				return nil, fmt.Errorf("set %s: %w", s.name, err)
			}
			s.elems = append(s.elems, e)
			continue
		}
		if s.data != "verdict" {
			// Only verdict maps can be read by a rule of this package; the
			// elements of other maps are not needed.
			continue
		}
		e, err := parseMapping(s.kinds, raw)
		if err != nil {
			return nil, fmt.Errorf("map %s: %w", s.name, err)
		}
		s.elems = append(s.elems, e)
	}
	return s, nil
}

// parseMapping reads a verdict map's element, [key, verdict].
func parseMapping(kinds []kind, raw any) (element, error) {
	pair, ok := raw.([]any)
	if !ok || len(pair) != 2 {
		return element{}, fmt.Errorf("element %v is not a [key, verdict] pair", raw)
	}
	e, err := parseElement(kinds, pair[0])
	if err != nil {
		return element{}, err
	}
	v, err := parseVerdict(pair[1])
	if err != nil {
		return element{}, fmt.Errorf("element %v: %w", pair[0], err)
	}
	e.verdict = v
	return e, nil
}

var verdictKinds = []string{"accept", "drop", "reject", "continue", "return", "jump", "goto"}

// parseVerdict reads {"accept": null}, {"jump": {"target": "x"}}…; it
// returns nil, nil when raw is not a verdict.
func parseVerdict(raw any) (*verdict, error) {
	m, ok := raw.(map[string]any)
	if !ok || len(m) != 1 {
		return nil, fmt.Errorf("%v is not a verdict", raw)
	}
	for k, arg := range m {
		if !slices.Contains(verdictKinds, k) {
			return nil, fmt.Errorf("%v is not a verdict", raw)
		}
		v := &verdict{kind: k}
		switch k {
		case "jump", "goto":
			a, _ := arg.(map[string]any)
			v.target, _ = a["target"].(string)
			if v.target == "" {
				return nil, fmt.Errorf("%s without a target", k)
			}
		case "reject":
			// The kind of reject (ICMP type, TCP reset) does not change
			// that the packet goes no further.
		default:
			if arg != nil {
				return nil, fmt.Errorf("%s with an argument %v", k, arg)
			}
		}
		return v, nil
	}
	panic("unreachable")
}

func (t *Table) parseRule(m map[string]any) (*rule, error) {
	r := &rule{}
	r.chain, _ = m["chain"].(string)
	r.handle, _ = number(m["handle"])
	r.comment, _ = m["comment"].(string)
	exprs, _ := m["expr"].([]any)
	limited := false
	for _, raw := range exprs {
		s, isLimit, err := t.parseStmt(raw)
		if err != nil {
			return nil, fmt.Errorf("rule %d of chain %s: %w", r.handle, r.chain, err)
		}
		if isLimit {
			limited = true
			continue
		}
		if limited && (s.verdict != nil || s.vmap != nil) {
			return nil, fmt.Errorf("rule %d of chain %s: a verdict after a limit depends on the packet rate, which is not modelled", r.handle, r.chain)
		}
		if s.match != nil || s.vmap != nil || s.verdict != nil {
			r.stmts = append(r.stmts, s)
		}
	}
	return r, nil
}

// parseStmt compiles one statement; isLimit reports a limit, which only
// counts when a verdict follows it.
func (t *Table) parseStmt(raw any) (s stmt, isLimit bool, err error) {
	m, ok := raw.(map[string]any)
	if !ok || len(m) != 1 {
		return s, false, fmt.Errorf("statement %v is not an object with one key", raw)
	}
	for key, arg := range m {
		switch key {
		case "counter", "log":
			return s, false, nil
		case "set":
			// Adds the packet's key to a set, changing no verdict (Parse
			// refuses lookups of such a set).
			sm, _ := arg.(map[string]any)
			name, _ := sm["set"].(string)
			op, _ := sm["op"].(string)
			if op != "add" && op != "update" {
				return s, false, fmt.Errorf("set statement %q is not modelled", op)
			}
			if len(name) < 2 || name[0] != '@' || t.sets[name[1:]] == nil {
				return s, false, fmt.Errorf("set statement on %q: no such set in table %s", name, t.Name)
			}
			t.updated[name[1:]] = true
			return s, false, nil
		case "limit":
			return s, true, nil
		case "match":
			mt, err := t.parseMatch(arg)
			s.match = mt
			return s, false, err
		case "vmap":
			vm, err := t.parseVmap(arg)
			s.vmap = vm
			return s, false, err
		}
		if slices.Contains(verdictKinds, key) {
			v, err := parseVerdict(raw)
			s.verdict = v
			return s, false, err
		}
		return s, false, fmt.Errorf("statement %q is not modelled", key)
	}
	panic("unreachable")
}

func (t *Table) parseMatch(arg any) (*match, error) {
	m, _ := arg.(map[string]any)
	op, _ := m["op"].(string)
	sels, err := parseSelectors(m["left"])
	if err != nil {
		return nil, err
	}
	mt := &match{sels: sels, op: op}
	kinds := selectorKinds(sels)
	switch op {
	case "==", "!=", "in":
	case "<", ">", "<=", ">=":
		if len(sels) != 1 || !numeric(sels[0].kind) {
			return nil, fmt.Errorf("%s %s: ordering is modelled for numbers only", sels[0], op)
		}
		if _, isLit := m["right"].(json.Number); !isLit {
			return nil, fmt.Errorf("%s %s %v: ordering is modelled against a number only", sels[0], op, m["right"])
		}
	default:
		return nil, fmt.Errorf("operator %q is not modelled", op)
	}
	mt.right, mt.named, err = t.parseRight(kinds, m["right"], false)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", selectorsString(sels), op, err)
	}
	return mt, nil
}

func (t *Table) parseVmap(arg any) (*vmap, error) {
	m, _ := arg.(map[string]any)
	sels, err := parseSelectors(m["key"])
	if err != nil {
		return nil, err
	}
	vm := &vmap{sels: sels}
	vm.elems, vm.named, err = t.parseRight(selectorKinds(sels), m["data"], true)
	if err != nil {
		return nil, fmt.Errorf("vmap on %s: %w", selectorsString(sels), err)
	}
	return vm, nil
}

// parseRight reads what a selector is compared with, or a verdict map's
// data: a named set or map (@name), an anonymous set, or one literal,
// prefix or range.
func (t *Table) parseRight(kinds []kind, raw any, verdicts bool) ([]element, string, error) {
	if name, ok := raw.(string); ok && len(name) > 1 && name[0] == '@' {
		s := t.sets[name[1:]]
		if s == nil {
			return nil, "", fmt.Errorf("set %s is not in table %s", name, t.Name)
		}
		if !slices.Equal(s.kinds, kinds) {
			return nil, "", fmt.Errorf("set %s holds %v, compared with %v", name, s.kinds, kinds)
		}
		if verdicts != (s.data == "verdict") || (!verdicts && s.data != "") {
			return nil, "", fmt.Errorf("%s is a map of %q, used as %s", name, s.data, map[bool]string{true: "a verdict map", false: "a set"}[verdicts])
		}
		return s.elems, name, nil
	}
	if m, ok := raw.(map[string]any); ok && len(m) == 1 {
		if list, ok := m["set"].([]any); ok {
			var elems []element
			for _, e := range list {
				var el element
				var err error
				if verdicts {
					el, err = parseMapping(kinds, e)
				} else {
					el, err = parseElement(kinds, e)
				}
				if err != nil {
					return nil, "", err
				}
				elems = append(elems, el)
			}
			return elems, "", nil
		}
		if _, ok := m["set"]; ok {
			return nil, "", fmt.Errorf("anonymous set %v is not a list", raw)
		}
	}
	if verdicts {
		return nil, "", fmt.Errorf("verdict map data %v is neither @name nor an anonymous map", raw)
	}
	// One literal, prefix or range (nft also prints a one-element
	// anonymous set this way).
	e, err := parseElement(kinds, raw)
	if err != nil {
		return nil, "", err
	}
	return []element{e}, "", nil
}

func numeric(k kind) bool {
	switch k {
	case kPort, kProto, kMark, kICMPType, kICMPv6Type:
		return true
	}
	return false
}
