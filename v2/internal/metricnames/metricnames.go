// Package metricnames finds, in the source of Go programs, the names of the
// Prometheus metrics they export: every prometheus.*Opts composite literal
// (CounterOpts, GaugeOpts, HistogramOpts, SummaryOpts, ...) and every
// NewDesc call of client_golang, with Namespace, Subsystem and Name (or
// NewDesc's fqName) evaluated as constants by go/types.
//
// A name part may also be a parameter of the function that holds the
// literal (a helper that builds the same set of metrics for several
// callers): the metric is then declared at each call of that function, with
// the constant the call passes. A call that passes no constant, a function
// that assigns to such a parameter, or one used other than by a call (a
// function value) is refused, as any other name it cannot evaluate.
//
// It exists so that what names metrics (a dashboard, alert rules) can be
// checked against the code. It refuses what it cannot evaluate (a name that
// is not a constant, an Opts field assigned after the literal) instead of
// skipping it, so that the set cannot silently miss a metric. It does not
// look into third-party modules: the metrics of frameworks (controller-runtime,
// client_golang's Go and process collectors) are for the caller to list.
package metricnames

import (
	"errors"
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"maps"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// PrometheusPkg is client_golang's package, whose Opts and NewDesc name
// metrics.
const PrometheusPkg = "github.com/prometheus/client_golang/prometheus"

// Kind is what a name was declared as.
type Kind string

const (
	Counter   Kind = "counter"
	Gauge     Kind = "gauge"
	Histogram Kind = "histogram"
	Summary   Kind = "summary"
	Untyped   Kind = "untyped"
	// Desc is a NewDesc: its metrics are made at collection time
	// (MustNewConstMetric), of a kind the source does not say.
	Desc Kind = "desc"
)

// optsKinds maps client_golang's Opts types to the kind of metric they make.
var optsKinds = map[string]Kind{
	"Opts":          Untyped,
	"CounterOpts":   Counter,
	"GaugeOpts":     Gauge,
	"UntypedOpts":   Untyped,
	"HistogramOpts": Histogram,
	"SummaryOpts":   Summary,
}

// Metric is one declared metric.
type Metric struct {
	// Name is the metric's full name (namespace_subsystem_name).
	Name string
	Kind Kind
	// Pos is where it is declared (file:line:column).
	Pos string
}

// Series are the names of the series the metric exports: a histogram's
// _bucket, _sum and _count; a summary's quantiles under the name itself and
// its _sum and _count; otherwise the name.
func (m Metric) Series() []string {
	switch m.Kind {
	case Histogram:
		return []string{m.Name + "_bucket", m.Name + "_sum", m.Name + "_count"}
	case Summary:
		return []string{m.Name, m.Name + "_sum", m.Name + "_count"}
	}
	return []string{m.Name}
}

// Load type-checks the packages matching patterns (run in dir) and every
// package of the same module they import, and returns the metrics those
// packages declare, by series name. Tests are not loaded: their metrics
// are not exported by the programs.
func Load(dir string, patterns ...string) (map[string]Metric, error) {
	// First the import graph only (no type checking), to find the module's
	// packages that the programs link.
	graph, err := packages.Load(&packages.Config{
		Dir:  dir,
		Mode: packages.NeedName | packages.NeedImports | packages.NeedDeps | packages.NeedModule,
	}, patterns...)
	if err != nil {
		return nil, fmt.Errorf("list packages %v in %s: %w", patterns, dir, err)
	}
	if len(graph) == 0 {
		return nil, fmt.Errorf("no packages match %v in %s", patterns, dir)
	}
	var errs []error
	local := map[string]bool{}
	packages.Visit(graph, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("package %s: %s", p.PkgPath, e))
		}
		if p.Module != nil && p.Module.Main {
			local[p.PkgPath] = true
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	pkgs, err := packages.Load(&packages.Config{
		Dir:  dir,
		Mode: packages.NeedName | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
	}, slices.Sorted(maps.Keys(local))...)
	if err != nil {
		return nil, fmt.Errorf("load packages of %v in %s: %w", patterns, dir, err)
	}
	var checked []*packages.Package
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("package %s: %s", p.PkgPath, e))
		}
		if len(p.Errors) == 0 {
			checked = append(checked, p)
		}
	}
	// Every package's declarations first, then the calls of the functions
	// whose names come from their parameters, wherever they are.
	s := newScanner()
	for _, p := range checked {
		s.declare(p.PkgPath, p.Fset, p.TypesInfo, p.Syntax)
	}
	for _, p := range checked {
		s.resolve(p.PkgPath, p.Fset, p.TypesInfo, p.Syntax)
	}
	out := map[string]Metric{}
	for _, m := range s.metrics {
		for _, series := range m.Series() {
			out[series] = m
		}
	}
	return out, errors.Join(append(errs, s.errs...)...)
}

// Declared returns the metrics the files of one package declare, and an
// error for each declaration whose name it cannot evaluate. A name that
// comes from a parameter is declared at the calls the files hold.
func Declared(fset *token.FileSet, info *types.Info, files []*ast.File) ([]Metric, error) {
	s := newScanner()
	s.declare("", fset, info, files)
	s.resolve("", fset, info, files)
	return s.metrics, errors.Join(s.errs...)
}

// scanner gathers the metrics of packages in two passes: declare reads the
// declarations of every package, resolve then reads the calls of the
// functions whose declarations take name parts from their parameters.
type scanner struct {
	metrics []Metric
	errs    []error
	// templates are those declarations, by their function's full name.
	templates map[string][]template
}

func newScanner() *scanner { return &scanner{templates: map[string][]template{}} }

// part is a name part: a constant, or a parameter of the function holding
// the declaration.
type part struct {
	value string
	param int // index among the function's parameters; -1 for a constant
	name  string
}

// template is a declaration with at least one part a parameter.
type template struct {
	kind Kind
	// what the declaration is ("prometheus.CounterOpts literal",
	// "NewDesc"), labels what each part is ("Name", "fqName", ...), as
	// errors say them.
	what   string
	labels [3]string
	parts  [3]part
	pos    token.Position
	fn     *types.Func
}

func (s *scanner) fail(pkg string, err error) {
	if pkg != "" {
		err = fmt.Errorf("package %s: %w", pkg, err)
	}
	s.errs = append(s.errs, err)
}

func (s *scanner) declare(pkg string, fset *token.FileSet, info *types.Info, files []*ast.File) {
	for _, f := range files {
		for _, d := range f.Decls {
			var fn *types.Func
			var body *ast.BlockStmt
			if fd, ok := d.(*ast.FuncDecl); ok {
				fn, _ = info.Defs[fd.Name].(*types.Func)
				body = fd.Body
			}
			ast.Inspect(d, func(n ast.Node) bool {
				s.declaration(pkg, fset, info, fn, body, n)
				return true
			})
		}
	}
}

// declaration notes the metric n declares, if it declares one. fn is the
// function holding n (nil outside functions), body its body.
func (s *scanner) declaration(pkg string, fset *token.FileSet, info *types.Info, fn *types.Func, body *ast.BlockStmt, n ast.Node) {
	ev := evaluator{info: info, fn: fn, body: body}
	var t template
	var err error
	switch n := n.(type) {
	case *ast.CompositeLit:
		kind, ok := optsKind(info.TypeOf(n))
		if !ok {
			return
		}
		t = template{kind: kind, what: types.TypeString(info.TypeOf(n), func(p *types.Package) string { return p.Name() }) + " literal"}
		t.labels, t.parts, err = ev.optsParts(n)
	case *ast.CallExpr:
		if !isNewDesc(info, n) || len(n.Args) == 0 {
			return
		}
		t = template{kind: Desc, what: "NewDesc"}
		t.labels, t.parts, err = ev.fqNameParts(n.Args[0])
	case *ast.AssignStmt:
		// o.Name = x after the literal would change a name the
		// literal does not show.
		for _, lhs := range n.Lhs {
			sel, ok := lhs.(*ast.SelectorExpr)
			if !ok || !nameField(sel.Sel.Name) {
				continue
			}
			if _, ok := optsKind(info.TypeOf(sel.X)); ok {
				s.fail(pkg, fmt.Errorf("%s: %s assigned outside an Opts literal: its value cannot be checked",
					fset.Position(lhs.Pos()), sel.Sel.Name))
			}
		}
		return
	default:
		return
	}
	t.pos, t.fn = fset.Position(n.Pos()), fn
	if err != nil {
		s.fail(pkg, fmt.Errorf("%s: %s: %w", t.pos, t.what, err))
		return
	}
	if !t.fromParams() {
		m, err := t.metric(nil)
		if err != nil {
			s.fail(pkg, fmt.Errorf("%s: %s: %w", t.pos, t.what, err))
			return
		}
		m.Pos = t.pos.String()
		s.metrics = append(s.metrics, m)
		return
	}
	key := fn.Origin().FullName()
	s.templates[key] = append(s.templates[key], t)
}

func (t template) fromParams() bool {
	for _, p := range t.parts {
		if p.param >= 0 {
			return true
		}
	}
	return false
}

// metric is the template's metric with args, the constants a call passes
// for the parameters (nil when no part is a parameter).
func (t template) metric(args []string) (Metric, error) {
	var v [3]string
	for i, p := range t.parts {
		v[i] = p.value
		if p.param >= 0 {
			v[i] = args[p.param]
		}
	}
	name := buildFQName(v[0], v[1], v[2])
	if name == "" {
		if t.kind == Desc {
			return Metric{}, fmt.Errorf("empty fqName")
		}
		return Metric{}, fmt.Errorf("no Name")
	}
	return Metric{Name: name, Kind: t.kind}, nil
}

// resolve declares the metrics of the templates at their functions' calls
// in files, and refuses every other use of those functions: a function
// value could be called with anything.
func (s *scanner) resolve(pkg string, fset *token.FileSet, info *types.Info, files []*ast.File) {
	if len(s.templates) == 0 {
		return
	}
	for _, f := range files {
		called := map[*ast.Ident]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				id := calleeIdent(n)
				fn, ok := info.Uses[id].(*types.Func)
				if !ok {
					return true
				}
				ts := s.templates[fn.Origin().FullName()]
				if len(ts) == 0 {
					return true
				}
				called[id] = true
				s.call(pkg, fset, info, n, fn, ts)
			case *ast.Ident:
				fn, ok := info.Uses[n].(*types.Func)
				if ok && !called[n] && len(s.templates[fn.Origin().FullName()]) > 0 {
					s.fail(pkg, fmt.Errorf("%s: %s is used other than by a call: the metric names it makes from its parameters cannot be checked",
						fset.Position(n.Pos()), fn.Name()))
				}
			}
			return true
		})
	}
}

// call declares the metrics of the templates ts of fn at one of its calls.
func (s *scanner) call(pkg string, fset *token.FileSet, info *types.Info, call *ast.CallExpr, fn *types.Func, ts []template) {
	pos := fset.Position(call.Pos())
	params := fn.Signature().Params()
	if len(call.Args) != params.Len() || call.Ellipsis.IsValid() {
		s.fail(pkg, fmt.Errorf("%s: call of %s: its arguments cannot be matched with its parameters, of which metric names are made", pos, fn.Name()))
		return
	}
	args := make([]string, len(call.Args))
	bad := make([]error, len(call.Args))
	for i, a := range call.Args {
		args[i], bad[i] = constString(info, a)
	}
	for _, t := range ts {
		failed := false
		for i, p := range t.parts {
			if p.param >= 0 && bad[p.param] != nil {
				failed = true
				s.fail(pkg, fmt.Errorf("%s: %s: %s: %s is not a string constant: it is a parameter of %s, and this call passes %s (the literal is at %s)",
					pos, t.what, t.labels[i], p.name, fn.Name(), types.ExprString(call.Args[p.param]), t.pos))
			}
		}
		if failed {
			continue
		}
		m, err := t.metric(args)
		if err != nil {
			s.fail(pkg, fmt.Errorf("%s: %s (at %s): %w", pos, t.what, t.pos, err))
			continue
		}
		m.Pos = pos.String()
		s.metrics = append(s.metrics, m)
	}
}

func calleeIdent(call *ast.CallExpr) *ast.Ident {
	fun := call.Fun
	// A generic function's instantiation: f[T](...).
	switch f := fun.(type) {
	case *ast.IndexExpr:
		fun = f.X
	case *ast.IndexListExpr:
		fun = f.X
	}
	switch f := fun.(type) {
	case *ast.Ident:
		return f
	case *ast.SelectorExpr:
		return f.Sel
	}
	return nil
}

// evaluator evaluates name parts in fn (nil outside functions).
type evaluator struct {
	info *types.Info
	fn   *types.Func
	body *ast.BlockStmt
}

// part evaluates e: a string constant, or a parameter of fn that fn does
// not assign to.
func (ev evaluator) part(e ast.Expr) (part, error) {
	s, err := constString(ev.info, e)
	if err == nil {
		return part{value: s, param: -1}, nil
	}
	id, ok := ast.Unparen(e).(*ast.Ident)
	if !ok || ev.fn == nil {
		return part{}, err
	}
	v, ok := ev.info.Uses[id].(*types.Var)
	if !ok {
		return part{}, err
	}
	params := ev.fn.Signature().Params()
	for i := range params.Len() {
		if params.At(i) != v {
			continue
		}
		if ev.fn.Signature().Variadic() && i == params.Len()-1 {
			return part{}, fmt.Errorf("%s is a variadic parameter", id.Name)
		}
		if ev.assigns(v) {
			return part{}, fmt.Errorf("%s is a parameter %s assigns to: its value here is not the call's", id.Name, ev.fn.Name())
		}
		return part{param: i, name: id.Name}, nil
	}
	return part{}, err
}

// assigns says whether the function's body may change v.
func (ev evaluator) assigns(v *types.Var) bool {
	is := func(e ast.Expr) bool {
		id, ok := ast.Unparen(e).(*ast.Ident)
		return ok && ev.info.Uses[id] == v
	}
	found := false
	ast.Inspect(ev.body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			found = found || slices.ContainsFunc(n.Lhs, is)
		case *ast.IncDecStmt:
			found = found || is(n.X)
		case *ast.UnaryExpr:
			found = found || (n.Op == token.AND && is(n.X))
		case *ast.RangeStmt:
			found = found || (n.Tok == token.ASSIGN && ((n.Key != nil && is(n.Key)) || (n.Value != nil && is(n.Value))))
		}
		return !found
	})
	return found
}

// optsParts evaluates the literal's Namespace, Subsystem and Name.
func (ev evaluator) optsParts(lit *ast.CompositeLit) ([3]string, [3]part, error) {
	labels := [3]string{"Namespace", "Subsystem", "Name"}
	parts := [3]part{{param: -1}, {param: -1}, {param: -1}}
	st, ok := ev.info.TypeOf(lit).Underlying().(*types.Struct)
	if !ok {
		return labels, parts, fmt.Errorf("not a struct")
	}
	for i, el := range lit.Elts {
		var field string
		var value ast.Expr
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			id, ok := kv.Key.(*ast.Ident)
			if !ok {
				return labels, parts, fmt.Errorf("unexpected key %T", kv.Key)
			}
			field, value = id.Name, kv.Value
		} else {
			field, value = st.Field(i).Name(), el
		}
		j := slices.Index(labels[:], field)
		if j < 0 {
			continue
		}
		p, err := ev.part(value)
		if err != nil {
			return labels, parts, fmt.Errorf("%s: %w", field, err)
		}
		parts[j] = p
	}
	return labels, parts, nil
}

// fqNameParts evaluates NewDesc's first argument: a name part, or a call
// of prometheus.BuildFQName with three.
func (ev evaluator) fqNameParts(e ast.Expr) ([3]string, [3]part, error) {
	if call, ok := e.(*ast.CallExpr); ok && isFunc(ev.info, call, "BuildFQName") && len(call.Args) == 3 {
		var labels [3]string
		var parts [3]part
		for i, a := range call.Args {
			labels[i] = fmt.Sprintf("BuildFQName argument %d", i+1)
			p, err := ev.part(a)
			if err != nil {
				return labels, parts, fmt.Errorf("%s: %w", labels[i], err)
			}
			parts[i] = p
		}
		return labels, parts, nil
	}
	labels := [3]string{"", "", "fqName"}
	parts := [3]part{{param: -1}, {param: -1}, {param: -1}}
	p, err := ev.part(e)
	if err != nil {
		return labels, parts, fmt.Errorf("fqName: %w", err)
	}
	parts[2] = p
	return labels, parts, nil
}

func nameField(s string) bool { return s == "Namespace" || s == "Subsystem" || s == "Name" }

// optsKind says whether t is one of client_golang's Opts types (or a
// pointer to one, or a *VecOpts that embeds one) and which kind it makes.
func optsKind(t types.Type) (Kind, bool) {
	if t == nil {
		return "", false
	}
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != PrometheusPkg {
		return "", false
	}
	k, ok := optsKinds[n.Obj().Name()]
	return k, ok
}

func constString(info *types.Info, e ast.Expr) (string, error) {
	tv, ok := info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", fmt.Errorf("%s is not a string constant", types.ExprString(e))
	}
	return constant.StringVal(tv.Value), nil
}

// buildFQName is prometheus.BuildFQName.
func buildFQName(namespace, subsystem, name string) string {
	if name == "" {
		return ""
	}
	var parts []string
	for _, s := range []string{namespace, subsystem, name} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "_")
}

// isNewDesc matches prometheus.NewDesc and the method V2.NewDesc.
func isNewDesc(info *types.Info, call *ast.CallExpr) bool { return isFunc(info, call, "NewDesc") }

func isFunc(info *types.Info, call *ast.CallExpr, name string) bool {
	var id *ast.Ident
	switch f := call.Fun.(type) {
	case *ast.Ident:
		id = f
	case *ast.SelectorExpr:
		id = f.Sel
	default:
		return false
	}
	fn, ok := info.Uses[id].(*types.Func)
	return ok && fn.Name() == name && fn.Pkg() != nil && fn.Pkg().Path() == PrometheusPkg
}
