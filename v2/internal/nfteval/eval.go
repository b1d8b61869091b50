package nfteval

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Verdict is what a hook's base chains do with a packet.
type Verdict string

const (
	Accept Verdict = "accept"
	Drop   Verdict = "drop"
	// Reject drops the packet and answers the sender.
	Reject Verdict = "reject"
)

// Decision names what gave a base chain's verdict: a rule (its chain,
// handle and comment), or the base chain's policy (Policy true, Handle 0).
type Decision struct {
	Verdict Verdict
	Chain   string
	Handle  int
	Comment string
	Policy  bool
	// Path is the chains the packet went through, from the base chain to
	// Chain, for messages.
	Path []string
	// Returned names the rules whose return the packet took on its way
	// ("chain#handle"), for messages: with a layout whose rules permit by
	// returning, they are what let the packet reach the policy.
	Returned []string
}

func (d Decision) String() string {
	var s string
	if d.Policy {
		s = fmt.Sprintf("%s by the policy of chain %s", d.Verdict, d.Chain)
	} else {
		s = fmt.Sprintf("%s by rule %d of chain %s", d.Verdict, d.Handle, d.Chain)
	}
	if d.Comment != "" {
		s += fmt.Sprintf(" (%q)", d.Comment)
	}
	if len(d.Path) > 1 {
		s += " via " + strings.Join(d.Path, " > ")
	}
	if len(d.Returned) > 0 {
		s += " after return by " + strings.Join(d.Returned, ", ")
	}
	return s
}

// Result is the verdict of a hook's base chains for one packet.
type Result struct {
	Verdict Verdict
	// By is the decision that gave Verdict: the first base chain's that
	// dropped or rejected the packet; when all accepted it, the last accept
	// given by a rule (a chain whose policy accepted had no opinion), or
	// the last chain's policy when no rule accepted.
	By Decision
	// Chains holds each base chain's decision, in the order the kernel runs
	// them (priority, then handle); a chain after a drop is not run.
	Chains []Decision
	// Applies is false when the table has no base chain of the hook for
	// the packet's family: the table lets the packet pass (Verdict Accept).
	Applies bool
}

// Allowed says whether the packet goes on.
func (r Result) Allowed() bool { return r.Verdict == Accept }

func (r Result) String() string {
	if !r.Applies {
		return "accept (no base chain of the hook)"
	}
	return r.By.String()
}

// maxDepth is the kernel's jump stack (NFT_JUMP_STACK_SIZE).
const maxDepth = 16

// Evaluate runs p through the table's base chains of hook, as the kernel
// does: in priority order, each chain's accept lets the packet on to the
// next chain, a drop or reject ends it. Base chains of another type than
// filter at that hook are an error (NAT or rerouting is not modelled), as is
// any rule whose outcome for p is undefined.
func (t *Table) Evaluate(hook Hook, p Packet) (Result, error) {
	if err := p.check(hook); err != nil {
		return Result{}, err
	}
	res := Result{Verdict: Accept}
	if (t.Family == "ip" && !p.Src.Is4()) || (t.Family == "ip6" && p.Src.Is4()) {
		return res, nil
	}
	var bases []*chain
	for _, c := range t.chains {
		if c.base && c.hook == hook {
			if c.typ != "filter" {
				return Result{}, fmt.Errorf("table %s %s: base chain %s at %s is of type %q; only filter chains are modelled", t.Family, t.Name, c.name, hook, c.typ)
			}
			bases = append(bases, c)
		}
	}
	slices.SortFunc(bases, func(a, b *chain) int {
		return cmp.Or(cmp.Compare(a.prio, b.prio), cmp.Compare(a.handle, b.handle))
	})
	for _, c := range bases {
		d, err := t.run(c, &p)
		if err != nil {
			return Result{}, fmt.Errorf("table %s %s, %s at %s: %w", t.Family, t.Name, p, hook, err)
		}
		res.Chains = append(res.Chains, d)
		if !res.Applies || !d.Policy || d.Verdict != Accept || res.By.Policy {
			res.By = d
		}
		res.Applies = true
		if d.Verdict != Accept {
			res.Verdict = d.Verdict
			break
		}
	}
	return res, nil
}

// run runs one base chain: jump pushes a return point, goto replaces the
// current chain, return and the end of a regular chain go back to the last
// return point, and the end of the base chain (or a return in it) applies
// its policy.
func (t *Table) run(base *chain, p *Packet) (Decision, error) {
	type frame struct {
		c    *chain
		next int
		// via is the chains that went to c by goto, for the path.
		via []string
	}
	stack := []frame{{c: base}}
	var returned []string
	pathOf := func() []string {
		var ps []string
		for _, f := range stack {
			ps = append(append(ps, f.via...), f.c.name)
		}
		return ps
	}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next >= len(top.c.rules) {
			stack = stack[:len(stack)-1]
			continue
		}
		r := top.c.rules[top.next]
		top.next++
		v, err := r.eval(p)
		if err != nil {
			return Decision{}, fmt.Errorf("rule %d of chain %s: %w", r.handle, r.chain, err)
		}
		if v == nil {
			continue
		}
		switch v.kind {
		case "continue":
		case "accept", "drop", "reject":
			return Decision{Verdict: Verdict(v.kind), Chain: r.chain, Handle: r.handle, Comment: r.comment, Path: pathOf(), Returned: returned}, nil
		case "return":
			returned = append(returned, fmt.Sprintf("%s#%d", r.chain, r.handle))
			stack = stack[:len(stack)-1]
		case "jump":
			if len(stack) >= maxDepth {
				return Decision{}, fmt.Errorf("rule %d of chain %s: jump to %s exceeds the kernel's %d nested chains", r.handle, r.chain, v.target, maxDepth)
			}
			stack = append(stack, frame{c: t.chains[v.target]})
		case "goto":
			// The goto'd chain's end returns where the current chain's
			// would.
			stack[len(stack)-1] = frame{c: t.chains[v.target], via: append(slices.Clone(top.via), top.c.name)}
		}
	}
	return Decision{Verdict: Verdict(base.policy), Chain: base.name, Policy: true, Path: []string{base.name}, Returned: returned}, nil
}

// eval runs one rule's statements: a failed match or a missed verdict map
// ends the rule without a verdict (nil).
func (r *rule) eval(p *Packet) (*verdict, error) {
	for _, s := range r.stmts {
		switch {
		case s.match != nil:
			ok, err := s.match.eval(p)
			if err != nil || !ok {
				return nil, err
			}
		case s.vmap != nil:
			vs, ok, err := values(s.vmap.sels, p)
			if err != nil || !ok {
				return nil, err
			}
			e, err := lookup(s.vmap.elems, selectorKinds(s.vmap.sels), vs)
			if err != nil || e == nil {
				return nil, err
			}
			return e.verdict, nil
		case s.verdict != nil:
			return s.verdict, nil
		}
	}
	return nil, nil
}

func values(sels []selector, p *Packet) ([]value, bool, error) {
	vs := make([]value, len(sels))
	for i, s := range sels {
		v, ok, err := s.get(p)
		if err != nil || !ok {
			return nil, ok, err
		}
		vs[i] = v
	}
	return vs, true, nil
}

func (m *match) eval(p *Packet) (bool, error) {
	vs, ok, err := values(m.sels, p)
	if err != nil || !ok {
		return false, err
	}
	switch m.op {
	case "<", ">", "<=", ">=":
		if vs[0].unknown {
			return false, fmt.Errorf("%s %s: the value is not modelled (ports of a packet without ports)", m.sels[0], m.op)
		}
		v, lit := vs[0].num, m.right[0].key[0].lo.num
		return map[string]bool{"<": v < lit, ">": v > lit, "<=": v <= lit, ">=": v >= lit}[m.op], nil
	}
	e, err := lookup(m.right, selectorKinds(m.sels), vs)
	if err != nil {
		return false, fmt.Errorf("%s %s: %w", selectorsString(m.sels), m.op, err)
	}
	if m.op == "!=" {
		return e == nil, nil
	}
	return e != nil, nil
}
