// Package metricnames finds, in the source of Go programs, the names of the
// Prometheus metrics they export: every prometheus.*Opts composite literal
// (CounterOpts, GaugeOpts, HistogramOpts, SummaryOpts, ...) and every
// NewDesc call of client_golang, with Namespace, Subsystem and Name (or
// NewDesc's fqName) evaluated as constants by go/types.
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
	out := map[string]Metric{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			errs = append(errs, fmt.Errorf("package %s: %s", p.PkgPath, e))
		}
		if len(p.Errors) > 0 {
			continue
		}
		ms, err := Declared(p.Fset, p.TypesInfo, p.Syntax)
		if err != nil {
			errs = append(errs, fmt.Errorf("package %s: %w", p.PkgPath, err))
		}
		for _, m := range ms {
			for _, s := range m.Series() {
				out[s] = m
			}
		}
	}
	return out, errors.Join(errs...)
}

// Declared returns the metrics the files declare, and an error for each
// declaration whose name it cannot evaluate.
func Declared(fset *token.FileSet, info *types.Info, files []*ast.File) ([]Metric, error) {
	var out []Metric
	var errs []error
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				kind, ok := optsKind(info.TypeOf(n))
				if !ok {
					return true
				}
				name, err := optsName(info, n)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %s literal: %w", fset.Position(n.Pos()),
						types.TypeString(info.TypeOf(n), func(p *types.Package) string { return p.Name() }), err))
					return true
				}
				out = append(out, Metric{Name: name, Kind: kind, Pos: fset.Position(n.Pos()).String()})
			case *ast.CallExpr:
				if !isNewDesc(info, n) {
					return true
				}
				if len(n.Args) == 0 {
					return true
				}
				name, err := fqName(info, n.Args[0])
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: NewDesc: %w", fset.Position(n.Pos()), err))
					return true
				}
				out = append(out, Metric{Name: name, Kind: Desc, Pos: fset.Position(n.Pos()).String()})
			case *ast.AssignStmt:
				// o.Name = x after the literal would change a name the
				// literal does not show.
				for _, lhs := range n.Lhs {
					sel, ok := lhs.(*ast.SelectorExpr)
					if !ok || !nameField(sel.Sel.Name) {
						continue
					}
					if _, ok := optsKind(info.TypeOf(sel.X)); ok {
						errs = append(errs, fmt.Errorf("%s: %s assigned outside an Opts literal: its value cannot be checked",
							fset.Position(lhs.Pos()), sel.Sel.Name))
					}
				}
			}
			return true
		})
	}
	return out, errors.Join(errs...)
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

// optsName evaluates the literal's Namespace, Subsystem and Name into the
// full name, as prometheus.BuildFQName does.
func optsName(info *types.Info, lit *ast.CompositeLit) (string, error) {
	st, ok := info.TypeOf(lit).Underlying().(*types.Struct)
	if !ok {
		return "", fmt.Errorf("not a struct")
	}
	parts := map[string]string{}
	for i, el := range lit.Elts {
		var field string
		var value ast.Expr
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			id, ok := kv.Key.(*ast.Ident)
			if !ok {
				return "", fmt.Errorf("unexpected key %T", kv.Key)
			}
			field, value = id.Name, kv.Value
		} else {
			field, value = st.Field(i).Name(), el
		}
		if !nameField(field) {
			continue
		}
		s, err := constString(info, value)
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		parts[field] = s
	}
	name := buildFQName(parts["Namespace"], parts["Subsystem"], parts["Name"])
	if name == "" {
		return "", fmt.Errorf("no Name")
	}
	return name, nil
}

// fqName evaluates NewDesc's first argument: a constant, or a call of
// prometheus.BuildFQName with constant arguments.
func fqName(info *types.Info, e ast.Expr) (string, error) {
	if call, ok := e.(*ast.CallExpr); ok && isFunc(info, call, "BuildFQName") && len(call.Args) == 3 {
		var p [3]string
		for i, a := range call.Args {
			s, err := constString(info, a)
			if err != nil {
				return "", fmt.Errorf("BuildFQName argument %d: %w", i+1, err)
			}
			p[i] = s
		}
		return buildFQName(p[0], p[1], p[2]), nil
	}
	s, err := constString(info, e)
	if err != nil {
		return "", fmt.Errorf("fqName: %w", err)
	}
	if s == "" {
		return "", fmt.Errorf("empty fqName")
	}
	return s, nil
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
