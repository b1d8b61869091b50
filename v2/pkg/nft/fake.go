package nft

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	gnft "github.com/google/nftables"
	"sigs.k8s.io/knftables"
)

// Fake is a Table in memory, for tests without root: knftables' Fake holds
// the table, and the Fake adds what it lacks: nft scripts (each statement
// applied in order, all or nothing, element commands with many elements
// included), element batches, and the reads (Read, Elements, Format) that
// adopt a table. Elements are read back through their layout's encoding,
// so that they come out as the kernel would list them ("10.0.0.1/32" as
// "10.0.0.1", "6" as "tcp"). A Fake outlives Close, so that a new renderer
// can adopt what an old one left.
type Fake struct {
	mu       sync.Mutex
	id       TableID
	layouts  Layouts
	knft     *knftables.Fake
	failNext error
	// exprSets are the sets declared with a counter per element, which
	// knftables' sets cannot hold.
	exprSets map[string]bool
	// Writes counts the successful writes: Run, RunScript, ApplyElements
	// and Delete.
	Writes int
}

var _ Table = (*Fake)(nil)

// NewFake is an empty namespace with the table family name to come.
func NewFake(family knftables.Family, name string, layouts Layouts) *Fake {
	return &Fake{id: TableID{family, name}, layouts: layouts, knft: knftables.NewFake(family, name)}
}

func (f *Fake) Family() knftables.Family { return f.id.Family }
func (f *Fake) Name() string             { return f.id.Name }
func (f *Fake) Close()                   {}

func (f *Fake) NewTransaction() *knftables.Transaction {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.knft.NewTransaction()
}

// FailNext makes the next write fail with err, changing nothing.
func (f *Fake) FailNext(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

// Dump is the table's content as nft statements ("" without a table), in
// knftables' Fake.Dump form.
func (f *Fake) Dump() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return verdictCommaHeld.ReplaceAllString(f.knft.Dump(), "$1 $2,")
}

// KnftTable is the table as knftables' Fake holds it (nil when it does not
// exist), for tests to inspect; it must not be changed. A rule's inline
// verdict map is held with a space before each comma ("goto c ,").
func (f *Fake) KnftTable() *knftables.FakeTable {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.knft.Table
}

func (f *Fake) fail() error {
	err := f.failNext
	f.failNext = nil
	if err != nil {
		return &Error{Table: f.id.String(), Message: err.Error(), Err: err}
	}
	return nil
}

func (f *Fake) fakeError(line int, statement string, err error) *Error {
	e := &Error{Table: f.id.String(), Line: line, Statement: shorten(statement), Message: err.Error(), Err: err}
	switch {
	case knftables.IsNotFound(err):
		e.Errno = syscall.ENOENT
	case knftables.IsAlreadyExists(err):
		e.Errno = syscall.EEXIST
	case errors.Is(err, syscall.EBUSY):
		e.Errno = syscall.EBUSY
	}
	return e
}

func (f *Fake) Run(ctx context.Context, tx *knftables.Transaction) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	return f.apply(func(next *knftables.Fake) error { return f.tx(ctx, next, tx) }, true)
}

func (f *Fake) Check(ctx context.Context, tx *knftables.Transaction) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apply(func(next *knftables.Fake) error { return f.tx(ctx, next, tx) }, false)
}

// tx applies tx statement by statement, as the kernel does: knftables'
// Fake checks references only when they are added.
func (f *Fake) tx(ctx context.Context, next *knftables.Fake, tx *knftables.Transaction) error {
	text, err := Script(tx)
	if err != nil {
		return &Error{Table: f.id.String(), Message: err.Error(), Err: err}
	}
	return f.script(ctx, next, text)
}

func (f *Fake) RunScript(ctx context.Context, script string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	if err := f.apply(func(next *knftables.Fake) error { return f.script(ctx, next, script) }, true); err != nil {
		return err
	}
	for _, line := range strings.Split(script, "\n") {
		words := strings.Fields(line)
		if len(words) >= 2 && words[1] == "table" && (words[0] == "delete" || words[0] == "destroy") {
			f.exprSets = nil
		}
		if len(words) < 5 || words[1] != "set" {
			continue
		}
		switch {
		case (words[0] == "add" || words[0] == "create") && strings.Contains(line, " counter ;"):
			if f.exprSets == nil {
				f.exprSets = map[string]bool{}
			}
			f.exprSets[words[4]] = true
		case words[0] == "delete" || words[0] == "destroy":
			delete(f.exprSets, words[4])
		}
	}
	return nil
}

func (f *Fake) CheckScript(ctx context.Context, script string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apply(func(next *knftables.Fake) error { return f.script(ctx, next, script) }, false)
}

// apply applies change to a copy of the namespace, checks what the kernel
// would refuse at the commit, and keeps the copy when commit is set:
// all or nothing, as a transaction.
func (f *Fake) apply(change func(*knftables.Fake) error, commit bool) error {
	next, err := f.copyOf()
	if err != nil {
		return err
	}
	if err := change(next); err != nil {
		return err
	}
	if commit {
		f.knft = next
		f.Writes++
	}
	return nil
}

// errBusy is the kernel's refusal to delete a chain in use.
var errBusy = busyError{"Could not process rule: Device or resource busy", syscall.EBUSY}

type busyError struct {
	msg   string
	errno syscall.Errno
}

func (e busyError) Error() string        { return e.msg }
func (e busyError) Is(target error) bool { return target == e.errno }

// references refuses a state where a map element or a rule jumps to a
// chain that is not there: the kernel refuses to delete a chain in use
// (EBUSY), and knftables' Fake checks references only when they are added.
func (f *Fake) references(knft *knftables.Fake) error {
	t := knft.Table
	if t == nil {
		return nil
	}
	missing := func(words []string) string {
		for i := 0; i+1 < len(words); i++ {
			chain := strings.TrimRight(words[i+1], ",;}")
			if (words[i] == "jump" || words[i] == "goto") && t.Chains[chain] == nil {
				return chain
			}
		}
		return ""
	}
	for _, name := range slices.Sorted(maps.Keys(t.Maps)) {
		for _, e := range t.Maps[name].Elements {
			if c := missing(strings.Fields(strings.Join(e.Value, " "))); c != "" {
				return fmt.Errorf("chain %s is used by map %s element %s: %w", c, name, strings.Join(e.Key, " . "), errBusy)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.Chains)) {
		for _, r := range t.Chains[name].Rules {
			if c := missing(strings.Fields(r.Rule)); c != "" {
				return fmt.Errorf("chain %s is used by a rule of chain %s: %w", c, name, errBusy)
			}
		}
	}
	return nil
}

// copyOf is a copy of the fake's namespace, to apply a change to. It is
// made of the objects themselves: knftables' Fake.ParseDump cannot read
// back a rule with a quoted string ("iifname != \"vcoil*\"").
func (f *Fake) copyOf() (*knftables.Fake, error) {
	next := knftables.NewFake(f.id.Family, f.id.Name)
	t := f.knft.Table
	if t == nil {
		return next, nil
	}
	tx := next.NewTransaction()
	table := t.Table
	table.Handle = nil
	tx.Add(&table)
	// Objects first, then what refers to them.
	addEach(tx, t.Chains, func(c *knftables.FakeChain) knftables.Object { o := c.Chain; o.Handle = nil; return &o })
	addEach(tx, t.Sets, func(s *knftables.FakeSet) knftables.Object { o := s.Set; o.Handle = nil; return &o })
	addEach(tx, t.Maps, func(m *knftables.FakeMap) knftables.Object { o := m.Map; o.Handle = nil; return &o })
	addEach(tx, t.Counters, func(c *knftables.FakeCounter) knftables.Object { o := c.Counter; o.Handle = nil; return &o })
	for _, name := range slices.Sorted(maps.Keys(t.Chains)) {
		for _, r := range t.Chains[name].Rules {
			rule := *r
			rule.Handle, rule.Index = nil, nil
			tx.Add(&rule)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.Sets)) {
		addElements(tx, t.Sets[name].Elements)
	}
	for _, name := range slices.Sorted(maps.Keys(t.Maps)) {
		addElements(tx, t.Maps[name].Elements)
	}
	if err := next.Run(context.Background(), tx); err != nil {
		return nil, fmt.Errorf("copy the fake table: %w", err)
	}
	return next, nil
}

func addEach[T any](tx *knftables.Transaction, m map[string]T, obj func(T) knftables.Object) {
	for _, name := range slices.Sorted(maps.Keys(m)) {
		tx.Add(obj(m[name]))
	}
}

func addElements(tx *knftables.Transaction, elems []*knftables.Element) {
	for _, e := range elems {
		elem := *e
		tx.Add(&elem)
	}
}

// parseRule reads "chain [index N] [handle N] rule [comment "c"]", what
// follows the table in an add rule statement.
func parseRule(rest string) (*knftables.Rule, error) {
	chain, text, ok := strings.Cut(strings.TrimSpace(rest), " ")
	if !ok || strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("syntax error, unexpected end of rule")
	}
	r := &knftables.Rule{Chain: chain}
	for _, kw := range []string{"index", "handle"} {
		if after, found := strings.CutPrefix(text, kw+" "); found {
			n, tail, _ := strings.Cut(after, " ")
			v, err := strconv.Atoi(n)
			if err != nil {
				return nil, fmt.Errorf("syntax error: %s %q", kw, n)
			}
			if kw == "index" {
				r.Index = &v
			} else {
				r.Handle = &v
			}
			text = tail
		}
	}
	// nft's comments cannot hold a quote: the last comment "..." is the
	// rule's when nothing follows it.
	if i := strings.LastIndex(text, ` comment "`); i >= 0 && strings.HasSuffix(text, `"`) &&
		!strings.Contains(text[i+len(` comment "`):len(text)-1], `"`) {
		r.Comment = knftables.PtrTo(text[i+len(` comment "`) : len(text)-1])
		text = text[:i]
	}
	// knftables' Fake looks the word after a goto or jump up as a chain:
	// "goto c," of an inline vmap is held as "goto c ," (Dump undoes it).
	r.Rule = verdictComma.ReplaceAllString(strings.TrimSpace(text), "$1 $2 ,")
	return r, nil
}

var (
	verdictComma     = regexp.MustCompile(`\b(goto|jump) ([^\s,]+),`)
	verdictCommaHeld = regexp.MustCompile(`\b(goto|jump) (\S+) ,`)
)

// script applies script to next, statement by statement.
func (f *Fake) script(ctx context.Context, next *knftables.Fake, script string) error {
	for i, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		err := f.statement(ctx, next, line)
		if err == nil {
			err = f.references(next)
		}
		if err != nil {
			return f.fakeError(i+1, line, err)
		}
	}
	return nil
}

// statement applies one line of a script.
func (f *Fake) statement(ctx context.Context, knft *knftables.Fake, line string) error {
	words := strings.Fields(line)
	if len(words) < 3 {
		return fmt.Errorf("syntax error, unexpected end of statement")
	}
	verb, kind := words[0], words[1]
	var name string
	if kind != "table" {
		if len(words) < 5 {
			return fmt.Errorf("syntax error, unexpected end of statement")
		}
		name = words[4]
	} else if len(words) < 4 {
		return fmt.Errorf("syntax error, unexpected end of statement")
	}
	if knftables.Family(words[2]) != f.id.Family || words[3] != f.id.Name {
		return fmt.Errorf("statement on another table %s %s: the fake holds one", words[2], words[3])
	}
	tx := knft.NewTransaction()
	switch {
	case kind == "element":
		return f.elementStatement(ctx, knft, verb, name, line)
	case kind == "rule" && (verb == "add" || verb == "insert"):
		_, rest, _ := strings.Cut(line, " "+words[3]+" ")
		r, err := parseRule(rest)
		if err != nil {
			return err
		}
		if verb == "add" {
			tx.Add(r)
		} else {
			tx.Insert(r)
		}
	case verb == "add" || (verb == "create" && !f.has(knft, kind, name)):
		if kind == "set" {
			// A counter per element, which knftables' sets do not
			// have: the fake keeps no counts.
			line = strings.Replace(line, " counter ;", "", 1)
		}
		return knft.ParseDump("add" + strings.TrimPrefix(line, verb))
	case verb == "create":
		return fmt.Errorf("Could not process rule: File exists")
	case verb == "delete" || verb == "destroy" || verb == "flush":
		obj, err := namedObject(kind, name, words[min(5, len(words)):])
		if err != nil {
			return err
		}
		switch verb {
		case "delete":
			tx.Delete(obj)
		case "destroy":
			tx.Destroy(obj)
		default:
			tx.Flush(obj)
		}
	default:
		return fmt.Errorf("the fake does not apply %q statements", verb+" "+kind)
	}
	return knft.Run(ctx, tx)
}

func (f *Fake) has(knft *knftables.Fake, kind, name string) bool {
	t := knft.Table
	if t == nil {
		return false
	}
	switch kind {
	case "table":
		return true
	case "chain":
		return t.Chains[name] != nil
	case "set":
		return t.Sets[name] != nil
	case "map":
		return t.Maps[name] != nil
	case "counter":
		return t.Counters[name] != nil
	}
	return false
}

func namedObject(kind, name string, rest []string) (knftables.Object, error) {
	switch kind {
	case "table":
		return &knftables.Table{}, nil
	case "chain":
		return &knftables.Chain{Name: name}, nil
	case "set":
		return &knftables.Set{Name: name}, nil
	case "map":
		return &knftables.Map{Name: name}, nil
	case "counter":
		return &knftables.Counter{Name: name}, nil
	case "rule":
		if len(rest) == 2 && rest[0] == "handle" {
			h, err := strconv.Atoi(rest[1])
			if err == nil {
				return &knftables.Rule{Chain: name, Handle: &h}, nil
			}
		}
	}
	return nil, fmt.Errorf("the fake does not apply this statement on a %s", kind)
}

// elementStatement applies "add|delete element fam table set { e1, e2 }".
func (f *Fake) elementStatement(ctx context.Context, knft *knftables.Fake, verb, set, line string) error {
	open, end := strings.Index(line, "{"), strings.LastIndex(line, "}")
	if open < 0 || end < open {
		return fmt.Errorf("syntax error: element statement without braces")
	}
	isMap := knft.Table != nil && knft.Table.Maps[set] != nil
	tx := knft.NewTransaction()
	for _, text := range strings.Split(line[open+1:end], ",") {
		if text = strings.TrimSpace(text); text == "" {
			continue
		}
		key, value := SplitElement(text)
		if err := f.validate(set, key, value); err != nil {
			return err
		}
		e := &knftables.Element{Key: key}
		if isMap {
			e.Map, e.Value = set, value
		} else {
			e.Set = set
		}
		switch verb {
		case "add":
			tx.Add(e)
		case "create":
			tx.Create(e)
		case "delete":
			e.Value = nil
			tx.Delete(e)
		case "destroy":
			e.Value = nil
			tx.Destroy(e)
		default:
			return fmt.Errorf("the fake does not apply %q on elements", verb)
		}
	}
	return knft.Run(ctx, tx)
}

// validate encodes an element of a set with a declared layout, as the
// kernel would refuse what cannot be.
func (f *Fake) validate(set string, key, value []string) error {
	if f.layouts == nil {
		return nil
	}
	l, ok := f.layouts(set)
	if !ok {
		return nil
	}
	_, err := l.encode(key, value)
	return err
}

func (f *Fake) ApplyElements(ctx context.Context, ops []ElementOp) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fail(); err != nil {
		return err
	}
	return f.apply(func(next *knftables.Fake) error {
		tx := next.NewTransaction()
		for _, op := range ops {
			l, err := f.layout(op.Set)
			if err != nil {
				return err
			}
			value := op.Value
			if op.Delete {
				value = nil
			}
			if _, err := l.encode(op.Key, value); err != nil {
				return fmt.Errorf("nftables table %s: set %s: %w", f.id, op.Set, err)
			}
			e := &knftables.Element{Key: op.Key}
			if next.Table != nil && next.Table.Maps[op.Set] != nil {
				e.Map, e.Value = op.Set, value
			} else {
				e.Set = op.Set
			}
			if op.Delete {
				tx.Delete(e)
			} else {
				tx.Add(e)
			}
		}
		if err := next.Run(ctx, tx); err != nil {
			return fmt.Errorf("nftables table %s: netlink batch of %d element changes: %w", f.id, len(ops),
				f.fakeError(0, "", err))
		}
		return nil
	}, true)
}

func (f *Fake) layout(set string) (Layout, error) { return f.layouts.of(f.id, set) }

func (f *Fake) Read(ctx context.Context) (*Contents, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &Contents{Sets: map[string]*SetInfo{}, Chains: map[string]*ChainInfo{}, Counters: map[string]bool{}}
	t := f.knft.Table
	if t == nil {
		return c, nil
	}
	c.Exists = true
	for name, s := range t.Sets {
		c.Sets[name] = &SetInfo{Name: name, Type: s.Type, Interval: slices.Contains(s.Flags, knftables.IntervalFlag), Comment: deref(s.Comment),
			Dynamic: slices.Contains(s.Flags, knftables.DynamicFlag), ElementExprs: f.exprSets[name]}
	}
	for name, m := range t.Maps {
		key, value, _ := strings.Cut(m.Type, " : ")
		c.Sets[name] = &SetInfo{Name: name, Map: true, Type: key, ValueType: value,
			Interval: slices.Contains(m.Flags, knftables.IntervalFlag), Comment: deref(m.Comment)}
	}
	for name, ch := range t.Chains {
		info := &ChainInfo{Name: name, Base: ch.Hook != nil, Rules: []string{}}
		for _, r := range ch.Rules {
			info.Rules = append(info.Rules, deref(r.Comment))
		}
		c.Chains[name] = info
	}
	for name := range t.Counters {
		c.Counters[name] = true
	}
	return c, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (f *Fake) Elements(ctx context.Context, set string) ([]*knftables.Element, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l, err := f.layout(set)
	if err != nil {
		return nil, err
	}
	t := f.knft.Table
	var elems []*knftables.Element
	switch {
	case t != nil && t.Sets[set] != nil:
		elems = t.Sets[set].Elements
	case t != nil && t.Maps[set] != nil:
		elems = t.Maps[set].Elements
	default:
		return nil, fmt.Errorf("nftables table %s: list set %s: %w", f.id, set, syscall.ENOENT)
	}
	// Through the kernel's encoding and back, as the kernel lists them.
	var raw []gnft.SetElement
	for _, e := range elems {
		r, err := l.encode(e.Key, e.Value)
		if err != nil {
			return nil, fmt.Errorf("nftables table %s: set %s: %w", f.id, set, err)
		}
		raw = append(raw, r...)
	}
	return l.elements(f.id, set, raw)
}

func (f *Fake) Counters(ctx context.Context) ([]Counter, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Counter
	if t := f.knft.Table; t != nil {
		for _, name := range slices.Sorted(maps.Keys(t.Counters)) {
			out = append(out, Counter{Name: name})
		}
	}
	return out, nil
}

// ElementCounters lists the set's elements, each with no packets: the
// fake counts nothing.
func (f *Fake) ElementCounters(ctx context.Context, set string) ([]ElementCounter, error) {
	elems, err := f.Elements(ctx, set)
	if err != nil {
		return nil, err
	}
	out := make([]ElementCounter, 0, len(elems))
	for _, e := range elems {
		out = append(out, ElementCounter{Key: e.Key})
	}
	return out, nil
}

func (f *Fake) Format(ctx context.Context, kind string) (int, bool, error) {
	return format(ctx, f, kind)
}

func (f *Fake) CheckFormat(ctx context.Context, kind string, known int) error {
	return checkFormat(ctx, f, kind, known)
}

func (f *Fake) Delete(ctx context.Context) error {
	tx := f.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	if err := f.Run(ctx, tx); err != nil {
		return err
	}
	f.mu.Lock()
	f.exprSets = nil
	f.mu.Unlock()
	return nil
}

func (f *Fake) Text(ctx context.Context) (string, error) {
	return f.Dump(), ctx.Err()
}
