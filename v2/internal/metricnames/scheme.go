package metricnames

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The names every renderer exports (a component that syncs a desired state
// into a dataplane), each under its own prefix: vcoil_<subsystem>. They are
// stated here, apart from the code that makes them, so that a renderer that
// spells them otherwise is found whatever made its metrics.
const (
	// SyncDuration is a histogram of the syncs' durations, by kind.
	SyncDuration = "_sync_duration_seconds"
	// SyncFailures is a counter of the syncs that failed, by kind.
	SyncFailures = "_sync_failures_total"
	// LastSync is a gauge: the Unix time of the last sync that succeeded.
	LastSync = "_last_sync_timestamp_seconds"
)

// syncSet is the one set, with the kind each name is declared as.
var syncSet = []struct {
	suffix string
	kind   Kind
}{{SyncDuration, Histogram}, {SyncFailures, Counter}, {LastSync, Gauge}}

// Words that make a name one of the set's spelt otherwise: an operation
// (render_duration_seconds, apply_...), and a failure (sync_errors_total).
var (
	operationWords = []string{"sync", "resync", "render", "apply", "update", "reconcile", "transaction", "txn"}
	failureWords   = []string{"errors", "error", "failures", "failure", "failed", "fails"}
)

// CheckSyncScheme checks the metrics (as Load returns them) against the
// set renderers export: every prefix that has one name of the set has all
// three, of their kinds; and no other name times, stamps or counts the
// failures of an operation (render_errors_total, apply_duration_seconds,
// sync_errors_total, last_render_timestamp_seconds...). exempt names the
// metrics, present or missing, that may break these rules, each with the
// reason; an exemption that no metric needs any more is an error too, so
// that the list only shrinks.
func CheckSyncScheme(metrics map[string]Metric, exempt map[string]string) error {
	byName := map[string]Metric{}
	for _, m := range metrics {
		byName[m.Name] = m
	}
	var errs []string
	used := map[string]bool{}
	refuse := func(name, msg string) {
		if _, ok := exempt[name]; ok {
			used[name] = true
			return
		}
		errs = append(errs, msg)
	}

	prefixes := map[string]bool{}
	for name := range byName {
		for _, s := range syncSet {
			if p, ok := strings.CutSuffix(name, s.suffix); ok && p != "" {
				prefixes[p] = true
			}
		}
	}
	for p := range prefixes {
		for _, s := range syncSet {
			name := p + s.suffix
			m, ok := byName[name]
			switch {
			case !ok:
				refuse(name, fmt.Sprintf("%s is missing: %s has %s, and a renderer exports the whole set (%s, %s, %s)",
					name, p, strings.Join(present(byName, p), ", "), SyncDuration, SyncFailures, LastSync))
			case m.Kind != s.kind:
				refuse(name, fmt.Sprintf("%s (%s) is a %s: the set's %s is a %s", name, m.Pos, m.Kind, s.suffix, s.kind))
			}
		}
	}

	for name, m := range byName {
		if inSet(name) {
			continue
		}
		words := strings.Split(name, "_")
		op := slices.ContainsFunc(words, func(w string) bool { return slices.Contains(operationWords, w) })
		if !op {
			continue
		}
		failure := slices.ContainsFunc(words, func(w string) bool { return slices.Contains(failureWords, w) })
		switch {
		case failure:
			refuse(name, fmt.Sprintf("%s (%s) counts failures of an operation: a renderer's failed syncs are <prefix>%s", name, m.Pos, SyncFailures))
		case strings.HasSuffix(name, "_seconds") || strings.HasSuffix(name, "_timestamp"):
			refuse(name, fmt.Sprintf("%s (%s) times an operation: a renderer's syncs take <prefix>%s and end at <prefix>%s",
				name, m.Pos, SyncDuration, LastSync))
		}
	}

	for name, why := range exempt {
		if !used[name] {
			errs = append(errs, fmt.Sprintf("%s is exempt (%s) but follows the scheme, or is gone: remove the exemption", name, why))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	return errors.New(strings.Join(errs, "\n"))
}

// inSet says whether name is one of the set's, under some prefix.
func inSet(name string) bool {
	for _, s := range syncSet {
		if p, ok := strings.CutSuffix(name, s.suffix); ok && p != "" {
			return true
		}
	}
	return false
}

// present lists the set's names prefix has.
func present(byName map[string]Metric, prefix string) []string {
	var out []string
	for _, s := range syncSet {
		if _, ok := byName[prefix+s.suffix]; ok {
			out = append(out, s.suffix)
		}
	}
	return out
}
